"""What trained: each sample drawn is *informative* when its advantage in its training unit was
nonzero, and *wasted* otherwise (a tied unit, a group left out of the update, or a dropped draw).

A training unit is the set of samples that shared one advantage baseline: one group under
fixed, dynamic and band sampling, and one prompt's pooled rounds under resample_on_tie with
`pool=all`, so a tied round pooled with a later mixed round trains. The trainer records each
group's unit and its informative samples (`unit`, `n_informative`), read from the advantages
the update used. Runs written before those columns existed are recounted: the used groups of
one prompt at one step form its unit (true of every sampler unless a prompt recurs within a
step), and a unit is informative when its pooled rewards are not all equal (every group tied
with one common reward), in which case all its samples count (exact for binary rewards, where
no sample can equal a mixed group's mean).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RECORDED = "recorded"  # n_informative read from the groups table
RECOUNTED = "recounted"  # rebuilt from used, tie and reward_mean (runs before the column existed)


def sample_counts(groups: pd.DataFrame, tol: float = 1e-6) -> tuple[pd.DataFrame, str]:
    """Per group row: samples, informative and wasted samples; and how they were counted
    (`RECORDED`, `RECOUNTED`, or "recorded and recounted" when jobs differ)."""
    samples = groups["group_size"].to_numpy(np.int64)
    recorded = groups["n_informative"].to_numpy(float) if "n_informative" in groups else np.full(len(groups), np.nan)
    missing = np.isnan(recorded)
    informative = np.where(missing, 0, recorded).astype(np.int64)
    if missing.any():
        informative[missing] = _recount(groups.loc[missing], tol)
    how = RECOUNTED if missing.all() else RECORDED if not missing.any() else f"{RECORDED} and {RECOUNTED}"
    frame = pd.DataFrame({"samples": samples, "informative": informative, "wasted": samples - informative},
                         index=groups.index)
    return frame, how


def _recount(groups: pd.DataFrame, tol: float) -> np.ndarray:
    """Informative samples per group from (job, step, prompt_id) units of used groups."""
    used = groups["used"].to_numpy(bool)
    unit = pd.Series(list(zip(groups["job"].astype(str), groups["step"], groups["prompt_id"].astype(str))),
                     index=groups.index)
    mean = groups["reward_mean"].to_numpy(float)
    frame = pd.DataFrame({"unit": unit, "tie": groups["tie"].to_numpy(bool), "mean": mean})[used]
    per_unit = frame.groupby("unit", sort=False).agg(all_tied=("tie", "all"), lo=("mean", "min"), hi=("mean", "max"))
    mixed = ~(per_unit["all_tied"] & (per_unit["hi"] - per_unit["lo"] <= tol))
    informative_unit = unit.map(mixed).fillna(False).to_numpy(bool) & used
    return np.where(informative_unit, groups["group_size"].to_numpy(np.int64), 0)
