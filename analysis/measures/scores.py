"""Held-out scores: every prompt's pass@k and cons@k at every checkpoint of every job, computed once
(`prompt_scores`); each job's mean over the held-out prompts at each checkpoint against samples drawn,
checkpoints aligned across jobs by samples drawn (`checkpoint_labels`); and per arm the mean over
seeds with the band from the lowest to the highest seed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import job_arms, unit_keys
from analysis.data.checkpoints import checkpoint_labels, checkpoint_rank, complete_checkpoints
from analysis.data.labels import sort_naturally
from analysis.stats.at_k import METRICS, PROMPT_KEYS, per_prompt, score_column


def smallest_n(eval: pd.DataFrame) -> int:
    """The fewest samples any prompt has at any checkpoint of any job: the largest k every score reaches."""
    return int(eval.groupby(list(PROMPT_KEYS), observed=True).size().min())


def prompt_scores(eval: pd.DataFrame, ks: Sequence[int]) -> pd.DataFrame:
    """`per_prompt(eval, ks)` (pass@k and cons@k at each k) with the job as text, each row's checkpoint
    (`checkpoint_labels`) and the samples its job had drawn there: the one pass over the eval rows that
    the held-out measures share."""
    scores = per_prompt(eval, ks)
    scores["job"] = scores["job"].astype(str)
    steps = eval.drop_duplicates(["job", "step"])  # a checkpoint's label is the same for all its rows
    labels = pd.DataFrame({"job": steps["job"].astype(str).to_numpy(), "step": steps["step"].to_numpy(),
                           "checkpoint": checkpoint_labels(steps).to_numpy(),
                           "samples": steps["samples_total"].to_numpy(float) if "samples_total" in steps
                           else np.nan})
    return scores.merge(labels, on=["job", "step"])


def seed_scores(eval: pd.DataFrame, arm: Sequence[str], points: Sequence[tuple[str, int]],
                scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per job, checkpoint and (metric, k): job, seed, *arm, checkpoint, step, samples, metric,
    k, value (the job's mean over held-out prompts). Only checkpoints every job of the arm has.
    `scores`: `prompt_scores` of `eval` at these ks or more, when the caller has it."""
    if scores is None:
        scores = prompt_scores(eval, sorted({k for _, k in points}))
    columns = [score_column(m, k) for m, k in points]
    per_job = scores.groupby(["job", "step"], observed=True, sort=False).agg(
        **{c: (c, "mean") for c in columns}, checkpoint=("checkpoint", "first"), samples=("samples", "first"))
    per_job = per_job.reset_index()
    keys = unit_keys(eval, arm)
    arms = job_arms(eval, keys)
    per_job = per_job.join(arms.set_axis(arms.index.astype(str)), on="job")
    kept = complete_checkpoints(per_job, arm)
    per_job = per_job.merge(kept[[*arm, "checkpoint"]], on=[*arm, "checkpoint"])
    long = per_job.melt(id_vars=["job", *keys, "checkpoint", "step", "samples"], value_vars=columns,
                        var_name="score", value_name="value")
    names = {score_column(m, k): (m, k) for m, k in points}
    long["metric"] = long["score"].map(lambda c: names[c][0])
    long["k"] = long["score"].map(lambda c: names[c][1])
    return sort_naturally(long.drop(columns="score"), [*arm, "checkpoint", "metric", "k", "job"],
                          {"checkpoint": checkpoint_rank})


def seed_bands(scores: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm, checkpoint and (metric, k): samples (mean over seeds), mean, low and high (the lowest
    and highest seed), seeds."""
    grouped = scores.groupby([*arm, "checkpoint", "metric", "k"], observed=True, dropna=False)
    out = grouped.agg(samples=("samples", "mean"), mean=("value", "mean"), low=("value", "min"),
                      high=("value", "max"), seeds=("value", "size")).reset_index()
    return sort_naturally(out, ["metric", "k", *arm, "samples"], {"metric": METRICS.index})


SCORES = ("step", "samples", "prompts", "k", "pass@1", "pass@k", "cons@k")  # a row of `evaluation_scores`


def evaluation_scores(eval: pd.DataFrame) -> pd.DataFrame:
    """One evaluation's scores (the rows of one job at one setting), a row a step (SCORES): the samples the job had
    drawn there, the held-out prompts, k (the fewest samples a prompt has there) and the means over the prompts of
    pass@1, pass@k and cons@k (`per_prompt`, as the held-out results count them; cons@k NaN where the rows hold no
    answers)."""
    rows = []
    voted = "answer" in eval
    for step, part in eval.groupby("step", sort=True, observed=True):
        k = int(part.groupby("prompt_id", observed=True).size().min())
        part = part.assign(job=part["job"].astype(str), difficulty=part["difficulty"] if "difficulty" in part else "")
        scores = per_prompt(part, sorted({1, k}), metrics=("pass@k", "cons@k") if voted else ("pass@k",))
        drawn = pd.to_numeric(part["samples_total"], errors="coerce").max() if "samples_total" in part else np.nan
        rows.append((int(step), float(drawn), len(scores), k, float(scores["pass@1"].mean()),
                     float(scores[f"pass@{k}"].mean()), float(scores[f"cons@{k}"].mean()) if voted else np.nan))
    return pd.DataFrame(rows, columns=list(SCORES))
