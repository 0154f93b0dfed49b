"""The arms of a sweep: which config keys vary between jobs, each job's arm, readable arm names.

An arm is one setting of the varying keys other than the seed; its jobs are its seeds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pandas as pd

from analysis.data.config import ALIASES

REPLICATE_KEY = "seed"


def varying_keys(jobs: pd.DataFrame, config_columns: Sequence[str]) -> list[str]:
    """Config columns whose value differs between jobs, an alias in place of the key it stands for."""
    varying = [c for c in config_columns if jobs[c].astype(str).nunique() > 1]  # as text: None and NaN alike
    aliased = {source for alias in varying for source in ALIASES.get(alias, ()) if source != alias}
    return [c for c in varying if c not in aliased]


def arm_keys(jobs: pd.DataFrame, config_columns: Sequence[str]) -> list[str]:
    """The keys that tell arms apart: the varying keys but the seed, or ["sampler"] if only seeds vary."""
    return [k for k in varying_keys(jobs, config_columns) if k != REPLICATE_KEY] or ["sampler"]


def job_arms(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Each job's values of `keys` (constant within a job), indexed by job."""
    return frame.groupby("job", observed=True)[list(keys)].first()


def arm_label(values: Mapping[str, object]) -> str:
    """A readable name for an arm: "sampler=fixed, group_size=8" ("all" when no key is given)."""
    return ", ".join(f"{key}={value}" for key, value in values.items()) or "all"


def short_label(label: str) -> str:
    """An arm told apart by one key needs only its value: "fixed" for "sampler=fixed"."""
    return label.split("=", 1)[1] if label.count("=") == 1 else label


def iter_arms(frame: pd.DataFrame, keys: Sequence[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    """(label, rows) of each arm of `frame`, in order of first appearance."""
    for values, rows in frame.groupby(list(keys), observed=True, dropna=False, sort=False):
        yield arm_label(dict(zip(keys, values))), rows
