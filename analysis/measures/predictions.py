"""How well a sampler that predicts each prompt's pass rate before drawing it (the groups table's `predicted_rate`:
MoPPS's posterior mean, SPO's tracked value, which is also each answer's baseline) predicted the pass rate the
group then had (n_correct / group_size). A job's groups are not independent (a prompt recurs, the policy drifts):
the unit is the job, a seed; the interval is Student's t over the arm's per-job means."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import iter_arms, short_label
from analysis.stats.intervals import SHARE, t_mean_ci

NEAR = 0.1  # |predicted - realised| at most this: a prediction within a tenth (SPO: an answer its tracker foresaw)
COLUMNS = ("arm", "difficulty", "jobs", "groups", "predicted", "realised", "abs_error", "ci_low", "ci_high", "near")


def prediction_errors(groups: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm and difficulty (and "all"), over the groups that carry a prediction: their mean prediction and
    realised pass rate, the mean absolute error (each job's mean, then their mean, with its t interval over
    jobs), and the share of groups predicted within NEAR. Empty where no group carries one."""
    if "predicted_rate" not in groups:
        return pd.DataFrame(columns=list(COLUMNS))
    had = groups[groups["predicted_rate"].notna()]
    if had.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    had = had.assign(realised=had["n_correct"] / had["group_size"])
    had = had.assign(error=(had["predicted_rate"] - had["realised"]).abs())
    records = []
    for label, rows in iter_arms(had, list(arm)):
        for level, cell in [*rows.groupby(rows["difficulty"].astype(str), sort=True), ("all", rows)]:
            per_job = cell.groupby(cell["job"].astype(str), sort=False)["error"].mean()
            low, high = t_mean_ci(per_job.to_numpy(), bounds=SHARE)  # |predicted - realised| rate
            records.append({"arm": short_label(label), "difficulty": level, "jobs": len(per_job),
                            "groups": len(cell), "predicted": float(cell["predicted_rate"].mean()),
                            "realised": float(cell["realised"].mean()), "abs_error": float(per_job.mean()),
                            "ci_low": low, "ci_high": high, "near": float(np.mean(cell["error"] <= NEAR))})
    return pd.DataFrame(records, columns=list(COLUMNS))
