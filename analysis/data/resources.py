"""What each checkpoint cost: the resources a comparison of arms can be aligned by or attributed to.

An *update* is an optimizer step taken (`opt_steps` of the steps table: mu at a step that stepped, 0 at one that
skipped its update), not a loop step: a run with `algo.tied_batch=skip` (and every run before that key) takes no
update on a step whose advantages were all 0, and `algo.mu=2` takes two a step. Steps tables written before the
`opt_steps` column are read by the rule that run followed: a step updated exactly where its `grad_norm` is finite,
mu times (`algo.mu` of its config).

Each eval row gets `updates` (the job's updates at that checkpoint) and `flops_total` (its estimated FLOPs, where
the run recorded them), from the eval row itself where the trainer wrote them, else from the steps table: the
resources beside `samples_total` and `tokens_total`."""

from __future__ import annotations

import numpy as np
import pandas as pd

# resource -> (its column at a checkpoint, how a sentence names it)
RESOURCES = {"updates": ("updates", "updates"), "samples": ("samples_total", "samples"),
             "tokens": ("tokens_total", "generated tokens"), "flops": ("flops_total", "FLOPs")}
MORE = 0.10  # an arm had more of a resource where it had more than 10% more of it than the other arm


def step_updates(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per job and step: `job`, `step`, `opt_steps` (optimizer steps taken at the step), `updates`
    (cumulative, this step included) and `flops_total` (NaN where the run did not record it), from the steps
    table."""
    if steps.empty or "step" not in steps:
        return pd.DataFrame({"job": pd.Series(dtype=str), "step": pd.Series(dtype="int64"),
                             "opt_steps": pd.Series(dtype=float), "updates": pd.Series(dtype=float),
                             "flops_total": pd.Series(dtype=float)})
    frame = steps.assign(job=steps["job"].astype(str)).sort_values(["job", "step"], kind="stable")
    frame = frame.drop_duplicates(["job", "step"], keep="last")
    # a part written before opt_steps: a step stepped where its gradient was measured, mu times
    mu = pd.to_numeric(frame["algo.mu"], errors="coerce").fillna(1).to_numpy(float) if "algo.mu" in frame \
        else np.ones(len(frame))
    stepped = np.isfinite(frame["grad_norm"].to_numpy(float)) if "grad_norm" in frame else np.ones(len(frame), bool)
    taken = np.where(stepped, mu, 0.0)
    if "opt_steps" in frame:  # the recorded count wherever there is one (a job may mix parts of both kinds)
        taken = np.where(frame["opt_steps"].notna(), frame["opt_steps"].to_numpy(float), taken)
    updates = pd.Series(taken, index=frame.index).groupby(frame["job"].to_numpy()).cumsum().to_numpy()
    if "updates" in frame:  # the run's own count where it recorded one: right even where a part was left out
        recorded = frame["updates"].to_numpy(float)
        updates = np.where(np.isnan(recorded), updates, recorded)
    flops = frame["flops_total"].to_numpy(float) if "flops_total" in frame else np.full(len(frame), np.nan)
    return pd.DataFrame({"job": frame["job"].to_numpy(), "step": frame["step"].astype("int64").to_numpy(),
                         "opt_steps": taken, "updates": updates, "flops_total": flops})


def attach_updates(eval: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """`eval` with `updates` and `flops_total` at each checkpoint (0 at the base model): the row's own where the
    trainer recorded them, else the steps table's at the checkpoint's step; NaN where neither says."""
    if eval.empty:
        return eval.assign(updates=pd.Series(dtype=float), flops_total=pd.Series(dtype=float))
    at = step_updates(steps)
    keys = pd.DataFrame({"job": eval["job"].astype(str).to_numpy(), "step": eval["step"].astype("int64").to_numpy()})
    found = keys.merge(at, on=["job", "step"], how="left")
    base = eval["step"].to_numpy() == 0
    out = {}
    for column in ("updates", "flops_total"):
        own = eval[column].to_numpy(float) if column in eval else np.full(len(eval), np.nan)
        value = np.where(np.isnan(own), found[column].to_numpy(float), own)
        out[column] = np.where(base, 0.0, value)
    return eval.assign(**out)


def had_more(a: dict[str, float], b: dict[str, float], tolerance: float = MORE) -> list[str]:
    """The resources of which `b` had more than `tolerance` more than `a` (each a dict resource -> amount, the
    keys of RESOURCES), in RESOURCES' order; a resource either side lacks is not compared."""
    out = []
    for resource in RESOURCES:
        x, y = a.get(resource, np.nan), b.get(resource, np.nan)
        if x is None or y is None or not (np.isfinite(x) and np.isfinite(y)):
            continue
        if y > x * (1 + tolerance) and y > 0:
            out.append(resource)
    return out


def more_text(resources: list[str], a: dict[str, float], b: dict[str, float]) -> str:
    """`had_more`'s list in words, each with its ratio: "updates ×1.9, generated tokens ×1.2"; "none" if empty."""
    if not resources:
        return "none"
    return ", ".join(f"{RESOURCES[r][1]} ×{b[r] / a[r]:.2g}" if a[r] > 0 else f"{RESOURCES[r][1]} (vs 0)"
                     for r in resources)
