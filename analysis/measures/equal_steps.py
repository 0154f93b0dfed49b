"""Training dynamics at equal optimizer steps: where arms stop at one sample budget after different
numbers of steps (resample_on_tie spends samples on redraws, so it takes fewer), a training-dynamics
measure compared at the end of each job's budget also compares how far training got. These rows
compare the same measures over the steps every job took (1 to the fewest any job took), one value
per job, across seeds as every other row of the tests' family.

Measures: the first-round tie fraction and the first-round train reward (first rounds only, as the
ties section counts them: a redraw happens because the round before it tied), and the mean KL of
the steps table. Held-out results stay at equal samples drawn (the held-out section)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.data.arms import iter_arms, job_arms
from analysis.measures.ties import per_job_first_rounds
from analysis.stats.seeds import compare_arms_by_seed

METRICS = {"tie_frac": "tie_frac (first rounds, equal steps)", "reward": "train reward (first rounds, equal steps)",
           "kl": "kl (equal steps)"}
AT_EQUAL_SAMPLES = {"tie_frac (first rounds)": METRICS["tie_frac"]}  # a row at equal samples and its twin


def common_steps(groups: pd.DataFrame) -> int | None:
    """The fewest optimizer steps any job took, where jobs took different numbers; None where every job
    took the same (equal samples are then equal steps) or there are no groups."""
    if groups.empty:
        return None
    last = groups.groupby("job", observed=True)["step"].max()
    return None if last.nunique() <= 1 else int(last.min())


def steps_per_arm(groups: pd.DataFrame, arm: Sequence[str]) -> pd.Series:
    """Each arm's mean optimizer steps per job (its jobs' last steps), indexed by arm label."""
    last = groups.groupby("job", observed=True)["step"].max().rename("steps").to_frame().join(job_arms(groups, arm))
    return pd.Series({label: part["steps"].mean() for label, part in iter_arms(last, arm)})


def comparisons(groups: pd.DataFrame, steps: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame | None:
    """Every pair of arms on METRICS over steps 1 to `common_steps` (rows of the tests' family, with
    the step range in `interval`); None where the jobs took equal steps."""
    last = common_steps(groups)
    if last is None:
        return None
    per_job = per_job_first_rounds(groups, arm, last_step=last, reward=True)
    if not steps.empty and "kl" in steps:
        per_job = per_job.join(steps[steps["step"] <= last].groupby("job", observed=True)["kl"].mean())
    per_job = per_job.reset_index()
    metrics = [m for m in METRICS if m in per_job]
    rows = compare_arms_by_seed(per_job, arm, metrics)
    return rows.assign(metric=rows["metric"].map(METRICS), interval=f"seeds, steps 1–{last}")
