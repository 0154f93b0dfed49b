"""Held-out scores against samples drawn: each job's mean pass@k / cons@k over the held-out prompts
at each checkpoint, checkpoints aligned across jobs by samples drawn (`checkpoint_labels`), and per
arm the mean over seeds with the band from the lowest to the highest seed."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.data.arms import job_arms
from analysis.data.checkpoints import checkpoint_labels, checkpoint_rank, complete_checkpoints
from analysis.data.labels import sort_naturally
from analysis.stats.at_k import METRICS, per_prompt, score_column


def seed_scores(eval: pd.DataFrame, arm: Sequence[str], points: Sequence[tuple[str, int]]) -> pd.DataFrame:
    """One row per job, checkpoint and (metric, k): job, seed, *arm, checkpoint, step, samples, metric,
    k, value (the job's mean over held-out prompts). Only checkpoints every job of the arm has."""
    ks = sorted({k for _, k in points})
    scores = per_prompt(eval, ks, sorted({m for m, _ in points}))
    columns = [score_column(m, k) for m, k in points]
    per_job = scores.groupby(["job", "step"], observed=True)[columns].mean().reset_index()
    per_job["job"] = per_job["job"].astype(str)
    labels = eval[["job", "step"]].assign(job=eval["job"].astype(str), checkpoint=checkpoint_labels(eval),
                                          samples=eval["samples_total"].astype(float))
    per_job = per_job.merge(labels.drop_duplicates(["job", "step"]), on=["job", "step"])
    keys = [*arm, *(["seed"] if "seed" in eval and "seed" not in arm else [])]
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
