"""Checkpoints of the eval table aligned across jobs by samples drawn, never by step number: the base
model, each job's last evaluated step (the end of its budget when the job finished), and the
multiples of `eval.every_samples` between."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.labels import sort_naturally

# checkpoint labels that align jobs: the base model, and each job's last evaluated step (the end of
# its budget when the job finished); any other checkpoint is labelled with its step number
BASE, FINAL = "base", "final"


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
    job = pd.factorize(eval["job"])[0]
    first = pd.DataFrame({"job": job, "point": point, "step": step}).groupby(
        ["job", "point"], dropna=False)["step"].transform("min").to_numpy() == step
    # the texts are made once per distinct step and point, not once per row
    steps, at_step = np.unique(step, return_inverse=True)
    label = np.array([f"step {s}" for s in steps], dtype=object)[at_step.reshape(-1)]
    named = ~np.isnan(point) & first
    points, at_point = np.unique(point[named], return_inverse=True)
    label[named] = np.array([f"{int(p)} samples" for p in points], dtype=object)[at_point.reshape(-1)]
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

