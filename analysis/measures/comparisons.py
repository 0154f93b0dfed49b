"""Arms compared on held-out scores at equal budgets: one model's score at one k with the sampling
settings it was measured under, comparisons that refuse to run at unequal k, temperature or token
limits, and every pair of arms at every checkpoint they share (differences of each seed's mean over the
held-out prompts, with Student's t interval and the exact test over those per-seed values: both for new
seeds on these prompts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from analysis.data.alignment import (
    SAMPLES,
    TOKENS,
    UPDATES,
    at_point,
    equal_tokens_point,
    equal_updates_point,
    final_alignment,
)
from analysis.data.arms import arm_pairs, iter_arms
from analysis.data.checkpoints import BASE, FINAL, checkpoint_labels, checkpoint_rank, steps_text
from analysis.data.resources import RESOURCES, had_more
from analysis.measures.scores import prompt_scores, smallest_n
from analysis.stats.at_k import BudgetMismatch, per_prompt, score_column
from analysis.stats.exact_tests import seed_test
from analysis.stats.intervals import bootstrap_mean_ci, seed_difference_ci

# config columns that change what a sample is worth; two results compare only when all agree
# (`temperature` is load's alias of rollout.temperature)
# Eval samples are drawn at eval.temperature with the rollout's token limit: both must match for
# two checkpoints' pass@k or cons@k to be comparable (the training temperature need not). The settings each row
# recorded come first (`analysis.data.settings`: an evaluation may have sampled otherwise than the config says).
SAMPLING_KEYS = ("eval_temperature", "eval_top_p", "eval_max_new_tokens", "eval.temperature", "rollout.max_new_tokens",
                 "rollout.top_p", "rollout.top_k")


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
    settings = sampling_settings(eval, settings_keys)
    scores = per_prompt(eval, [k], [metric])
    return AtK(metric, k, settings, scores.groupby("prompt_id", observed=True)[score_column(metric, k)].mean())


def sampling_settings(rows: pd.DataFrame, keys: Sequence[str] = SAMPLING_KEYS) -> dict[str, object]:
    """The one value of each of `keys` (the columns present) in `rows`, or BudgetMismatch where they mix."""
    settings = {}
    for key in keys:
        if key not in rows.columns:
            continue
        values = rows[key].dropna().unique().tolist()
        if len(values) > 1:
            raise BudgetMismatch(f"these rows mix {key} values {values}: score each setting on its own")
        settings[key] = values[0] if values else None
    return settings


@dataclass(frozen=True)
class Comparison:
    """b minus a on the prompts both were scored on, with a percentile bootstrap interval over those prompts
    (each prompt's b − a resampled), the models held fixed."""

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

    An `AtK` holds one score per prompt (several seeds averaged into it), so no seed replicate is left
    to measure how trained models vary: the interval resamples prompts only and covers new prompts for
    these models. Arms of several seeds are compared by `compare_arms` (Student's t over seeds).
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
# each side's resources at the compared point (means over the arm's jobs) and which of them each side had more
# than 10% more of (`resources.had_more`: "updates, samples"; "" for none): what a winner may owe its win to
COMPARISON_COLUMNS = ("metric", "k", "checkpoint", "alignment", "a", "b", "steps_a", "steps_b", "updates_a",
                      "updates_b", "samples_a", "samples_b", "tokens_a", "tokens_b", "flops_a", "flops_b",
                      "a_had_more", "b_had_more", *COMPARED, "refused")
PER_SEED_COLUMNS = ("metric", "k", "checkpoint", "a", "b", "seed_a", "seed_b", "mean_a", "mean_b", "difference")
ARM_TEST = ("Estimate: the mean over seeds of each seed's mean over the held-out prompts; interval: Student's t "
            "over those per-seed values (of the per-seed differences when both arms ran the same seeds, else with "
            "unequal variances), for new seeds (trained models) on these prompts, as the test beside it: the prompts "
            "are held fixed, not resampled; p: exact sign-flip test over paired "
            "seeds, else exact permutation test over seeds. With one seed on a side there is no interval and no "
            "p (empty): one seed shows nothing of how seeds vary")


Point = tuple[str, object]  # (alignment, where): (samples, a label), (updates, a count), (tokens, a multiple)


class Selection(NamedTuple):
    """An arm's eval rows at one aligned point: its jobs' steps there as text, the mean of each resource its jobs
    had spent there (`resources.RESOURCES`: updates, samples, tokens, flops), and the sampling settings
    (`_settings`)."""

    rows: pd.DataFrame
    steps: str
    spent: dict[str, float]
    settings: dict


class Comparisons(NamedTuple):
    """`table`: one row per comparison (COMPARISON_COLUMNS); `per_seed`: each seed's difference."""

    table: pd.DataFrame
    per_seed: pd.DataFrame


def seed_of_jobs(rows: pd.DataFrame) -> pd.Series:
    """Each job's seed (the `seed` column; the job's name where there is none), indexed by job name."""
    jobs = rows.drop_duplicates("job")
    seeds = jobs["seed"].astype(str) if "seed" in jobs else jobs["job"].astype(str)
    return pd.Series(seeds.to_numpy(), index=jobs["job"].astype(str).to_numpy())


def score_matrix(rows: pd.DataFrame, metric: str, k: int, scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """Scores of one arm at one checkpoint: prompts (rows) x seeds (columns), each cell a job's
    pass@k or cons@k of that prompt. `rows`: the arm's eval rows there (or one row per job and step);
    `scores`: their per-prompt scores (`per_prompt`), computed from `rows` when not given."""
    scores = per_prompt(rows, [k], [metric]) if scores is None else scores
    scores = scores.assign(seed=scores["job"].astype(str).map(seed_of_jobs(rows)))
    return scores.pivot_table(index="prompt_id", columns="seed", values=score_column(metric, k), aggfunc="mean",
                              observed=True)


def compare_arms(a: pd.DataFrame, b: pd.DataFrame, level: float = 0.95) -> tuple[dict, pd.DataFrame]:
    """b minus a, from two score matrices (prompts x seeds), on their common prompts: the fields of
    COMPARED, and each seed's difference (pairs where the seed sets match, else each seed's mean).

    Each seed's value is its mean over the common prompts; the interval is Student's t of those values
    (`seed_difference_ci`: of the per-seed differences when paired, else Welch's) and `p_value` the exact
    test over the same values (`seed_test`), so both are for new seeds on these prompts. NaN for both with
    one seed on a side."""
    common = a.index.intersection(b.index)
    a, b = a.loc[common].dropna(), b.loc[common].dropna()
    common = a.index.intersection(b.index)
    if common.empty:
        raise ValueError("the two scores share no prompt")
    paired = sorted(a.columns) == sorted(b.columns)
    if paired:
        b = b[a.columns]
    x, y = a.loc[common].to_numpy(), b.loc[common].to_numpy()  # (prompts, seeds)
    low, high = seed_difference_ci(x, y, paired, level)
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


@dataclass(frozen=True)
class Pair:
    """One comparison's two sides: arm `a` at `point_a` against arm `b` at `point_b` (an arm's final against its
    own base too), named `checkpoint` in the table."""

    checkpoint: str
    a: str
    point_a: Point
    b: str
    point_b: Point

    def sides(self) -> tuple[tuple[str, Point], tuple[str, Point]]:
        return (self.a, self.point_a), (self.b, self.point_b)


def checkpoint_comparisons(eval: pd.DataFrame, by: Sequence[str], points: Sequence[tuple[str, int]],
                           n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                           scores: pd.DataFrame | None = None) -> Comparisons:
    """Arms compared at aligned checkpoints, for each (metric, k) in `points`:

    - each pair of arms (`by`) at "base" (step 0) and at "final" (each job at its last evaluated
      step, so jobs stopped by an equal sample budget at different steps are compared at their ends);
    - each pair of arms at every intermediate checkpoint (samples drawn, `checkpoint_labels`; a "step N" label
      only where the rows count no samples) that every job of both arms has;
    - each arm's final against its base ("final vs base");
    - each pair of arms at the study's equal-updates point (`alignment.equal_updates_point`: the largest number
      of updates every job was evaluated at, where the jobs took different numbers) and, where the runs evaluate
      on a token schedule, at its equal-tokens point: rows whose `alignment` is `updates` or `tokens` (the
      others: `samples`).

    Every row names the jobs' steps (as text) and, on each side, the mean updates, samples, tokens and FLOPs the
    jobs had spent there, and which of these each side had more than 10% more of (`a_had_more`, `b_had_more`).

    Differences are b − a over the prompts both were scored on, with `compare_arms`' Student's t interval
    over seeds and its exact test across seeds (both of each seed's mean over these prompts; none with one
    seed on a side). A comparison that cannot be made (unequal k, sampling settings or token limits; too few
    samples) is a row with the reason in `refused`. `n_boot` and `seed` are accepted for older callers:
    nothing here is resampled.
    `scores`: `prompt_scores(eval, ...)` at the ks of `points` within every prompt's samples, when the
    caller has it.
    """
    ks = [k for k in sorted({k for _, k in points}) if k <= smallest_n(eval)]
    scores = prompt_scores(eval, ks) if scores is None else scores
    steps = eval.drop_duplicates(["job", "step"])  # what the comparisons need of the eval rows is per job and step
    steps = steps.assign(checkpoint=checkpoint_labels(steps))
    arms = {label: rows for label, rows in iter_arms(steps, by)}
    aligned = _aligned_points(steps)
    pairs = _pairs(steps, by, arms, aligned)
    names = {(alignment, point): name for alignment, point, name in aligned}
    sides = list(dict.fromkeys(side for pair in pairs for side in pair.sides()))  # each (arm, point) once
    selections = {(arm, point): _selection(arms[arm], point) for arm, point in sides}
    metrics = list(dict.fromkeys(points))
    scored_at = pd.MultiIndex.from_arrays([scores["job"].astype(str), scores["step"]])
    scored = {side: _scored(scores, scored_at, selections[side].rows, _point_name(side[1], names)) for side in sides}
    matrices = {(*side, metric, k): _matrix(eval, selections[side].rows, scored[side], metric, k)
                for metric, k in metrics for side in sides}
    final_by = final_alignment(steps)  # the budget that ended the jobs: what their last checkpoints share
    records, per_seed = [], []
    for metric, k in metrics:
        for pair in pairs:
            at_a, at_b = selections[pair.a, pair.point_a], selections[pair.b, pair.point_b]
            record = _record(pair, metric, k, at_a, at_b, final_by, names)
            seeds = _compared(record, matrices[pair.a, pair.point_a, metric, k],
                              matrices[pair.b, pair.point_b, metric, k], at_a, at_b, level)
            records.append(record)
            if seeds is not None:
                per_seed.append(seeds)
    table = pd.DataFrame(records, columns=list(COMPARISON_COLUMNS))
    seeds = pd.concat(per_seed, ignore_index=True) if per_seed else pd.DataFrame()
    return Comparisons(table, seeds.reindex(columns=list(PER_SEED_COLUMNS)))


def _aligned_points(steps: pd.DataFrame) -> list[tuple[str, object, str]]:
    """(alignment, point, its name) of the study's equal-updates and equal-tokens points, where it has them."""
    at_updates, at_tokens = equal_updates_point(steps), equal_tokens_point(steps)
    aligned: list[tuple[str, object, str]] = [(UPDATES, at_updates, f"{at_updates} updates")] \
        if at_updates is not None else []
    aligned += [(TOKENS, at_tokens, f"{at_tokens:,.0f} tokens")] if at_tokens is not None else []
    return aligned


def _pairs(steps: pd.DataFrame, by: Sequence[str], arms: dict[str, pd.DataFrame],
           aligned: Sequence[tuple[str, object, str]]) -> list[Pair]:
    """Every pair of arms at base, final, each checkpoint all their jobs share and each aligned point; then each
    arm's final against its base."""
    job_labels = {label: rows.groupby("job", observed=True)["checkpoint"].unique().map(set)
                  for label, rows in arms.items()}
    counted = "samples_total" in steps and steps["samples_total"].notna().any()
    taken = {name for _, _, name in aligned}  # one comparison a name: the per-seed rows are looked up by it
    pairs = []
    for (a, _), (b, _) in arm_pairs(steps, by):  # in a two-key grid, within each level of the second key
        pairs += [Pair(BASE, a, (SAMPLES, BASE), b, (SAMPLES, BASE)),
                  Pair(FINAL, a, (SAMPLES, FINAL), b, (SAMPLES, FINAL))]
        # the points aligned by samples drawn; where the rows count samples, a "step N" label (a second checkpoint
        # within one multiple of `eval.every_samples`) is no budget the jobs share: the equal-updates point is
        common = {label for label in set.intersection(*job_labels[a], *job_labels[b]) - {BASE, FINAL}
                  if not (counted and label.startswith("step ")) and label not in taken}
        pairs += [Pair(label, a, (SAMPLES, label), b, (SAMPLES, label))
                  for label in sorted(common, key=checkpoint_rank)]
        pairs += [Pair(name, a, (alignment, point), b, (alignment, point)) for alignment, point, name in aligned]
    return pairs + [Pair("final vs base", arm, (SAMPLES, BASE), arm, (SAMPLES, FINAL)) for arm in arms]


def _selection(rows: pd.DataFrame, point: Point) -> Selection:
    """An arm's jobs and steps at an aligned point (`rows`: its rows, one per job and step), each job's step
    there, the mean of each resource spent, and the sampling settings (`_settings`)."""
    rows = at_point(rows, *point)
    once = rows.drop_duplicates("job")
    spent = {name: once[column].astype(float).mean() if column in rows and len(once) else np.nan
             for name, (column, _) in RESOURCES.items()}
    return Selection(rows, steps_text(rows[["job", "step"]]), spent, _settings(rows))


def _scored(scores: pd.DataFrame, scored_at: pd.MultiIndex, rows: pd.DataFrame, where: str) -> pd.DataFrame | str:
    """The per-prompt `scores` (indexed by job and step: `scored_at`) of an arm's selected `rows`, or why there are
    none at `where` (no rows there, or mixed sampling settings)."""
    if not len(rows):
        return f"no eval rows at {where}"
    try:
        sampling_settings(rows)  # refuses mixed sampling settings
    except BudgetMismatch as refusal:
        return str(refusal)
    return scores[scored_at.isin(pd.MultiIndex.from_arrays([rows["job"].astype(str), rows["step"]]))]


def _matrix(eval: pd.DataFrame, rows: pd.DataFrame, mine: pd.DataFrame | str, metric: str, k: int
            ) -> pd.DataFrame | str:
    """The score matrix (`score_matrix`) of an arm's selected `rows` from their per-prompt scores (`_scored`), or
    why there is none (theirs, or a k beyond some prompt's samples)."""
    if isinstance(mine, str):
        return mine
    if k > mine["n"].min():
        return f"k={k} is more than the {mine['n'].min()} samples some prompts have"
    try:
        if score_column(metric, k) not in mine:  # a k beyond some other arm's samples: score this arm's rows alone
            chosen = pd.MultiIndex.from_arrays([rows["job"].astype(str), rows["step"]])
            mine = per_prompt(eval[pd.MultiIndex.from_arrays([eval["job"].astype(str), eval["step"]]).isin(chosen)],
                              [k], [metric])
        return score_matrix(rows, metric, k, mine)
    except BudgetMismatch as refusal:
        return str(refusal)


def _point_name(point: Point, names: dict[Point, str]) -> str:
    """A point as a row names it: a checkpoint label where aligned by samples, else "N updates" or "N tokens"."""
    return str(point[1]) if point[0] == SAMPLES else names[point]


def _record(pair: Pair, metric: str, k: int, at_a: Selection, at_b: Selection, final_by: str,
            names: dict[Point, str]) -> dict[str, object]:
    """A comparison's row before its numbers: what is compared, where, and what each side had spent there."""
    return {"metric": metric, "k": k, "checkpoint": pair.checkpoint,
            "alignment": final_by if pair.checkpoint == FINAL else pair.point_a[0],
            "a": f"{pair.a} @ {_point_name(pair.point_a, names)}",
            "b": f"{pair.b} @ {_point_name(pair.point_b, names)}",
            "steps_a": at_a.steps, "steps_b": at_b.steps,
            **{f"{r}_{side}": at.spent[r] for r in RESOURCES for side, at in (("a", at_a), ("b", at_b))},
            "a_had_more": ", ".join(had_more(at_b.spent, at_a.spent)),
            "b_had_more": ", ".join(had_more(at_a.spent, at_b.spent))}


def _compared(record: dict[str, object], score_a: pd.DataFrame | str, score_b: pd.DataFrame | str,
              at_a: Selection, at_b: Selection, level: float) -> pd.DataFrame | None:
    """`record` given its numbers (`compare_arms`) or the reason it has none (`refused`); each seed's difference,
    labelled by the record, where compared."""
    if isinstance(score_a, str) or isinstance(score_b, str):
        record["refused"] = score_a if isinstance(score_a, str) else score_b
        return None
    try:
        mismatch = _settings_mismatch(at_a.settings, at_b.settings)
        if mismatch:
            raise BudgetMismatch(f"not comparable at unequal budgets: {mismatch}")
        result, seeds = compare_arms(score_a, score_b, level)
    except (BudgetMismatch, ValueError) as refusal:  # unequal budgets, or no prompt in common
        record["refused"] = str(refusal)
        return None
    record |= result
    return seeds.assign(**{key: record[key] for key in ("metric", "k", "checkpoint", "a", "b")})


def _settings(rows: pd.DataFrame) -> dict[str, list]:
    """A selection's values of each sampling setting, in order of appearance (["unknown"]: no column)."""
    return {key: rows[key].dropna().unique().tolist() if key in rows else ["unknown"] for key in SAMPLING_KEYS}


def _settings_mismatch(a: dict[str, list], b: dict[str, list]) -> str:
    """What differs between two selections' sampling settings (`_settings`; "" when nothing does)."""
    reasons = []
    for key in SAMPLING_KEYS:
        left, right = a[key], b[key]
        if left != right:
            reasons.append(f"{key}={left[0] if len(left) == 1 else left} vs {right[0] if len(right) == 1 else right}")
    return "; ".join(reasons)

