"""The arms of a sweep: which config keys vary between jobs, each job's arm, readable arm names.

An arm is one setting of the varying keys other than the seed; its jobs are its seeds. A key is any
flattened config key ("algo.lr", "task.levels"), never assumed to be an identifier, a string, a
scalar or non-null: rows are read by key (`row[key]`, never `getattr`), values are named by
`value_text` (null for a missing value, lists as their JSON text, a long value by a short label), and every
section names an arm through `arm_name` or `arm_label`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from analysis.data.config import ALIASES, CHOICES

REPLICATE_KEY = "seed"
DEFAULT_ARM = "sampler"  # the arm key when only seeds vary (load's alias: every job has the column)
# Keys that name a job or where it reports, never what it computes. The trainer's config.json records each job's own
# folder and logger name (Hydra's .hydra/config.yaml keeps them as one unresolved interpolation), so a sweep read from
# config.json alone (copied without .hydra/, or run without Hydra) would otherwise make every job an arm of its own.
NAMING_KEYS = ("out_dir",)
NAMING_PREFIXES = ("logger.", "logging.", "tracking.")
MAX_VALUE_CHARS = 60  # a longer value (a few-shot list, a system prompt) is named by a label, given whole once


def value_text(value: object) -> str:
    """A config value as the report names it (`whole_text`), a value longer than MAX_VALUE_CHARS by its label
    (`value_label`): a few-shot list or a system prompt would otherwise fill every sentence that names its arm.
    The provenance block gives each label's whole value once (`long_values`)."""
    text = whole_text(value)
    return value_label(text) if len(text) > MAX_VALUE_CHARS else text


def whole_text(value: object) -> str:
    """A config value whole, the same whatever container carried it: None and NaN as "null", booleans as
    "true"/"false", numbers as Python prints them (numpy scalars unwrapped), text as it is ("[1, 2]" for a list,
    which load keeps as its JSON text)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def value_label(text: str) -> str:
    """A long value's label: "#" and the first 6 hex digits of its text's SHA-256, the same in every report."""
    return "#" + hashlib.sha256(text.encode()).hexdigest()[:6]


def long_values(jobs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Each value of `keys` in `jobs` that the report names by its label: key, label, value (whole)."""
    rows = [{"key": key, "label": value_label(text), "value": text} for key in keys if key in jobs
            for text in dict.fromkeys(jobs[key].map(whole_text)) if len(text) > MAX_VALUE_CHARS]
    return pd.DataFrame(rows, columns=["key", "label", "value"])


def varying_keys(jobs: pd.DataFrame, config_columns: Sequence[str]) -> list[str]:
    """Config columns whose value differs between jobs, each by the key a user sweeps: the real key
    ("sampler.group_size", not load's alias "group_size"), but a config group's choice ("sampler")
    in place of the key it sets ("sampler.name"), and a preset the command line chose (`arm=grpo,ngrpo`: the
    jobs' `choices`) in place of every key whose value it fixes (algo.advantage, sampler.name). A job's name and
    folder (NAMING_KEYS, NAMING_PREFIXES) never vary an arm."""
    varying = [c for c in config_columns if jobs[c].map(value_text).nunique() > 1  # null is one value
               and not names_a_job(c)]
    hidden = {source for alias in varying if alias in CHOICES for source in ALIASES[alias] if source != alias}
    hidden |= {alias for alias in varying if alias in ALIASES and alias not in CHOICES
               and any(source in varying and source != alias for source in ALIASES[alias])}
    for choice in (c for c in chosen_groups(jobs) if c in varying):
        text = {key: jobs[key].map(value_text) for key in varying}
        hidden |= {key for key in varying if key not in (choice, REPLICATE_KEY)
                   and text[key].groupby(text[choice].to_numpy()).nunique().max() <= 1}
    return [c for c in varying if c not in hidden]


def names_a_job(key: str) -> bool:
    """Whether a config key names a job or where it reports (NAMING_KEYS, NAMING_PREFIXES), never what it computes."""
    return key in NAMING_KEYS or key.startswith(NAMING_PREFIXES)


def chosen_groups(jobs: pd.DataFrame) -> list[str]:
    """The config groups the jobs' command lines chose whose name is no config key (`with_aliases`' `choices`)."""
    if "choices" not in jobs:
        return []
    return sorted({name for text in jobs["choices"].dropna() for name in json.loads(text)})


def arm_keys(jobs: pd.DataFrame, config_columns: Sequence[str]) -> list[str]:
    """The keys that tell arms apart: the varying keys but the seed, or [DEFAULT_ARM] if only seeds vary.
    A config group's choice (`sampler`) comes first: in a two-key grid the first key's levels are the ones
    compared (`grid_keys`: samplers at each learning rate)."""
    keys = [k for k in varying_keys(jobs, config_columns) if k != REPLICATE_KEY] or [DEFAULT_ARM]
    chosen = set(CHOICES) | set(chosen_groups(jobs))
    return sorted(keys, key=lambda k: k not in chosen)


def unit_keys(frame: pd.DataFrame, arm: Sequence[str]) -> list[str]:
    """The arm keys and the seed, where the frame has one and it is not an arm key: what names a job's
    arm and its replicate, the unit that tests across seeds pair on."""
    return [*arm, *(["seed"] if "seed" in frame and "seed" not in arm else [])]


