"""Training dynamics at equal updates: where arms stop at one sample budget after different numbers of updates
(optimizer steps taken: resample_on_tie spends samples on redraws, so it takes fewer; a loop step that skipped its
update takes none), a training-dynamics measure compared at the end of each job's budget also compares how far
training got. These rows compare the same measures over each job's first U updates (U: the fewest any job took),
one value per job, across seeds as every other row of the tests' family.

Measures: the first-round tie fraction and the first-round train reward (first rounds only, as the ties section
counts them: a redraw happens because the round before it tied), over the loop steps whose draws fed those
updates, and the mean KL of the steps table over the same steps. Held-out results stay at equal samples drawn
(the held-out section)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import iter_arms, job_arms
from analysis.data.resources import step_updates
from analysis.measures.ties import per_job_first_rounds
from analysis.stats.seeds import compare_arms_by_seed

METRICS = {"tie_frac": "tie_frac (first rounds, equal updates)",
           "reward": "train reward (first rounds, equal updates)", "kl": "kl (equal updates)"}
AT_EQUAL_SAMPLES = {"tie_frac (first rounds)": METRICS["tie_frac"]}  # a row at equal samples and its twin


def updates_per_job(steps: pd.DataFrame) -> pd.Series:
    """Each job's updates at its last step, indexed by job name (empty without a steps table)."""
    at = step_updates(steps)
    return at.groupby("job")["updates"].last() if len(at) else pd.Series(dtype=float)


def common_updates(steps: pd.DataFrame) -> int | None:
    """The fewest updates any job took, where jobs took different numbers; None where every job took the same
    (equal samples are then equal updates), where a job took none, or without a steps table."""
    last = updates_per_job(steps)
    if last.empty or last.nunique() <= 1 or last.min() <= 0:
        return None
    return int(last.min())


def updates_per_arm(steps: pd.DataFrame, arm: Sequence[str]) -> pd.Series:
    """Each arm's mean updates per job (its jobs' updates at their last steps), indexed by arm label."""
    last = updates_per_job(steps).rename("updates").to_frame()
    if last.empty:
        return pd.Series(dtype=float)
    last = last.join(job_arms(steps.assign(job=steps["job"].astype(str)), arm))
    return pd.Series({label: part["updates"].mean() for label, part in iter_arms(last, arm)})


def steps_within(steps: pd.DataFrame, updates: int) -> pd.Series:
    """Each job's last loop step whose draw fed one of its first `updates` updates, indexed by job name."""
    at = step_updates(steps)
    before = at["updates"] - at["opt_steps"]  # updates taken before the step
    return at[before.to_numpy() < updates].groupby("job")["step"].max()


def comparisons(groups: pd.DataFrame, steps: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame | None:
    """Every pair of arms on METRICS over each job's first `common_updates` updates (rows of the tests' family,
    with the span in `interval`); None where the jobs took equal updates."""
    updates = common_updates(steps)
    if updates is None or groups.empty:
        return None
    last = steps_within(steps, updates)
    keep = groups["step"].to_numpy() <= groups["job"].astype(str).map(last).to_numpy(float)
    per_job = per_job_first_rounds(groups[keep], arm, reward=True)
    if "kl" in steps:
        kept = steps["step"].to_numpy() <= steps["job"].astype(str).map(last).to_numpy(float)
        per_job = per_job.join(steps[kept].groupby("job", observed=True)["kl"].mean())
    per_job = per_job.reset_index()
    metrics = [m for m in METRICS if m in per_job and np.isfinite(per_job[m].to_numpy(float)).any()]
    rows = compare_arms_by_seed(per_job, arm, metrics)
    return rows.assign(metric=rows["metric"].map(METRICS), interval=f"seeds, the first {updates:,} updates")
