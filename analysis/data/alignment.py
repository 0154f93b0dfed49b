"""The three alignments a comparison of arms can be made at: equal samples drawn (the checkpoint labels of
`analysis.data.checkpoints`), equal updates (optimizer steps taken: `analysis.data.resources`; a loop step that
skipped its update is not one, and mu updates a step are mu), and equal tokens drawn. At one sample budget an arm
that redraws ties (resample_on_tie) or draws more than it trains (PODS) takes fewer updates: a difference at
equal samples may be one of training progress, and the same arms compared at equal updates say whether it is.

Equal updates: the largest number of updates every job was evaluated at (the trainer evaluates every `eval.every`
steps or `eval.every_updates` updates, at `eval.every_samples` and at its end: the union), one point for the whole
study so that every pair and every ranking is made there; a job's checkpoint there is its first evaluated step with
that many updates (later steps that skipped their update took none more). Equal tokens: the largest multiple of
`eval.every_tokens` every job crossed (the trainer evaluates on crossing one), where the runs have that
schedule."""

from __future__ import annotations

import numpy as np
import pandas as pd

SAMPLES, UPDATES, TOKENS = "samples", "updates", "tokens"
STEPS = "steps"  # a final checkpoint where every job ran the same loop steps (and so drew equal samples)
EVERY_TOKENS, EVERY_UPDATES = "eval.every_tokens", "eval.every_updates"


def with_tokens(eval: pd.DataFrame) -> pd.DataFrame:
    """`eval` with `tokens_total`, the tokens its job had generated at each checkpoint, as its rows recorded them
    (0 at the base model; NaN where rows written before the column have none). Read from the eval rows alone,
    never counted from the groups: the held-out comparisons begin before the groups are read."""
    tokens = eval["tokens_total"].to_numpy(float) if "tokens_total" in eval else np.full(len(eval), np.nan)
    return eval.assign(tokens_total=np.where(eval["step"].to_numpy() == 0, 0.0, tokens))


def update_points(steps: pd.DataFrame) -> pd.Series:
    """Each row's updates, rounded down to a multiple of its job's `eval.every_updates` where it has that schedule
    (the trainer evaluates on crossing one: with mu updates a step a multiple may be passed, not hit), else the
    updates themselves (`eval.every` in loop steps: a count the jobs share where each step took its update)."""
    updates = steps["updates"].to_numpy(float) if "updates" in steps else np.full(len(steps), np.nan)
    every = (pd.to_numeric(steps[EVERY_UPDATES], errors="coerce").to_numpy(float) if EVERY_UPDATES in steps
             else np.full(len(steps), np.nan))
    scheduled = np.isfinite(every) & (every > 0)
    return pd.Series(np.where(scheduled, np.floor(updates / np.where(scheduled, every, 1)) * every, updates),
                     index=steps.index)


def equal_updates_point(steps: pd.DataFrame) -> int | None:
    """The updates of the study's equal-updates comparisons: the largest count above 0 (a multiple of
    `eval.every_updates` where the jobs have that schedule, `update_points`) that every job was evaluated at or
    just past, where the jobs' last evaluated checkpoints differ in updates (else equal samples are equal updates:
    None); None where no count but the base model's is shared, or a job's updates are not known. `steps`: one row
    per job and evaluated step, with `updates` (`resources.attach_updates`)."""
    if steps.empty or "updates" not in steps or steps["updates"].isna().any():
        return None
    if steps.groupby("job", observed=True)["updates"].max().nunique() <= 1:
        return None
    points = update_points(steps)
    evaluated = points.groupby(steps["job"].astype(str).to_numpy()).agg(lambda p: frozenset(int(v) for v in p))
    shared = frozenset.intersection(*evaluated) - {0}
    return max(shared) if shared else None


def token_points(steps: pd.DataFrame) -> pd.Series:
    """Each row's multiple of `eval.every_tokens` (the tokens drawn, rounded down to one: the trainer evaluates on
    crossing it), NaN where the job has no token schedule or no token count."""
    if EVERY_TOKENS not in steps or "tokens_total" not in steps:
        return pd.Series(np.nan, index=steps.index)
    every = pd.to_numeric(steps[EVERY_TOKENS], errors="coerce").to_numpy(float)
    every = np.where(np.isnan(every) | (every <= 0), np.nan, every)
    return pd.Series(np.floor(steps["tokens_total"].to_numpy(float) / every) * every, index=steps.index)


def equal_tokens_point(steps: pd.DataFrame) -> float | None:
    """The study's equal-tokens point: the largest multiple of `eval.every_tokens` above 0 that every job was
    evaluated on crossing (the first checkpoint at or past it); None without a token schedule in every job."""
    points = token_points(steps)
    if points.isna().any() or steps.empty:
        return None
    first = points.groupby(steps["job"].astype(str).to_numpy()).agg(lambda p: frozenset(p.unique()))
    shared = frozenset.intersection(*first) - {0.0}
    return float(max(shared)) if shared else None


def final_alignment(steps: pd.DataFrame) -> str:
    """What the jobs' last checkpoints ("final") are aligned by: updates where every job's last evaluated
    checkpoint has the same updates; samples where they share the samples drawn (a budget every step spends alike:
    a loop step that skipped its update is no unit of cost); loop steps where they share the last step but neither;
    else the budget that ended them, read from their configs (`max_tokens` without
    `max_samples`: tokens); else samples (a sample budget, or rows that carry no config to tell: the report's
    first alignment)."""
    last = steps.sort_values("step").groupby("job", observed=True).tail(1)
    if "updates" in last and last["updates"].notna().all() and last["updates"].nunique() == 1:
        return UPDATES
    if "samples_total" in last and last["samples_total"].notna().all() and last["samples_total"].nunique() == 1:
        return SAMPLES
    if last["step"].nunique() == 1:
        return STEPS
    budget = {key: key in steps and pd.to_numeric(steps[key], errors="coerce").notna().all()
              for key in ("max_samples", "max_tokens")}
    return TOKENS if budget["max_tokens"] and not budget["max_samples"] else SAMPLES


def at_point(rows: pd.DataFrame, alignment: str, point: object) -> pd.DataFrame:
    """The rows (one per job and step, with `checkpoint` and, for tokens, `tokens_total`) of one aligned point:
    a checkpoint label (samples), a number of updates (updates: each job's first checkpoint with that many), or a
    token multiple (tokens: each job's first checkpoint at or past it)."""
    if alignment == SAMPLES:
        return rows[rows["checkpoint"] == point]
    if alignment == UPDATES:
        return rows[update_points(rows) == point].sort_values("step").drop_duplicates("job")
    at = rows[token_points(rows) == point]
    return at.sort_values("step").drop_duplicates("job")
