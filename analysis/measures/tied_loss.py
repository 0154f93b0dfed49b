"""How tied units entered each arm's loss, from the steps table: the share of the loss's denominator they took where
it counts them (`tied_norm_share`; what algo.tied_norm=drop leaves out), the norm of the KL term's gradient from
them and from untied units on the steps algo.kl_grad_every measured, and the batches that tied whole with the
updates each arm skipped. Runs written before these columns have none: the section is then left out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import iter_arms, value_text

STEPS_COLUMNS = ("tied_norm_share", "kl_grad_tied", "kl_grad_untied")  # the steps table's, where a run wrote them
KEYS = {"algo.tied_kl": "keep", "algo.tied_norm": "count", "algo.tied_batch": "step"}  # each one's default
COLUMNS = ("arm", "tied_kl", "tied_norm", "tied_batch", "jobs", "tied_share", "tied_share_low", "tied_share_high",
           "kl_grad_tied", "kl_grad_untied", "kl_grad_ratio", "probed_steps", "all_tied_frac", "steps", "updates",
           "skipped")


def recorded(steps: pd.DataFrame) -> bool:
    """Whether any job wrote the columns (runs made since they were recorded)."""
    return "tied_norm_share" in steps and bool(steps["tied_norm_share"].notna().any())


def tied_loss_by_arm(steps: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per arm (COLUMNS): its keys' values; the tied share of the denominator, each job's mean over its steps
    with training rows, then the mean over jobs and the lowest and highest job; the mean over every probed step of
    the KL term's gradient norm from tied units and from untied ones, and the ratio of the two means (NaN: not
    measured; a mean, not a median: with one unit a step, as at G = 16, every step has one part or the other);
    the share of steps whose every advantage was 0 (all tied); per job, steps, updates (optimizer steps taken) and
    the steps that took none (skipped: an all-tied batch under algo.tied_batch=skip, or nothing to train)."""
    out = []
    for label, rows in iter_arms(steps, list(arm)) if arm else [("all", steps)]:
        keys = {k.split(".")[1]: value_text(rows[k].iloc[0]) if k in rows and pd.notna(rows[k].iloc[0]) else default
                for k, default in KEYS.items()}
        per_job = rows.groupby("job", observed=True)
        share = per_job["tied_norm_share"].mean()  # NaN on steps with no training row: left out of each mean
        probed = rows[rows["kl_grad_untied"].notna()] if "kl_grad_untied" in rows else rows.iloc[:0]
        trained = rows["tied_norm_share"].notna()
        taken = rows["opt_steps"] if "opt_steps" in rows else pd.Series(np.nan, index=rows.index)
        out.append({"arm": label, **keys, "jobs": per_job.ngroups, "tied_share": share.mean(),
                    "tied_share_low": share.min(), "tied_share_high": share.max(),
                    "kl_grad_tied": probed["kl_grad_tied"].mean(), "kl_grad_untied": probed["kl_grad_untied"].mean(),
                    "kl_grad_ratio": probed["kl_grad_tied"].mean() / probed["kl_grad_untied"].mean()
                    if len(probed) and probed["kl_grad_untied"].mean() > 0 else np.nan, "probed_steps": len(probed),
                    "all_tied_frac": (float((rows["tied_norm_share"][trained] == 1).mean()) if trained.any()
                                      else np.nan),
                    "steps": len(rows) / per_job.ngroups, "updates": taken.sum() / per_job.ngroups,
                    "skipped": float((taken == 0).sum()) / per_job.ngroups})
    return pd.DataFrame(out, columns=list(COLUMNS))
