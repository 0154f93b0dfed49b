"""pass@k and cons@k against k per arm, checkpoint and difficulty, with bootstrap intervals clustered
by prompt."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import job_arms
from analysis.data.checkpoints import checkpoint_rank, complete_checkpoints
from analysis.data.labels import natural_sorted, sort_naturally
from analysis.measures.scores import prompt_scores, smallest_n
from analysis.stats.at_k import METRICS, default_ks, score_column
from analysis.stats.intervals import bootstrap_mean_ci


def at_k_curves(eval: pd.DataFrame, by: Sequence[str], ks: Sequence[int] | None = None, n_boot: int = 1000,
                level: float = 0.95, seed: int = 0, scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """Mean pass@k and cons@k over prompts for each arm (`by`), checkpoint and difficulty (and
    "all" difficulties), with percentile bootstrap intervals clustered by prompt: a prompt's
    scores in every job of the arm move together (at the base model the jobs are one model on
    the same prompts, not independent draws). Checkpoints are aligned across jobs by
    `checkpoint_labels` (samples drawn), and an intermediate one is kept only where every job of
    the arm has it (`complete_checkpoints`). Long format: *by, checkpoint, steps (each job's step,
    "80, 83"), samples (mean samples drawn by the arm's jobs there), difficulty, metric, k, mean,
    ci_low, ci_high, prompts (distinct prompts), jobs. `ks` defaults to the powers of two up to the
    fewest samples any prompt has. `scores`: `prompt_scores(eval, ...)` at these ks or more, when the
    caller has it."""
    ks = list(ks or default_ks(smallest_n(eval)))
    scores = prompt_scores(eval, ks) if scores is None else scores
    arms = job_arms(eval, by)
    scores = scores.join(arms.set_axis(arms.index.astype(str)), on="job")
    kept = complete_checkpoints(scores, by)
    scores = scores.merge(kept.drop(columns="jobs"), on=[*by, "checkpoint"])
    scores["difficulty"] = scores["difficulty"].astype(str)
    keys = [*by, "checkpoint", "steps", "difficulty"]
    columns = [score_column(m, k) for m in METRICS for k in ks]
    both = pd.concat([scores, scores.assign(difficulty="all")], ignore_index=True)
    # each cell's prompts (a prompt's scores averaged over the cell's jobs), cells in sorted order
    clustered = both.groupby([*keys, "prompt_id"], observed=True, dropna=False)[columns].mean()
    cells = both.groupby(keys, observed=True, dropna=False)
    cell = cells.ngroup().to_numpy()
    firsts = both.assign(cell=cell).drop_duplicates(["cell", "job"])  # each cell's jobs in order of appearance
    samples = firsts.groupby("cell")["samples"].agg(lambda s: s.astype(float).mean()).to_numpy()
    jobs = firsts.groupby("cell").size().to_numpy()
    bounds = np.r_[0, np.cumsum(cells["prompt_id"].nunique().to_numpy())]  # each cell's rows of `clustered`
    rows = []
    for c, key in enumerate(cells.size().index):
        x = clustered.iloc[bounds[c]:bounds[c + 1]].to_numpy()  # (prompts, metrics * ks)
        low, high = bootstrap_mean_ci(x, n_boot, level, seed)
        key = key if isinstance(key, tuple) else (key,)
        for i, (metric, k) in enumerate((m, k) for m in METRICS for k in ks):
            rows.append((*key, samples[c], metric, k, x[:, i].mean(), low[i], high[i], len(x), jobs[c]))
    out = pd.DataFrame(rows, columns=[*keys, "samples", "metric", "k", "mean", "ci_low", "ci_high", "prompts", "jobs"])
    return sort_naturally(out, [*by, "checkpoint", "difficulty", "metric", "k"], {"checkpoint": checkpoint_rank})


def saturated(curves: pd.DataFrame, margin: float = 0.05) -> list[str]:
    """Difficulties whose every at-k mean (any arm, checkpoint, metric, k) is within `margin` of 0 or
    of 1: their panels would be flat lines on a frame's edge."""
    by_level = curves[curves["difficulty"].astype(str) != "all"].groupby(curves["difficulty"].astype(str))["mean"]
    flat = by_level.agg(lambda m: bool((m >= 1 - margin).all() or (m <= margin).all()))
    return natural_sorted(flat.index[flat])

