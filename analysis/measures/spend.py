"""What each sample drawn bought: informative or wasted, per group, per job and per arm, and at equal
budgets of samples (or tokens) drawn.

A sample is *informative* when its advantage in its training unit was nonzero, and *wasted*
otherwise (a tied unit, a group left out of the update, or a dropped draw). A training unit is the
set of samples that shared one advantage baseline: one group under fixed, dynamic and band
sampling, and one prompt's pooled rounds under resample_on_tie with `pool=all`, so a tied round
pooled with a later mixed round trains. The trainer records each group's unit and its informative
samples (`unit`, `n_informative`), read from the advantages the update used. Runs written before
those columns existed are recounted: the used groups of one prompt at one step form its unit (true
of every sampler unless a prompt recurs within a step), and a unit is informative when its pooled
rewards are not all equal (every group tied with one common reward), in which case all its samples
count (exact for binary rewards, where no sample can equal a mixed group's mean).

`wasted_frac` is the one number reported (the informative fraction is 1 minus it).
`train_accuracy_round0` is the fraction correct of the first-round training samples drawn in a
budget window: a secondary, on-policy measure. First rounds only, because redraws go to prompts that
just tied, so an arm that redraws would be scored on another prompt mix; even so it is measured on
training prompts, and the held-out comparison comes first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import iter_arms, job_arms, unit_keys
from analysis.data.labels import sort_naturally

RECORDED = "recorded"  # n_informative read from the groups table
RECOUNTED = "recounted"  # rebuilt from used, tie and reward_mean (runs before the column existed)

BUDGETS = {"samples": "samples_total", "tokens": "tokens_total"}
METRICS = ("wasted_frac", "train_accuracy_round0")


def sample_counts(groups: pd.DataFrame, tol: float = 1e-6) -> tuple[pd.DataFrame, str]:
    """Per group row: samples, informative and wasted samples; and how they were counted
    (`RECORDED`, `RECOUNTED`, or "recorded and recounted" when jobs differ)."""
    return pd.DataFrame(_counts(groups, tol), index=groups.index, copy=False), counted_how(groups)


def _counts(groups: pd.DataFrame, tol: float = 1e-6) -> dict[str, np.ndarray]:
    """`sample_counts`' columns, as arrays."""
    samples = groups["group_size"].to_numpy(np.int64)
    recorded = groups["n_informative"].to_numpy(float) if "n_informative" in groups else np.full(len(groups), np.nan)
    missing = np.isnan(recorded)
    informative = np.where(missing, 0, recorded).astype(np.int64)
    if missing.any():
        informative[missing] = _recount(groups.loc[missing], tol)
    return {"samples": samples, "informative": informative, "wasted": samples - informative}


def counted_how(groups: pd.DataFrame) -> str:
    """How `sample_counts` counts these groups: `RECORDED`, `RECOUNTED`, or "recorded and recounted"."""
    missing = groups["n_informative"].isna().to_numpy() if "n_informative" in groups else np.ones(len(groups), bool)
    return RECOUNTED if missing.all() else RECORDED if not missing.any() else f"{RECORDED} and {RECOUNTED}"


def _recount(groups: pd.DataFrame, tol: float) -> np.ndarray:
    """Informative samples per group from (job, step, prompt_id) units of used groups."""
    used = groups["used"].to_numpy(bool)
    unit = pd.MultiIndex.from_arrays([pd.factorize(groups[k])[0] for k in ("job", "step", "prompt_id")]).factorize()[0]
    frame = pd.DataFrame({"unit": unit, "tie": groups["tie"].to_numpy(bool),
                          "mean": groups["reward_mean"].to_numpy(float)})[used]
    per_unit = frame.groupby("unit", sort=False).agg(all_tied=("tie", "all"), lo=("mean", "min"), hi=("mean", "max"))
    mixed = ~(per_unit["all_tied"] & (per_unit["hi"] - per_unit["lo"] <= tol))
    informative_unit = pd.Series(unit).map(mixed).fillna(False).to_numpy(bool) & used
    return np.where(informative_unit, groups["group_size"].to_numpy(np.int64), 0)


