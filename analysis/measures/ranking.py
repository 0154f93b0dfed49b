"""Arms ranked on the two questions of a sampler study: held-out pass@1 at the end of the sample
budget, and informative samples per 1,000 drawn counted alike for every arm (1000 × (1 − wasted_frac), a tie rule's
forced advantages and a sampler's cap left out: `analysis.measures.informative`).

Each arm's mean with a 95% interval over seeds (the trained models; pass@1 is measured on one set
of held-out prompts that every arm shares, so the interval is for these prompts: whether another
arm's mean differs is the tests' question, whose intervals are over seeds on these prompts too), and
which pairwise orderings are **resolved**: those whose comparison in the report's tests table
(every pair of arms, Holm within the metric) is a detectable difference by the findings' rule
(`analysis.stats.seeds.detectable`). `ranks` is the range of places an arm can hold given the resolved
orderings alone: an arm resolved above j arms and below i arms ranks between i + 1 and n − j.
An ordering that is not resolved is not claimed, however the means fall.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.alignment import TOKENS, UPDATES, at_point
from analysis.data.arms import iter_arms, job_arms, short_label, unit_keys
from analysis.data.checkpoints import FINAL
from analysis.data.resources import RESOURCES
from analysis.measures.informative import COMPARABLE_METRIC
from analysis.measures.spend import per_job_spend
from analysis.stats.at_k import score_column
from analysis.stats.intervals import SHARE, t_mean_ci
from analysis.stats.seeds import detectable, seed_values

PASS1, INFORMATIVE = "held-out pass@1", "informative per 1,000 drawn"  # counted alike for every arm (`informative`)
PASS1_UPDATES = "held-out pass@1 at equal updates"  # the same arms at the study's equal-updates point
PASS1_TOKENS = "held-out pass@1 at equal tokens"  # at its equal-tokens point (the verdict's; not a ranking section)
RANKED_METRICS = ("held-out pass@1", COMPARABLE_METRIC, "held-out pass@1 (equal updates)")  # the tests' metric behind
TEST_METRIC = {**dict(zip((PASS1, INFORMATIVE, PASS1_UPDATES), RANKED_METRICS)),
               PASS1_TOKENS: "held-out pass@1 (equal tokens)"}
# a difference in the measure = SCALE × the tests'
SCALE = {PASS1: 1.0, INFORMATIVE: -1000.0, PASS1_UPDATES: 1.0, PASS1_TOKENS: 1.0}
INTERVAL = {PASS1: "seeds, on these held-out prompts", INFORMATIVE: "seeds",
            PASS1_UPDATES: "seeds, on these held-out prompts", PASS1_TOKENS: "seeds, on these held-out prompts"}
COLUMNS = ("rank", "arm", "seeds", "mean", "ci_low", "ci_high", "ranks", "above", "below")
# a resolved ordering, better arm first, with both arms' resources at the compared point (the tests' family's
# attribution: `analysis.measures.attribution`) and where it reverses (at another alignment, within difficulties)
ORDERING_COLUMNS = ("better", "worse", "difference", "p_holm", *(f"{r}_{side}" for r in RESOURCES
                                                                 for side in ("better", "worse")),
                    "winner_had_more", "reversal")


@dataclass
class Ranking:
    measure: str
    table: pd.DataFrame  # COLUMNS, best first
    resolved: list[tuple[str, str]]  # (better, worse) for each resolved ordering
    pairs: int  # the pairs of arms tested on the measure (Holm's family)
    seeds: int  # seeds a side in the smallest comparison (what the exact test can reach)
    smallest_p: float
    orderings: pd.DataFrame | None = None  # ORDERING_COLUMNS: each resolved ordering with what the winner had more of

    @property
    def interval(self) -> str:
        """What each arm's interval resamples."""
        return INTERVAL[self.measure]


