"""Sample budgets at evaluation: unbiased pass@k, exact majority-vote cons@k, curves over k with
bootstrap intervals over prompts, and comparisons that refuse to run at unequal budgets."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import NamedTuple

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.special import comb

from analysis.arms import iter_arms, job_arms
from analysis.labels import sort_naturally
from analysis.stats import bootstrap_difference_ci, bootstrap_mean_ci, comb_ratio, seed_test

METRICS = ("pass@k", "cons@k")
# config columns that change what a sample is worth; two results compare only when all agree
# (`temperature` is load's alias of rollout.temperature)
# Eval samples are drawn at eval.temperature with the rollout's token limit: both must match for
# two checkpoints' pass@k or cons@k to be comparable (the training temperature need not).
SAMPLING_KEYS = ("eval.temperature", "rollout.max_new_tokens", "rollout.top_p", "rollout.top_k")
PROMPT_KEYS = ("job", "step", "prompt_id", "difficulty")  # one eval prompt at one checkpoint
# checkpoint labels that align jobs: the base model, and each job's last evaluated step (the end of
# its budget when the job finished); any other checkpoint is labelled with its step number
BASE, FINAL = "base", "final"


class BudgetMismatch(ValueError):
    """Two results were asked to be compared at different k or sampling settings."""


def pass_at_k(n: ArrayLike, c: ArrayLike, k: ArrayLike) -> np.ndarray:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k) (Chen et al., 2021).

    The ratio is taken in log space, so large n neither overflows nor loses precision.

    >>> print(f"{pass_at_k(4, 1, 2):.3f}")  # one right in four; two draws find it half the time
    0.500
    """
    n, c, k = np.broadcast_arrays(*(np.asarray(x) for x in (n, c, k)))
    if (bad := np.flatnonzero((k > n) | (k < 1))).size:
        raise ValueError(f"k must be within 1..n, got k={k.ravel()[bad[0]]} with n={n.ravel()[bad[0]]}")
    return 1.0 - comb_ratio(n - c, n, k)


def cons_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """Expected majority-vote accuracy of k samples drawn without replacement from the n given.

    Exact over all k-subsets. A missing answer (None) never wins; when several answers tie for
    the most votes, each wins with equal chance. An answer counts as correct with the fraction
    of its samples marked correct (1 or 0 when the marks agree, as they should).

    >>> cons_at_k(["7", "7", "8", None], [True, True, False, False], 1)
    0.5
    """
    n = len(answers)
    if not 1 <= k <= n:
        raise ValueError(f"k must be within 1..n, got k={k} with n={n}")
    return float(cons_curve(answers, correct)[k])