def flags(groups: pd.DataFrame) -> pd.DataFrame:
    """Per group: job, samples, tokens, informative and wasted samples, and the first-round samples
    and correct samples (for train_accuracy_round0): what `spend`, `per_job_spend` and `budget_curves`
    sum. Computed once, it is passed to them."""
    counts = _counts(groups)
    first = groups["round"].to_numpy() == 0
    # a run ingested from logs without token counts has none (null): NaN, never a number cast from it
    tokens = groups["tokens"].to_numpy(np.float64 if groups["tokens"].isna().any() else np.int64)
    return pd.DataFrame({**counts, "job": groups["job"].array, "tokens": tokens,
                         "round0": np.where(first, counts["samples"], 0),
                         "round0_correct": np.where(first, groups["n_correct"].to_numpy(np.int64), 0)},
                        index=groups.index, copy=False)  # made here: no copy, no block of every int column


def spend(groups: pd.DataFrame, arm: Sequence[str], by_difficulty: bool = False,
          counted: pd.DataFrame | None = None) -> pd.DataFrame:
    """What each arm spent, summed over its jobs (and per difficulty when asked): groups, samples,
    tokens, informative and wasted samples, samples per job, and wasted_frac (wasted / samples).
    `counted`: `flags(groups)`, when the caller has it."""
    counted = flags(groups) if counted is None else counted
    keys = ["job", *(["difficulty"] if by_difficulty else [])]
    if by_difficulty:
        counted = counted.assign(difficulty=groups["difficulty"])
    by_job = counted.groupby(keys, observed=True)
    per_job = by_job.agg(groups=("samples", "size"), samples=("samples", "sum"), informative=("informative", "sum"),
                         wasted=("wasted", "sum"))
    per_job.insert(2, "tokens", by_job["tokens"].sum(skipna=False))  # NaN: a job without token counts
    per_job = per_job.reset_index()
    if by_difficulty:  # as text, like every key the report shows
        per_job["difficulty"] = per_job["difficulty"].astype(str)
    per_job = per_job.join(job_arms(groups, arm), on="job")
    by_arm = per_job.groupby([*arm, *keys[1:]], observed=True, dropna=False)
    out = by_arm.agg(jobs=("job", "nunique"), **{c: (c, "sum") for c in ("groups", "samples", "informative", "wasted")})
    out.insert(3, "tokens", by_arm["tokens"].sum(skipna=False))
    out["samples_per_job"] = out["samples"] / out["jobs"]
    out["wasted_frac"] = out["wasted"] / out["samples"]
    return sort_naturally(out.reset_index(), [*arm, *keys[1:]])