def job_arms(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Each job's values of `keys` (constant within a job), indexed by job; a null value stays null.
    What `frame.groupby("job", observed=True)[keys].first(skipna=False)` gives, read from each job's first
    row alone (a group-by would take every row of the keys: 50 ms on a million groups, several times a report)."""
    job = frame["job"]
    if not isinstance(job.dtype, pd.CategoricalDtype) or frame.empty:
        return frame.groupby("job", observed=True)[list(keys)].first(skipna=False)
    codes = job.cat.codes.to_numpy()
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])  # where a run of one job's rows begins
    found, at = np.unique(codes[starts], return_index=True)  # each job in category order, its first run
    rows = starts[at[found >= 0]]  # a row without a job (a missing code) is in no group
    out = frame.iloc[rows, [frame.columns.get_loc(k) for k in keys]]
    out.index = pd.CategoricalIndex(job.iloc[rows], name="job")
    return out


def arm_label(values: Mapping[str, object]) -> str:
    """A readable name for an arm: "sampler=fixed, algo.lr=0.0001" ("all" when no key is given)."""
    return ", ".join(f"{key}={value_text(value)}" for key, value in values.items()) or "all"


def arm_name(row: Mapping[str, object] | pd.Series, keys: Sequence[str]) -> str:
    """The arm of one row (a dict or a Series, as `iterrows` or `to_dict("records")` give) by its
    real keys and values: `arm_label` of `{key: row[key]}`."""
    return arm_label({key: row[key] for key in keys})


def group_values(keys: Sequence[str], values: object) -> dict[str, object]:
    """A group-by's key values as {key: value}, whether pandas gave a tuple or one scalar."""
    return dict(zip(keys, values if isinstance(values, tuple) else (values,)))


def short_label(label: str) -> str:
    """An arm told apart by one key needs only its value: "fixed" for "sampler=fixed"."""
    return label.split("=", 1)[1] if label.count("=") == 1 else label


def iter_arms(frame: pd.DataFrame, keys: Sequence[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    """(label, rows) of each arm of `frame`, in order of first appearance; a null value is an arm of
    its own."""
    # grouped by each value's name: a group-by's own keys lose types (None beside 2 comes back as 2.0)
    names = [frame[k].map(value_text).rename(k) for k in keys]
    for values, rows in frame.groupby(names, observed=True, sort=False):
        yield arm_label(group_values(keys, values)), rows


def text_per_job(jobs: pd.DataFrame, key: str) -> pd.Categorical:
    """Each job's `value_text` of `key`, as a categorical whose categories are in natural order."""
    from analysis.data.labels import natural_sorted

    text = jobs[key].map(value_text)
    return pd.Categorical(text, categories=natural_sorted(text.unique()))


def arms_as_text(frame: pd.DataFrame, jobs: pd.DataFrame, keys: Sequence[str], own: Sequence[str] = ()) -> pd.DataFrame:
    """`frame` (rows of load's tables, with their `job` categorical) with each config column among
    `keys` replaced by its `value_text`: every arm value a plain label, null included, so no group-by
    drops it and no table shows it otherwise than its name does. The table's `own` columns (groups'
    `group_size`, which wins over the config key of that name) are left as they are."""
    if frame.empty or "job" not in frame:
        return frame
    codes = frame["job"].cat.codes.to_numpy()  # (rows,) index into `jobs`, as load made it
    replaced = {}
    for key in keys:
        if key in jobs and key in frame and key not in own:
            per_job = text_per_job(jobs, key)
            replaced[key] = pd.Categorical.from_codes(per_job.codes[codes], categories=per_job.categories,
                                                      validate=False)  # in range: made here
    return frame.assign(**replaced) if replaced else frame


def grid_keys(frame: pd.DataFrame, keys: Sequence[str]) -> tuple[str, str] | None:
    """(compared, within) when the arms are a full grid of two keys (every value of the first beside every
    value of the second, each with two or more): the levels of the first are compared within each level of
    the second (samplers at each learning rate), never across; None otherwise."""
    if len(keys) != 2:
        return None
    values = frame[list(keys)].apply(lambda col: col.map(value_text)).drop_duplicates()
    sizes = [values[k].nunique() for k in keys]
    return (keys[0], keys[1]) if min(sizes) >= 2 and len(values) == sizes[0] * sizes[1] else None


def arm_pairs(frame: pd.DataFrame,
              keys: Sequence[str]) -> list[tuple[tuple[str, pd.DataFrame], tuple[str, pd.DataFrame]]]:
    """Every pair of arms of `frame` ((label, rows) each, in order of first appearance) that a report
    compares: all pairs, or in a two-key grid (`grid_keys`) the pairs that share the second key's value."""
    arms = list(iter_arms(frame, keys))
    pairs = list(combinations(arms, 2))
    grid = grid_keys(frame, keys)
    if grid is None:
        return pairs
    within = grid[1]
    level = {label: value_text(rows[within].iloc[0]) for label, rows in arms}
    return [(a, b) for a, b in pairs if level[a[0]] == level[b[0]]]
