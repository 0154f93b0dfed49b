"""Cost and what it buys: each job's held-out pass@1 against each resource it had spent at each evaluated
checkpoint (updates, samples, generated tokens, FLOPs: `resources.RESOURCES`), and *resource-to-target*: for
targets set from the data (the base model's pass@1 plus 50%, 75% and 90% of the best arm's final gain), the
resource each arm needed to first reach a target.

Read from real checkpoints, never interpolated: a job's resource-to-target is what it had spent at its first
evaluated checkpoint at or above the target (an upper bound on the resource it needed, at the granularity of its
evaluation schedule). Per arm, the mean over seeds with Student's t 95% interval over seeds (its low end cut at 0),
where every seed reached the target; where some did not, the count that did and no mean (the mean of those that did
would favour the arm's luckier seeds)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import iter_arms, job_arms, unit_keys
from analysis.data.resources import RESOURCES
from analysis.stats.at_k import score_column
from analysis.stats.intervals import t_mean_ci

FRACTIONS = (0.5, 0.75, 0.9)  # of the best arm's final gain over the base model
CURVE_COLUMNS = ("job", "step", "checkpoint", "pass1", *RESOURCES)
# reached: the jobs (seeds) that reached the target; recorded: of them, those whose runs recorded the resource
TARGET_COLUMNS = ("arm", "target", "pass1_target", "resource", "seeds", "reached", "recorded", "mean", "ci_low",
                  "ci_high")


def job_curves(eval: pd.DataFrame, prompt_scores: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per job and evaluated step: job, step, pass1 (its mean over the held-out prompts), each resource
    it had spent there (NaN where not recorded), and the job's arm keys and seed. `prompt_scores`:
    `scores.prompt_scores`, every prompt's pass@1 at each job and step; `eval`: the eval rows with the resource
    columns (`resources.attach_updates`)."""
    pass1 = prompt_scores.groupby(["job", "step"], observed=True).agg(
        pass1=(score_column("pass@k", 1), "mean"), checkpoint=("checkpoint", "first"))
    at = eval.drop_duplicates(["job", "step"])
    spent = pd.DataFrame({"job": at["job"].astype(str).to_numpy(), "step": at["step"].to_numpy(),
                          **{name: at[column].to_numpy(float) if column in at else np.nan
                             for name, (column, _) in RESOURCES.items()}})
    curves = pass1.reset_index().assign(job=lambda f: f["job"].astype(str)).merge(spent, on=["job", "step"])
    arms = job_arms(eval, unit_keys(eval, arm))
    curves = curves.join(arms.set_axis(arms.index.astype(str)), on="job")
    return curves.sort_values(["job", "step"], kind="stable").reset_index(drop=True)


def targets(curves: pd.DataFrame, arm: Sequence[str], fractions: Sequence[float] = FRACTIONS) -> dict[str, float]:
    """Targets from the data: the base model's mean pass@1 (step 0, over every job) plus each fraction of the best
    arm's final gain (the arm whose mean pass@1 at its jobs' last checkpoints is highest), named "50% of the best
    gain"; empty where no arm gained."""
    base = curves.loc[curves["step"] == 0, "pass1"].mean()
    last = curves.sort_values("step").groupby("job").tail(1)
    best = max((part["pass1"].mean() for _, part in iter_arms(last, arm)), default=np.nan)
    gain = best - base
    if not (np.isfinite(gain) and gain > 0):
        return {}
    return {f"{f:.0%} of the best gain": float(base + f * gain) for f in fractions}


def first_reached(curves: pd.DataFrame, target: float) -> pd.DataFrame:
    """Each job's first evaluated checkpoint past the base model whose pass@1 is at or above `target` (one row a
    job that reached it, with its resources there)."""
    past = curves[(curves["step"] > 0) & (curves["pass1"] >= target)]
    return past.sort_values(["job", "step"], kind="stable").drop_duplicates("job")


def resource_to_target(curves: pd.DataFrame, arm: Sequence[str], goals: dict[str, float]) -> pd.DataFrame:
    """Per arm, target and resource (TARGET_COLUMNS): the jobs (seeds), how many reached the target, and where all
    did the mean resource at their first checkpoint there with Student's t interval over seeds."""
    rows = []
    for name, target in goals.items():
        reached = first_reached(curves, target).set_index("job")
        for label, part in iter_arms(curves.drop_duplicates("job"), arm):
            jobs = part["job"].tolist()
            got = reached.reindex([j for j in jobs if j in reached.index])
            for resource in RESOURCES:
                values = got[resource].to_numpy(float)
                whole = len(got) == len(jobs) and np.isfinite(values).all()
                # NaN for one seed; cut at 0: a resource spent is never negative
                low, high = t_mean_ci(values, bounds=(0.0, np.inf)) if whole else (np.nan, np.nan)
                rows.append({"arm": label, "target": name, "pass1_target": target, "resource": resource,
                             "seeds": len(jobs), "reached": len(got), "recorded": int(np.isfinite(values).sum()),
                             "mean": values.mean() if whole else np.nan, "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows, columns=list(TARGET_COLUMNS))


def arm_curves(curves: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm and checkpoint (aligned by samples drawn: base, each multiple of `eval.every_samples`, final) that
    every job of the arm has: the mean over seeds of pass@1 and of each resource (arm, checkpoint, pass1,
    *RESOURCES), in order of samples drawn: the figure's lines."""
    out = []
    for label, part in iter_arms(curves, arm):
        everyone = part.groupby("checkpoint", observed=True)["job"].transform("nunique") == part["job"].nunique()
        shared = part[everyone]
        means = shared.groupby("checkpoint", observed=True)[["pass1", *RESOURCES]].mean().reset_index()
        out.append(means.sort_values("samples", kind="stable").assign(arm=label))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["arm", "checkpoint", "pass1",
                                                                               *RESOURCES])