def per_job_spend(groups: pd.DataFrame, arm: Sequence[str], counted: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per job: seed, the arm keys, samples, wasted samples and wasted_frac. `counted`:
    `flags(groups)`, when the caller has it."""
    counted = flags(groups) if counted is None else counted
    per_job = counted.groupby("job", observed=True).agg(samples=("samples", "sum"), wasted=("wasted", "sum"))
    per_job["wasted_frac"] = per_job["wasted"] / per_job["samples"]
    keys = unit_keys(groups, arm)
    return per_job.join(job_arms(groups, keys)).reset_index()


def budget_curves(groups: pd.DataFrame, arm: Sequence[str], budget: str = "samples", points: int = 20,
                  counted: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each job's state at `points` equal budgets up to the common budget, the largest every job reached.

    Columns: job, *arm, budget (samples or tokens drawn), samples, informative, wasted (all
    cumulative), wasted_frac (cumulative), train_accuracy_round0 (first-round samples drawn within
    the window since the previous point; NaN if none was). `counted`: `flags(groups)`, when the
    caller has it.
    """
    if budget not in BUDGETS:
        raise ValueError(f"budget {budget!r}: must be one of {', '.join(BUDGETS)}")
    total = groups[BUDGETS[budget]].to_numpy(np.int64)
    jobs = groups["job"].cat.codes.to_numpy().astype(np.int64)  # int8 codes would overflow below
    present = np.unique(jobs)
    common = pd.Series(total).groupby(jobs).max().min()
    width = common / points
    bins = np.ceil(total / width).astype(np.int64) - 1  # a group lands in the window that ends at or after it
    keep = bins < points
    flat = jobs[keep] * points + bins[keep]  # (job, window) cell of each group within budget
    size = len(groups["job"].cat.categories) * points
    counted = flags(groups) if counted is None else counted
    sums = {c: np.bincount(flat, counted[c].to_numpy()[keep], minlength=size).reshape(-1, points)[present]
            for c in ("samples", "round0", "round0_correct", "informative", "wasted")}  # (jobs, points)
    cum = {c: np.cumsum(sums[c], axis=1) for c in ("samples", "informative", "wasted")}
    with np.errstate(invalid="ignore", divide="ignore"):
        curves = pd.DataFrame({
            "job": np.repeat(groups["job"].cat.categories[present], points),
            "budget": np.tile(width * np.arange(1, points + 1), len(present)),
            **{c: cum[c].ravel() for c in cum},
            "wasted_frac": (cum["wasted"] / cum["samples"]).ravel(),
            "train_accuracy_round0": (sums["round0_correct"] / sums["round0"]).ravel(),
        })
    arms = job_arms(groups, arm)
    return curves.join(arms, on="job")[["job", *arm, *curves.columns.drop("job")]]


def across_seeds(curves: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm and budget point, each metric's mean over jobs (seeds) and its band, the lowest
    and highest seed (`<metric>_low`, `<metric>_high`); `seeds` counts the jobs."""
    grouped = curves.groupby([*arm, "budget"], observed=True, dropna=False)[list(METRICS)]
    out = grouped.mean().join(grouped.min().add_suffix("_low")).join(grouped.max().add_suffix("_high"))
    out["seeds"] = grouped.size()
    return sort_naturally(out.reset_index(), [*arm, "budget"])


def tokens_per_sample(groups: pd.DataFrame, arm: Sequence[str]) -> pd.Series:
    """Each arm's tokens generated per sample drawn, over all its jobs."""
    per_job = groups.groupby("job", observed=True)[["samples_total", "tokens_total"]].max().join(job_arms(groups, arm))
    sums = per_job.groupby(list(arm), observed=True)[["samples_total", "tokens_total"]].sum()
    return sums["tokens_total"] / sums["samples_total"]



BUDGET_TOLERANCE = 0.05  # arms whose samples (or tokens) per job differ by more than this are not at one budget


def budgets_per_arm(groups: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm (`arm_label`), the mean samples and tokens its jobs drew in all, and the fewest and most
    samples any of its jobs drew (jobs, samples, tokens, samples_min, samples_max)."""
    per_job = groups.groupby("job", observed=True)[["samples_total", "tokens_total"]].max().join(job_arms(groups, arm))
    rows = [{"arm": label, "jobs": len(part), "samples": part["samples_total"].astype(float).mean(),
             "tokens": part["tokens_total"].astype(float).mean(), "samples_min": int(part["samples_total"].min()),
             "samples_max": int(part["samples_total"].max())} for label, part in iter_arms(per_job, arm)]
    return pd.DataFrame(rows, columns=["arm", "jobs", "samples", "tokens", "samples_min", "samples_max"])


def unequal_budgets(budgets: pd.DataFrame, tolerance: float = BUDGET_TOLERANCE) -> dict[str, float]:
    """{"samples": ratio, "tokens": ratio} for each unit whose largest arm mean exceeds the smallest by
    more than `tolerance` (relative); {} when the arms drew alike."""
    out = {}
    for unit in ("samples", "tokens"):
        low, high = budgets[unit].min(), budgets[unit].max()
        if len(budgets) > 1 and low > 0 and high > low * (1 + tolerance):
            out[unit] = float(high / low)
    return out