def cons_curve(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> np.ndarray:
    """cons@k for every k at once: element k (0..n) is `cons_at_k(answers, correct, k)`."""
    votes = pd.DataFrame({"answer": pd.Series(answers, dtype=object), "correct": np.asarray(correct, dtype=float)})
    classes = votes.dropna(subset=["answer"]).groupby("answer")["correct"].agg(["size", "mean"])
    return _cons_curve(len(votes) - int(classes["size"].sum()), _signature(classes["size"], classes["mean"]))


def _signature(counts: ArrayLike, values: ArrayLike) -> tuple[tuple[int, float], ...]:
    """Answer classes as a sorted tuple, the cache key: prompts alike up to labels share it."""
    return tuple(sorted(zip(np.asarray(counts, dtype=int).tolist(), np.asarray(values, dtype=float).tolist())))


@lru_cache(maxsize=65536)
def _cons_curve(n_none: int, classes: tuple[tuple[int, float], ...]) -> np.ndarray:
    """Expected majority-vote accuracy for k = 0..n; `classes` holds (votes, correctness) per answer.

    For each winning count t, a product over answers of generating polynomials counts the
    k-subsets in which no answer has more than t votes: P[t, d, s] counts subsets of size d
    with s answers at exactly t votes, and Q[t, d, s] sums the correctness of those s answers
    over the same subsets (the first-order term when a tied answer is weighted 1 + eps*value).
    A subset whose top answers are those s scores their correctness sum / s.
    """
    n = n_none + sum(m for m, _ in classes)
    if not classes:
        return np.zeros(n + 1)
    r = len(classes)
    t = np.arange(1, max(m for m, _ in classes) + 1)[:, None, None]  # (T, 1, 1) winning counts
    lag = np.arange(n + 1)[:, None] - np.arange(n + 1)[None, :]  # (n+1, n+1) votes drawn: d - d'
    P = np.zeros((len(t), n + 1, r + 1))  # (T, subset size, answers at t)
    P[:, : n_none + 1, 0] = comb(n_none, np.arange(n_none + 1))  # missing answers: any number drawn
    Q = np.zeros_like(P)
    for votes, value in classes:
        # multiplying by this answer's polynomial is a matrix product along the subset size:
        # drawing x < t of its votes keeps s, drawing exactly t adds one answer at the top
        ways = np.where((lag >= 0) & (lag <= votes), comb(votes, np.clip(lag, 0, votes)), 0.0)  # (n+1, n+1)
        below = ways * (lag < t)  # (T, n+1, n+1)
        equal = ways * (lag == t)
        top_p, top_q = equal @ P, equal @ (Q + value * P)
        P, Q = below @ P, below @ Q
        P[..., 1:] += top_p[..., :-1]
        Q[..., 1:] += top_q[..., :-1]
    share = np.r_[0.0, 1.0 / np.arange(1, r + 1)]  # 1/s; s = 0 means no answer reached t
    return (Q * share).sum(axis=(0, 2)) / comb(n, np.arange(n + 1))


def per_prompt(eval: pd.DataFrame, ks: Sequence[int], metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """pass@k / cons@k of each prompt at each checkpoint of each job: columns PROMPT_KEYS, n,
    then one per metric and k ("pass@4"). Every k must be within every prompt's n samples."""
    if unknown := set(metrics) - set(METRICS):
        raise ValueError(f"metrics {sorted(unknown)}: must be among {', '.join(METRICS)}")
    code = eval.groupby(list(PROMPT_KEYS), observed=True, sort=False).ngroup().to_numpy()  # (rows,) each one's prompt
    first = np.unique(code, return_index=True)[1]
    out = eval.iloc[first][list(PROMPT_KEYS)].reset_index(drop=True)
    n = np.bincount(code)
    c = np.bincount(code, weights=eval["correct"].to_numpy(float))
    if max(ks) > n.min():
        raise BudgetMismatch(f"k={max(ks)} is more than the {n.min()} samples some prompts have")
    out["n"] = n
    if "pass@k" in metrics:
        for k in ks:
            out[f"pass@{k}"] = pass_at_k(n, c, k)
    if "cons@k" in metrics:
        curves = _cons_curves(code, eval["answer"], eval["correct"], n)
        for k in ks:
            out[f"cons@{k}"] = curves[:, k]
    return out


def _cons_curves(code: np.ndarray, answers: pd.Series, correct: pd.Series, n: np.ndarray) -> np.ndarray:
    """cons_curve of each prompt (rows: prompt codes 0.., columns: k up to the smallest n), from
    vote counts per answer: the only Python loop is over prompts, and alike prompts share a cache entry."""
    votes = pd.DataFrame({"code": code, "answer": answers, "correct": correct.to_numpy(float)})
    # one row per (prompt, answer), sorted by prompt; a missing answer is no row
    classes = votes.groupby(["code", "answer"], observed=True)["correct"].agg(["size", "mean"]).reset_index()
    bounds = np.searchsorted(classes["code"].to_numpy(), np.arange(len(n) + 1))
    size, mean = classes["size"].to_numpy(), classes["mean"].to_numpy()
    curves = np.empty((len(n), n.min() + 1))
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        curve = _cons_curve(int(n[i] - size[lo:hi].sum()), _signature(size[lo:hi], mean[lo:hi]))
        curves[i] = curve[: n.min() + 1]
    return curves


def default_ks(n: int) -> list[int]:
    """Powers of two up to n, and n itself."""
    return sorted({2**i for i in range(n.bit_length()) if 2**i <= n} | {n})


def _column(metric: str, k: int) -> str:
    return metric.replace("@k", f"@{k}")


def attach_samples(eval: pd.DataFrame, groups: pd.DataFrame | None) -> pd.DataFrame:
    """`eval` with `samples_total` (samples its job had drawn at each checkpoint) filled in: from the
    eval rows themselves where the trainer wrote it, else from the groups table (the running total
    at the checkpoint's step; 0 at step 0); NaN where neither says."""
    samples = eval["samples_total"].to_numpy(float) if "samples_total" in eval else np.full(len(eval), np.nan)
    samples = np.where(eval["step"].to_numpy() == 0, 0.0, samples)
    missing = np.isnan(samples)
    if missing.any() and groups is not None and not groups.empty:
        drawn = groups.groupby([groups["job"].astype(str), "step"], observed=True)["samples_total"].max()
        drawn = drawn.groupby(level=0).cummax().reset_index().rename(columns={"samples_total": "drawn"})
        left = pd.DataFrame({"job": eval["job"].astype(str).to_numpy(), "step": eval["step"].astype("int64").to_numpy(),
                             "row": np.arange(len(eval))})
        merged = pd.merge_asof(left.sort_values("step"), drawn.assign(step=drawn["step"].astype("int64"))
                               .sort_values("step"), on="step", by="job").sort_values("row")
        samples = np.where(missing, merged["drawn"].to_numpy(float), samples)
    return eval.assign(samples_total=samples)


def checkpoint_labels(eval: pd.DataFrame) -> pd.Series:
    """Each eval row's checkpoint, aligned across jobs by samples drawn, never by step number:
    "base" at step 0, "final" at its job's last evaluated step (the end of its budget when the job
    finished), else the samples drawn there: "12800 samples", rounded down to a multiple of the
    job's `eval.every_samples` when set (the trainer evaluates on crossing one, so jobs drawing at
    different rates share the label; a second checkpoint of a job within one multiple keeps its
    step, "step 130"). Without samples_total (no column, no groups table) the label is "step N"."""
    step = eval["step"].to_numpy()
    last = eval.groupby("job", observed=True)["step"].transform("max").to_numpy()
    samples = eval["samples_total"].to_numpy(float) if "samples_total" in eval else np.full(len(eval), np.nan)
    every = (pd.to_numeric(eval["eval.every_samples"], errors="coerce").to_numpy(float)
             if "eval.every_samples" in eval else np.zeros(len(eval)))
    every = np.where(np.isnan(every) | (every <= 0), 0, every)
    point = np.where(every > 0, np.floor(samples / np.where(every > 0, every, 1)) * every, samples)
    frame = pd.DataFrame({"job": eval["job"].astype(str).to_numpy(), "point": point, "step": step})
    first = frame.groupby(["job", "point"], dropna=False)["step"].transform("min").to_numpy() == step
    label = np.array([f"step {s}" if np.isnan(p) or not f else f"{int(p)} samples"
                      for s, p, f in zip(step, point, first)], dtype=object) if len(step) else np.zeros(0, object)
    label[step == last] = FINAL
    label[step == 0] = BASE
    return pd.Series(label, index=eval.index, name="checkpoint")


def job_checkpoints(eval: pd.DataFrame) -> pd.DataFrame:
    """One row per job and evaluated step: job, step, checkpoint (as `checkpoint_labels`)."""
    steps = eval[["job", "step"]].drop_duplicates()
    steps = steps.assign(checkpoint=checkpoint_labels(steps), job=steps["job"].astype(str))
    return sort_naturally(steps, ["job", "step"])


def checkpoint_rank(label: object) -> tuple[int, float]:
    """Sort key of checkpoint labels: base, the intermediate points in order ("6400 samples"; "step N"
    after them), final."""
    if label == BASE:
        return (0, 0.0)
    if label == FINAL:
        return (3, 0.0)
    text = str(label)
    if text.startswith("step "):
        return (2, float(text.removeprefix("step ")))
    return (1, float(text.removesuffix(" samples")))


def steps_text(rows: pd.DataFrame) -> str:
    """The step of each job in `rows` (job, step; one step per job), in job order: "80, 83"."""
    per_job = rows.drop_duplicates(["job", "step"]).assign(job=lambda f: f["job"].astype(str))
    return ", ".join(str(int(step)) for step in sort_naturally(per_job, ["job", "step"])["step"])


def complete_checkpoints(checkpoints: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """The (arm, checkpoint) pairs to report, from rows holding job, step, checkpoint and the arm
    keys `by`: base and final always, an intermediate checkpoint only where every job of its arm
    has it (elsewhere its mean would be over some seeds only). Columns: *by, checkpoint, steps
    (each job's step, in job order: "80, 83" for a final reached at different steps), jobs."""
    pairs = checkpoints.drop_duplicates(["job", "step"])
    rows = []
    for key, arm in pairs.groupby(list(by), observed=True, dropna=False, sort=False):
        jobs = arm["job"].nunique()
        for label, part in arm.groupby("checkpoint", sort=False):
            if label in (BASE, FINAL) or part["job"].nunique() == jobs:
                rows.append((*(key if isinstance(key, tuple) else (key,)), label, steps_text(part),
                             part["job"].nunique()))
    return pd.DataFrame(rows, columns=[*by, "checkpoint", "steps", "jobs"])


def at_k_curves(eval: pd.DataFrame, by: Sequence[str], ks: Sequence[int] | None = None, n_boot: int = 1000,
                level: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Mean pass@k and cons@k over prompts for each arm (`by`), checkpoint and difficulty (and
    "all" difficulties), with percentile bootstrap intervals clustered by prompt: a prompt's
    scores in every job of the arm move together (at the base model the jobs are one model on
    the same prompts, not independent draws). Checkpoints are aligned across jobs by
    `checkpoint_labels` (samples drawn), and an intermediate one is kept only where every job of
    the arm has it (`complete_checkpoints`). Long format: *by, checkpoint, steps (each job's step,
    "80, 83"), samples (mean samples drawn by the arm's jobs there), difficulty, metric, k, mean,
    ci_low, ci_high, prompts (distinct prompts), jobs. `ks` defaults to the powers of two up to the
    fewest samples any prompt has."""
    ks = list(ks or default_ks(int(eval.groupby(list(PROMPT_KEYS), observed=True).size().min())))
    scores = per_prompt(eval, ks)
    scores["job"] = scores["job"].astype(str)
    labels = eval[["job", "step"]].assign(job=eval["job"].astype(str), checkpoint=checkpoint_labels(eval),
                                          samples=eval["samples_total"] if "samples_total" in eval else np.nan)
    scores = scores.merge(labels.drop_duplicates(["job", "step"]), on=["job", "step"])
    arms = job_arms(eval, by)
    scores = scores.join(arms.set_axis(arms.index.astype(str)), on="job")
    kept = complete_checkpoints(scores, by)
    scores = scores.merge(kept.drop(columns="jobs"), on=[*by, "checkpoint"])
    scores["difficulty"] = scores["difficulty"].astype(str)
    keys = [*by, "checkpoint", "steps", "difficulty"]
    columns = [_column(m, k) for m in METRICS for k in ks]
    rows = []
    for key, part in pd.concat([scores, scores.assign(difficulty="all")]).groupby(keys, observed=True, dropna=False):
        clustered = part.groupby("prompt_id", observed=True)[columns].mean().to_numpy()  # (prompts, metrics * ks)
        low, high = bootstrap_mean_ci(clustered, n_boot, level, seed)
        samples = part.drop_duplicates("job")["samples"].astype(float).mean()
        for i, (metric, k) in enumerate((m, k) for m in METRICS for k in ks):
            rows.append((*key, samples, metric, k, clustered[:, i].mean(), low[i], high[i], len(clustered),
                         part["job"].nunique()))
    out = pd.DataFrame(rows, columns=[*keys, "samples", "metric", "k", "mean", "ci_low", "ci_high", "prompts", "jobs"])
    return sort_naturally(out, [*by, "checkpoint", "difficulty", "metric", "k"], {"checkpoint": checkpoint_rank})


@dataclass(frozen=True)
class AtK:
    """One model's or strategy's score at one k, with the sampling settings it was measured under."""

    metric: str
    k: int
    settings: dict[str, object]
    scores: pd.Series  # mean score per prompt_id

    @property
    def mean(self) -> float:
        return float(self.scores.mean())


def at_k(eval: pd.DataFrame, k: int, metric: str = "pass@k", settings_keys: Sequence[str] = SAMPLING_KEYS) -> AtK:
    """Score one model or strategy (eval rows of one checkpoint; several seeds average per
    prompt) at k, recording its sampling settings (the `settings_keys` columns present)."""
    settings = {}
    for key in settings_keys:
        if key not in eval.columns:
            continue
        values = eval[key].dropna().unique().tolist()
        if len(values) > 1:
            raise BudgetMismatch(f"these rows mix {key} values {values}: score each setting on its own")
        settings[key] = values[0] if values else None
    scores = per_prompt(eval, [k], [metric])
    return AtK(metric, k, settings, scores.groupby("prompt_id", observed=True)[_column(metric, k)].mean())


@dataclass(frozen=True)
class Comparison:
    """b minus a on the prompts both were scored on, with a paired bootstrap interval."""

    metric: str
    k: int
    prompts: int
    mean_a: float
    mean_b: float
    difference: float
    ci_low: float
    ci_high: float


def compare_at_k(a: AtK, b: AtK, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> Comparison:
    """Compare two scores at the same budget, or refuse with BudgetMismatch saying what differs.

    A larger k, or another temperature or token limit, changes what a score means; a
    comparison across them would credit the budget to the model.
    """
    reasons = [f"metric {a.metric} vs {b.metric}"] if a.metric != b.metric else []
    if a.k != b.k:
        reasons.append(f"k={a.k} vs k={b.k}")
    for key in sorted(a.settings.keys() | b.settings.keys()):
        left, right = a.settings.get(key, "unknown"), b.settings.get(key, "unknown")
        if left != right:
            reasons.append(f"{key}={left} vs {right}")
    if reasons:
        raise BudgetMismatch(f"not comparable at unequal budgets: {'; '.join(reasons)}")
    common = a.scores.index.intersection(b.scores.index)
    if common.empty:
        raise ValueError("the two scores share no prompt")
    x, y = a.scores[common].to_numpy(), b.scores[common].to_numpy()  # (prompts,) paired
    low, high = bootstrap_mean_ci(y - x, n_boot, level, seed)
    return Comparison(a.metric, a.k, len(common), float(x.mean()), float(y.mean()), float((y - x).mean()),
                      float(low[0]), float(high[0]))


COMPARED = ("prompts", "seeds_a", "seeds_b", "paired", "mean_a", "mean_b", "difference", "ci_low", "ci_high",
            "p_value")
COMPARISON_COLUMNS = ("metric", "k", "checkpoint", "a", "b", "steps_a", "steps_b", "samples_a", "samples_b",
                      *COMPARED, "refused")
PER_SEED_COLUMNS = ("metric", "k", "checkpoint", "a", "b", "seed_a", "seed_b", "mean_a", "mean_b", "difference")
ARM_TEST = ("Estimate: the mean over seeds of the per-prompt mean; interval: bootstrap over prompts (both arms together) "
            "and seeds within each arm (as pairs when paired); p: exact sign-flip test over paired seeds, "
            "else exact permutation test over seeds")


class Comparisons(NamedTuple):
    """`table`: one row per comparison (COMPARISON_COLUMNS); `per_seed`: each seed's difference."""

    table: pd.DataFrame
    per_seed: pd.DataFrame


def seed_of_jobs(rows: pd.DataFrame) -> pd.Series:
    """Each job's seed (the `seed` column; the job's name where there is none), indexed by job name."""
    jobs = rows.drop_duplicates("job")
    seeds = jobs["seed"].astype(str) if "seed" in jobs else jobs["job"].astype(str)
    return pd.Series(seeds.to_numpy(), index=jobs["job"].astype(str).to_numpy())


def score_matrix(rows: pd.DataFrame, metric: str, k: int) -> pd.DataFrame:
    """Scores of one arm at one checkpoint: prompts (rows) x seeds (columns), each cell a job's
    pass@k or cons@k of that prompt."""
    scores = per_prompt(rows, [k], [metric])
    scores["seed"] = scores["job"].astype(str).map(seed_of_jobs(rows))
    return scores.pivot_table(index="prompt_id", columns="seed", values=_column(metric, k), aggfunc="mean",
                              observed=True)


def compare_arms(a: pd.DataFrame, b: pd.DataFrame, n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[dict, pd.DataFrame]:
    """b minus a, from two score matrices (prompts x seeds), on their common prompts: the fields of
    COMPARED, and each seed's difference (pairs where the seed sets match, else each seed's mean)."""
    common = a.index.intersection(b.index)
    a, b = a.loc[common].dropna(), b.loc[common].dropna()
    common = a.index.intersection(b.index)
    if common.empty:
        raise ValueError("the two scores share no prompt")
    paired = sorted(a.columns) == sorted(b.columns)
    if paired:
        b = b[a.columns]
    x, y = a.loc[common].to_numpy(), b.loc[common].to_numpy()  # (prompts, seeds)
    low, high = bootstrap_difference_ci(x, y, paired, n_boot, level, seed)
    per_a, per_b = x.mean(0), y.mean(0)  # (seeds,) each seed's mean over the prompts
    result = {"prompts": len(common), "seeds_a": x.shape[1], "seeds_b": y.shape[1], "paired": paired,
              "mean_a": float(x.mean()), "mean_b": float(y.mean()), "difference": float(y.mean() - x.mean()),
              "ci_low": low, "ci_high": high, "p_value": seed_test(per_a, per_b, paired)}
    if paired:
        per_seed = pd.DataFrame({"seed_a": a.columns, "seed_b": a.columns, "mean_a": per_a, "mean_b": per_b})
    else:
        per_seed = pd.concat([pd.DataFrame({"seed_a": a.columns, "mean_a": per_a}),
                              pd.DataFrame({"seed_b": b.columns, "mean_b": per_b})], ignore_index=True)
    return result, per_seed.assign(difference=per_seed["mean_b"] - per_seed["mean_a"])


def checkpoint_comparisons(eval: pd.DataFrame, by: Sequence[str], points: Sequence[tuple[str, int]],
                           n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> Comparisons:
    """Arms compared at aligned checkpoints, for each (metric, k) in `points`:

    - each pair of arms (`by`) at "base" (step 0) and at "final" (each job at its last evaluated
      step, so jobs stopped by an equal sample budget at different steps are compared at their ends);
    - each pair of arms at every intermediate checkpoint (samples drawn, `checkpoint_labels`) that
      every job of both arms has;
    - each arm's final against its base ("final vs base").

    Differences are b − a over the prompts both were scored on, with `compare_arms`' interval over
    prompts and seeds and its exact test across seeds. A comparison that cannot be made (unequal k,
    sampling settings or token limits; too few samples) is a row with the reason in `refused`.
    """
    eval = eval.assign(checkpoint=checkpoint_labels(eval))
    arms = {label: rows for label, rows in iter_arms(eval, by)}
    job_labels = {label: rows.groupby("job", observed=True)["checkpoint"].unique().map(set)
                  for label, rows in arms.items()}

    selections: dict[tuple[str, str], tuple[pd.DataFrame, str, float]] = {}

    def select(arm: str, point: str) -> tuple[pd.DataFrame, str, float]:
        """The arm's eval rows at a checkpoint, each job's step there, and the mean samples drawn."""
        if (arm, point) not in selections:
            rows = arms[arm]
            rows = rows[rows["checkpoint"] == point]
            drawn = rows.drop_duplicates("job")["samples_total"].astype(float).mean() if "samples_total" in rows \
                else np.nan
            selections[arm, point] = rows, steps_text(rows[["job", "step"]]), drawn
        return selections[arm, point]

    pairs: list[tuple[str, str, str, str, str]] = []  # (checkpoint, arm a, point a, arm b, point b)
    for a, b in combinations(arms, 2):
        pairs += [(BASE, a, BASE, b, BASE), (FINAL, a, FINAL, b, FINAL)]
        common = set.intersection(*job_labels[a], *job_labels[b]) - {BASE, FINAL}
        pairs += [(label, a, label, b, label) for label in sorted(common, key=checkpoint_rank)]
    pairs += [("final vs base", arm, BASE, arm, FINAL) for arm in arms]

    scores: dict[tuple[str, str, str, int], pd.DataFrame | str] = {}  # a score matrix, or why there is none

    def score(arm: str, point: str, metric: str, k: int) -> pd.DataFrame | str:
        if (arm, point, metric, k) not in scores:
            rows = select(arm, point)[0]
            try:
                if not len(rows):
                    raise BudgetMismatch(f"no eval rows at {point}")
                at_k(rows, k, metric)  # refuses mixed sampling settings or too few samples
                scores[arm, point, metric, k] = score_matrix(rows, metric, k)
            except BudgetMismatch as refusal:
                scores[arm, point, metric, k] = str(refusal)
        return scores[arm, point, metric, k]

    records, per_seed = [], []
    for metric, k in dict.fromkeys(points):
        for checkpoint, a, point_a, b, point_b in pairs:
            record: dict[str, object] = {
                "metric": metric, "k": k, "checkpoint": checkpoint, "a": f"{a} @ {point_a}", "b": f"{b} @ {point_b}",
                "steps_a": select(a, point_a)[1], "steps_b": select(b, point_b)[1],
                "samples_a": select(a, point_a)[2], "samples_b": select(b, point_b)[2]}
            score_a, score_b = score(a, point_a, metric, k), score(b, point_b, metric, k)
            if isinstance(score_a, str) or isinstance(score_b, str):
                record["refused"] = score_a if isinstance(score_a, str) else score_b
            else:
                try:
                    mismatch = _settings_mismatch(select(a, point_a)[0], select(b, point_b)[0])
                    if mismatch:
                        raise BudgetMismatch(f"not comparable at unequal budgets: {mismatch}")
                    result, seeds = compare_arms(score_a, score_b, n_boot, level, seed)
                    record |= result
                    per_seed.append(seeds.assign(**{key: record[key] for key in ("metric", "k", "checkpoint", "a",
                                                                                   "b")}))
                except (BudgetMismatch, ValueError) as refusal:  # unequal budgets, or no prompt in common
                    record["refused"] = str(refusal)
            records.append(record)
    table = pd.DataFrame(records, columns=list(COMPARISON_COLUMNS))
    seeds = pd.concat(per_seed, ignore_index=True) if per_seed else pd.DataFrame()
    return Comparisons(table, seeds.reindex(columns=list(PER_SEED_COLUMNS)))


def _settings_mismatch(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """What differs between two selections' sampling settings ("" when nothing does)."""
    reasons = []
    for key in SAMPLING_KEYS:
        left = a[key].dropna().unique().tolist() if key in a else ["unknown"]
        right = b[key].dropna().unique().tolist() if key in b else ["unknown"]
        if left != right:
            reasons.append(f"{key}={left[0] if len(left) == 1 else left} vs {right[0] if len(right) == 1 else right}")
    return "; ".join(reasons)
