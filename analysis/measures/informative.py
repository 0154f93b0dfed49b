"""Informative samples counted two ways: **as trained** (what the arm's rule gave: a nonzero advantage in its
training unit, the report's `1000 × (1 − wasted_frac)`) and **comparable** (what its draws gave, the same rule for
every arm).

An arm's own rule can fix part of its informative share whatever the policy does:

- a **tie rule** forces an advantage on samples whose training unit drew no spread of rewards at all: NGRPO's
  virtual right answer in an all-wrong group, RL-ZVP's entropy-shaped advantages, AR3PO's right answer reused from
  an earlier step in a prompt that drew only wrong ones. Such samples count as informative because of the rule.
  (A tied round pooled with a later round of the same prompt that drew both kinds, as `resample_on_tie pool=all`,
  DARS, SPEED-RL and Reinforce-Ada pool them, is no such rule: its unit's drawn answers differ, as those of one
  larger group would, and whether they do depends on the policy.)
- a **cap** trains only part of what the sampler draws for a training unit (PODS trains G of its n, Reinforce-Ada a
  balanced 8 of the rounds it drew for a prompt): the rest count as wasted because of the rule;
- **groups of one answer** (SPO) never tie: every sample that trains has a nonzero advantage.

Each is read from the groups table, never from an arm's name, so a new rule is covered without a list to edit: a
drawn group with `n_informative` > 0 whose unit (its rows of one job, step and `unit`) drew rewards of no spread
(every group tied, at one reward) is a tie rule's; a unit whose `n_trained` sum is below its `group_size` sum is
capped.

**Comparable** counts, of every sample drawn, those with a nonzero advantage in a unit whose drawn rewards differ;
in a capped unit, the samples the cap left out count in the share of their group's trained samples that were
informative (all of them where none of its samples trained: under a 0/1 reward every answer of a unit with both
kinds differs from its baseline), so the cap is not counted against the arm. Without a tie rule or a cap it is
exactly the count as trained. **From untied groups** (`informative_untied`) is the plainer count of the samples of
groups that did not tie whose advantage was nonzero: the same as comparable for an arm whose units are single
groups, lower for one that pools a tied round with a later mixed one. Reused (replayed) groups are no draw and
count nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import job_arms, unit_keys
from analysis.data.codes import column_codes, dense_ranks, group_ids
from analysis.measures.spend import sample_counts

COMPARABLE_METRIC = "wasted_frac (comparable)"  # 1 − comparable informative / drawn, as the tests would name it
TOLERANCE = 1e-6  # rewards of a unit's tied groups this close are one reward (as `spend` recounts)
# the groups' columns `counts` reads (`used`, `prompt_id`: to recount runs without `n_informative`)
READ = ("job", "step", "unit", "group_size", "tie", "used", "reward_mean", "prompt_id", "n_informative", "n_trained",
        "reused")
SUMMED = ("samples", "informative", "informative_forced", "informative_comparable", "informative_untied",
          "capped_samples")
PER_JOB_COLUMNS = ("job", *SUMMED, "trained_per_1000", "comparable_per_1000", "untied_per_1000",
                   "wasted_frac_comparable", "value")


def drawn_groups(groups: pd.DataFrame) -> pd.DataFrame:
    """The groups drawn: replayed rows (`reused`) left out (they were drawn and counted at an earlier step)."""
    if "reused" not in groups:
        return groups
    reused = groups["reused"].fillna(False).astype(bool).to_numpy()
    return groups[~reused] if reused.any() else groups


def unit_ids(groups: pd.DataFrame) -> np.ndarray:
    """Each row's training unit as an id (its job, step and `unit`); a row without a unit (it did not train, or an
    older run) is a unit of its own."""
    own = np.arange(len(groups), dtype=np.int64)
    if "unit" not in groups:
        return own
    has = groups["unit"].notna().to_numpy()
    if not has.any():
        return own
    # a (job, step) pair's code counted (jobs x steps stays small), then its units hashed: nothing sorted
    step = groups["step"].to_numpy(np.int64)[has]
    job_step = dense_ranks(column_codes(groups["job"])[has] * (int(step.max()) + 1) + step)
    units = groups["unit"].to_numpy()[has].astype(np.int64)
    found = group_ids(job_step * (int(units.max()) + 1) + units)[0]
    ids = own + int(found.max()) + 1  # the rows without a unit after every unit's id
    ids[has] = found
    return ids


def counts(groups: pd.DataFrame) -> pd.DataFrame:
    """Per group row (aligned with `groups`; pass the drawn ones, `drawn_groups`): samples, informative (as trained),
    informative_forced (a tie rule's: nonzero advantages in a unit whose drawn rewards have no spread),
    informative_comparable (the rest, with the samples a cap left out counted as above), informative_untied (those
    of groups that did not tie), capped (its unit trained fewer samples than it drew), spread (its unit's drawn
    rewards differ), unit (`unit_ids`), unit_drawn and unit_trained (NaN without `n_trained`)."""
    counted, _ = sample_counts(groups)
    samples = counted["samples"].to_numpy(np.int64)
    informative = counted["informative"].to_numpy(np.int64)
    tie = groups["tie"].to_numpy(bool)
    unit = unit_ids(groups)
    width = int(unit.max(initial=-1)) + 1
    mean = groups["reward_mean"].to_numpy(float) if "reward_mean" in groups else np.zeros(len(groups))
    untied_groups = np.bincount(unit, ~tie, minlength=width)
    low, high = np.full(width, np.inf), np.full(width, -np.inf)
    np.minimum.at(low, unit, mean)
    np.maximum.at(high, unit, mean)
    spread = ((untied_groups > 0) | (high - low > TOLERANCE))[unit]
    forced = np.where(spread, 0, informative)
    comparable = (informative - forced).astype(float)
    capped = np.zeros(len(groups), bool)
    drawn = trained = np.full(len(groups), np.nan)
    if "n_trained" in groups and groups["n_trained"].notna().any():
        kept = groups["n_trained"].to_numpy(float)
        known = ~np.isnan(kept)
        drawn = np.bincount(unit, samples, minlength=width)[unit].astype(float)
        trained = np.bincount(unit, np.where(known, kept, 0.0), minlength=width)[unit]
        whole = np.bincount(unit, ~known, minlength=width)[unit] == 0  # every row of the unit recorded it
        drawn[~whole], trained[~whole] = np.nan, np.nan
        capped = whole & (trained > 0) & (trained < drawn)
        kept = np.where(known, kept, 0.0)
        share = informative / np.where(kept > 0, kept, 1.0)
        share[kept <= 0] = 1.0
        comparable = np.where(capped & spread, informative + np.clip(samples - kept, 0, None) * share, comparable)
    return pd.DataFrame({"samples": samples, "informative": informative, "informative_forced": forced,
                         "informative_comparable": comparable, "informative_untied": np.where(tie, 0, informative),
                         "capped": capped, "spread": spread, "unit": unit, "unit_drawn": drawn,
                         "unit_trained": trained}, index=groups.index)


def per_job_sums(groups: pd.DataFrame, found: pd.DataFrame) -> pd.DataFrame:
    """Each job's sums of `counts` (`found`, aligned with `groups`): SUMMED, indexed by job (as text), jobs that drew
    nothing left out."""
    job, distinct = group_ids(column_codes(groups["job"]))
    first = np.zeros(len(distinct), np.int64)
    first[job[::-1]] = np.arange(len(job))[::-1]
    capped = np.where(found["capped"].to_numpy(), found["samples"].to_numpy(), 0)
    sums = {c: np.bincount(job, (capped if c == "capped_samples" else found[c].to_numpy()).astype(float),
                           minlength=len(distinct)) for c in SUMMED}
    out = pd.DataFrame(sums, index=pd.Index(groups["job"].iloc[first].astype(str).to_numpy(), name="job"))
    return out[out["samples"] > 0]


def comparable_per_job(groups: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per job: job, its seed and arm keys, SUMMED (samples drawn; informative as trained; informative_forced
    by a tie rule; informative_comparable; informative_untied; capped_samples, drawn in capped units), and per 1,000
    drawn: trained_per_1000 (what the rule gave: `1000 × (1 − wasted_frac)`), comparable_per_1000 (the same rule for
    every arm: rank on this), untied_per_1000 (from groups that did not tie); wasted_frac_comparable (1 −
    comparable_per_1000 / 1000: the tests' metric `COMPARABLE_METRIC`) and `value` (= comparable_per_1000, what
    `ranking.informative_by_arm`'s rows average). `groups`: the groups table (replayed rows are left out here), with
    `n_trained` and `unit` where the runs record them."""
    drawn = drawn_groups(groups[[c for c in dict.fromkeys([*unit_keys(groups, arm), *READ]) if c in groups]])
    if drawn.empty:
        return pd.DataFrame(columns=[*PER_JOB_COLUMNS, *arm])
    per_job = per_job_sums(drawn, counts(drawn))
    for name, column in (("trained", "informative"), ("comparable", "informative_comparable"),
                         ("untied", "informative_untied")):
        per_job[f"{name}_per_1000"] = 1000 * per_job[column] / per_job["samples"]
    per_job["wasted_frac_comparable"] = 1 - per_job["comparable_per_1000"] / 1000
    per_job["value"] = per_job["comparable_per_1000"]
    arms = job_arms(drawn, unit_keys(drawn, arm))
    return per_job.join(arms.set_axis(arms.index.astype(str))).rename_axis("job").reset_index()
