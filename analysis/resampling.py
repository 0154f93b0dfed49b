"""Sampling strategies (arms) compared at equal budget: accuracy, informative groups per 1,000
samples and wasted samples against the samples (or tokens) drawn, per seed and across seeds.

A group is informative when it is not tied and entered the gradient (`used`); every other
group's samples are wasted. Accuracy is the fraction of samples drawn in a budget window that
were correct: an on-policy measure that sees every sample drawn, redraws included, so a
strategy that redraws hard prompts draws (and is scored on) more hard samples.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd
from scipy.stats import ttest_ind

from analysis.arms import iter_arms, job_arms
from analysis.labels import sort_naturally

BUDGETS = {"samples": "samples_total", "tokens": "tokens_total"}
METRICS = ("accuracy", "informative_per_1k", "wasted_frac")
TEST = "Welch's t-test over seeds (two-sided)"


def _flags(groups: pd.DataFrame) -> pd.DataFrame:
    """Per group: job, samples, tokens, correct, and whether it was informative / wasted."""
    informative = ~groups["tie"].to_numpy(bool) & groups["used"].to_numpy(bool)
    samples = groups["group_size"].to_numpy(np.int64)
    return pd.DataFrame({"job": groups["job"], "samples": samples, "tokens": groups["tokens"].to_numpy(np.int64),
                         "correct": groups["n_correct"].to_numpy(np.int64), "informative": informative,
                         "wasted": np.where(informative, 0, samples)}, index=groups.index)


def spend(groups: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """What each arm spent, summed over its jobs: groups, samples, tokens, informative groups,
    wasted samples; plus samples per job, informative groups per 1,000 samples, wasted fraction."""
    per_job = _flags(groups).groupby("job", observed=True).agg(
        groups=("samples", "size"), samples=("samples", "sum"), tokens=("tokens", "sum"),
        informative=("informative", "sum"), wasted=("wasted", "sum"))
    per_job = per_job.join(job_arms(groups, arm))
    out = per_job.groupby(list(arm), observed=True, dropna=False).agg(
        jobs=("groups", "size"), **{c: (c, "sum") for c in ("groups", "samples", "tokens", "informative", "wasted")})
    out["samples_per_job"] = out["samples"] / out["jobs"]
    out["informative_per_1k"] = 1000 * out["informative"] / out["samples"]
    out["wasted_frac"] = out["wasted"] / out["samples"]
    return sort_naturally(out.reset_index(), list(arm))


def budget_curves(groups: pd.DataFrame, arm: Sequence[str], budget: str = "samples", points: int = 20) -> pd.DataFrame:
    """Each job's state at `points` equal budgets up to the common budget, the largest every job reached.

    Columns: job, *arm, budget (samples or tokens drawn), samples, informative, wasted (all
    cumulative), informative_per_1k, wasted_frac (cumulative ratios), accuracy (within the
    window since the previous point; NaN if nothing was drawn in it).
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
    flags = _flags(groups)
    sums = {c: np.bincount(flat, flags[c].to_numpy()[keep], minlength=size).reshape(-1, points)[present]
            for c in ("samples", "correct", "informative", "wasted")}  # (jobs, points)
    cum = {c: np.cumsum(sums[c], axis=1) for c in ("samples", "informative", "wasted")}
    with np.errstate(invalid="ignore", divide="ignore"):
        curves = pd.DataFrame({
            "job": np.repeat(groups["job"].cat.categories[present], points),
            "budget": np.tile(width * np.arange(1, points + 1), len(present)),
            **{c: cum[c].ravel() for c in cum},
            "informative_per_1k": (1000 * cum["informative"] / cum["samples"]).ravel(),
            "wasted_frac": (cum["wasted"] / cum["samples"]).ravel(),
            "accuracy": (sums["correct"] / sums["samples"]).ravel(),
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


def compare_at_budget(curves: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Every pair of arms at the common budget (the last point), for each metric, with Welch's
    t-test over seeds (p is NaN when an arm has fewer than two seeds)."""
    final = curves[curves["budget"] == curves["budget"].max()]
    rows = []
    for (name_a, a), (name_b, b) in combinations(iter_arms(final, arm), 2):
        for metric in METRICS:
            x, y = a[metric].dropna().to_numpy(), b[metric].dropna().to_numpy()
            with warnings.catch_warnings():
                # seeds that agree exactly (small sweeps) make scipy warn of precision loss; the test still holds
                warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
                stat, p = ttest_ind(x, y, equal_var=False) if min(len(x), len(y)) >= 2 else (np.nan, np.nan)
            rows.append({"budget": final["budget"].iloc[0], "metric": metric, "arm_a": name_a, "arm_b": name_b,
                         "mean_a": x.mean(), "mean_b": y.mean(), "seeds_a": len(x), "seeds_b": len(y),
                         "t": stat, "p_value": p, "test": TEST})
    return pd.DataFrame(rows, columns=["budget", "metric", "arm_a", "arm_b", "mean_a", "mean_b", "seeds_a", "seeds_b",
                                       "t", "p_value", "test"])