def pass1_by_arm(scores: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm at its final checkpoints: arm, seeds, mean (over held-out prompts and seeds), ci_low,
    ci_high (over seeds). `scores`: `analysis.measures.scores.seed_scores` with pass@1, each job's mean over the
    held-out prompts at each checkpoint: one trained model's score."""
    final = scores[(scores["checkpoint"] == FINAL) & (scores["metric"] == "pass@k") & (scores["k"] == 1)]
    return pd.DataFrame([_row(label, seed_values(part, "value").to_numpy(float))
                         for label, part in iter_arms(final, arm)])


def pass1_at_updates(prompt_scores: pd.DataFrame, eval: pd.DataFrame, arm: Sequence[str], updates: int
                     ) -> pd.DataFrame:
    """Per arm at a number of updates every job was evaluated at (the equal-updates point): arm, seeds, mean (over
    held-out prompts and seeds), ci_low, ci_high (over seeds). `prompt_scores`: `scores.prompt_scores`, each
    prompt's pass@1 at each job and step; `eval`: the eval rows with `updates`, for each job's step there (its
    first with that many updates), arm and seed."""
    return _pass1_at(prompt_scores, eval, arm, UPDATES, updates)


def pass1_at_tokens(prompt_scores: pd.DataFrame, eval: pd.DataFrame, arm: Sequence[str], tokens: float
                    ) -> pd.DataFrame:
    """`pass1_at_updates` at the study's equal-tokens point (`alignment.equal_tokens_point`: a multiple of
    `eval.every_tokens` every job crossed), each job at its first checkpoint at or past it, as the tests' "(equal
    tokens)" rows compare them; `eval` with `tokens_total` and `eval.every_tokens`."""
    return _pass1_at(prompt_scores, eval, arm, TOKENS, tokens)


def _pass1_at(prompt_scores: pd.DataFrame, eval: pd.DataFrame, arm: Sequence[str], alignment: str, point: float
              ) -> pd.DataFrame:
    """Per arm at one aligned point (`alignment.at_point`): each job's mean pass@1 over the held-out prompts there,
    its arm's mean and Student's t interval over seeds."""
    there = at_point(eval.drop_duplicates(["job", "step"]), alignment, point)
    chosen = pd.MultiIndex.from_arrays([there["job"].astype(str), there["step"]])
    at = prompt_scores[pd.MultiIndex.from_arrays([prompt_scores["job"].astype(str), prompt_scores["step"]])
                       .isin(chosen)]
    per_job = at.groupby("job", observed=True)[score_column("pass@k", 1)].mean().rename("value").to_frame()
    keys = unit_keys(eval, arm)
    arms = job_arms(eval, keys)
    per_job = per_job.join(arms.set_axis(arms.index.astype(str)))
    return pd.DataFrame([_row(label, seed_values(part, "value").to_numpy(float))
                         for label, part in iter_arms(per_job.reset_index(), arm)])


def _row(label: str, values: np.ndarray, bounds: tuple[float, float] = SHARE) -> dict:
    """An arm's row from one value per seed: its mean and Student's t interval over the seeds (not a
    percentile bootstrap: from 8 seeds that sees (S−1)/S of their variance and covers about 89%), cut to `bounds`
    (pass@1 is a share)."""
    low, high = t_mean_ci(values, bounds=bounds)
    return {"arm": label, "seeds": len(values), "mean": values.mean() if len(values) else np.nan,
            "ci_low": low, "ci_high": high}


def informative_by_arm(groups: pd.DataFrame, arm: Sequence[str], per_job: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per arm: arm, seeds, mean informative samples per 1,000 drawn (over seeds: each job's own
    rate, as the tests compare them), ci_low, ci_high (over seeds). `per_job`: `per_job_spend(groups,
    arm)`, when the caller has it."""
    per_job = (per_job_spend(groups, arm) if per_job is None else per_job).copy()
    per_job["value"] = 1000 * (1 - per_job["wasted_frac"])
    return pd.DataFrame([_row(label, seed_values(part, "value").to_numpy(float), (0.0, 1000.0))
                         for label, part in iter_arms(per_job, arm)])


def rank(measure: str, by_arm: pd.DataFrame, tests: pd.DataFrame) -> Ranking:
    """The arms of `by_arm` (pass1_by_arm or informative_by_arm), best first, with the orderings the
    tests table (with p_holm) resolves for the measure, among the arms of `by_arm` (rows fixed by an arm's rule,
    `by_construction`, resolve nothing and are not counted)."""
    ranked = tests["a"].isin(by_arm["arm"]) & tests["b"].isin(by_arm["arm"])
    metric = TEST_METRIC[measure]
    if measure == INFORMATIVE and not (tests["metric"] == metric).any():  # no arm has a rule: the two counts agree
        metric = "wasted_frac"
    rows = tests[(tests["metric"] == metric) & ranked]
    if "by_construction" in rows:
        rows = rows[rows["by_construction"].isna()]
    resolved, orderings = [], []
    for _, row in rows.iterrows():
        if detectable(row):
            b_better = SCALE[measure] * row["difference"] > 0
            resolved.append((row["b"], row["a"]) if b_better else (row["a"], row["b"]))
            orderings.append(_ordering(row, b_better))
    table = by_arm.sort_values("mean", ascending=False, kind="stable").reset_index(drop=True)
    n = len(table)
    above = {a: [worse for better, worse in resolved if better == a] for a in table["arm"]}
    below = {a: [better for better, worse in resolved if worse == a] for a in table["arm"]}
    best = [1 + len(below[a]) for a in table["arm"]]
    worst = [n - len(above[a]) for a in table["arm"]]
    table.insert(0, "rank", np.arange(1, n + 1))
    table["ranks"] = [str(lo) if lo == hi else f"{lo}–{hi}" for lo, hi in zip(best, worst)]
    table["above"] = [", ".join(map(short_label, above[a])) for a in table["arm"]]
    table["below"] = [", ".join(map(short_label, below[a])) for a in table["arm"]]
    seeds = int(rows[["seeds_a", "seeds_b"]].min(axis=1).min()) if len(rows) else 0
    return Ranking(measure, table[list(COLUMNS)], resolved, len(rows), seeds,
                   float(rows["smallest_p"].max()) if len(rows) else np.nan,
                   pd.DataFrame(orderings, columns=list(ORDERING_COLUMNS)))


def _ordering(row: pd.Series, b_better: bool) -> dict:
    """A resolved comparison (a tests' family row) as an ordering, better arm first: its difference as better −
    worse, each arm's resources there, what the winner had more of and where it reverses."""
    better, worse = ("b", "a") if b_better else ("a", "b")
    out = {"better": short_label(row[better]), "worse": short_label(row[worse]),
           "difference": abs(float(row["difference"])), "p_holm": row["p_holm"],
           "winner_had_more": row.get("winner_had_more"), "reversal": row.get("reversal")}
    for r in RESOURCES:
        for side, key in (("better", better), ("worse", worse)):
            out[f"{r}_{side}"] = row.get(f"{r}_{key}", np.nan)
    return out
