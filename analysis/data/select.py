"""Which jobs a report reads and how it tells arms apart, when the user says so: `--where KEY=VALUE` keeps a
subset of jobs (values of one key are alternatives, different keys must all hold), `--by KEY[,KEY]` names the
arm keys, `--baseline KEY=VALUE` names the arm every difference is taken against (it becomes `a`). Each names
config keys only; each refuses in one line a key no job has, a value no job holds, a choice that keeps no job,
the seed as an arm key (seeds are the replicates arms are compared across) and a baseline key that is not an
arm key; a key that varies but is neither an arm key nor the seed is named (`unaccounted`), never pooled
silently."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from analysis.data.arms import REPLICATE_KEY, value_text, varying_keys
from analysis.data.config import ALIASES
from analysis.data.labels import natural_sorted
from analysis.data.load import TABLES, Tables


class SelectionError(ValueError):
    """A --where, --by or --baseline that names no key or no value of these jobs; the message is one line."""


def parse_pair(text: str, option: str) -> tuple[str, str]:
    """KEY=VALUE, or SelectionError naming the option."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SelectionError(f"{option} {text!r}: expected KEY=VALUE (e.g. sampler=fixed)")
    return key.strip(), value.strip()


def _values(tables: Tables, key: str, option: str) -> pd.Series:
    """Each job's value of config key `key` as the report names it, or SelectionError listing the keys that vary."""
    if key not in tables.config_columns:
        varying = ", ".join(varying_keys(tables.jobs, tables.config_columns)) or "none"
        what = "not a config key" if key in tables.jobs.columns else "no job has this key"
        raise SelectionError(f"{option} {key}: {what} (keys that vary here: {varying})")
    return tables.jobs[key].map(value_text)


def _held(values: pd.Series, key: str, value: str, option: str) -> np.ndarray:
    """Which jobs hold `value` (as the report names it, or a long value whole); SelectionError where none does,
    naming the values there are."""
    held = (values == value_text(value)).to_numpy()
    if not held.any():
        raise SelectionError(f"{option} {key}={value}: no job has it ({key} is "
                             f"{', '.join(natural_sorted(values.unique()))})")
    return held


def keep_jobs(tables: Tables, where: Sequence[str]) -> Tables:
    """Only the jobs `where` keeps ("KEY=VALUE" texts): those whose value of every key named is one of the values
    named for it (`--where sampler=fixed --where sampler=band`: either sampler; with `--where seed=0` too: either
    sampler, seed 0). SelectionError (one line) where a key or value names nothing, or no job is left."""
    if not where:
        return tables
    wanted: dict[str, list[str]] = {}
    for text in where:
        key, value = parse_pair(text, "--where")
        wanted.setdefault(key, []).append(value)
    keep = np.ones(len(tables.jobs), bool)
    for key, values_wanted in wanted.items():
        values = _values(tables, key, "--where")
        keep &= np.logical_or.reduce([_held(values, key, value, "--where") for value in values_wanted])
    if not keep.any():
        said = " and ".join(f"{key}={' or '.join(values)}" for key, values in wanted.items())
        raise SelectionError(f"--where: no job has {said} (each value is some job's, but not together: values of "
                             "one key are alternatives, different keys must all hold)")
    return _subset(tables, tables.jobs["job"][keep].astype(str).tolist())


def baseline_first(tables: Tables, baseline: str | None, arm: Sequence[str] = ()) -> Tables:
    """The jobs of the baseline arm first in every table, so that arm is `a` of each comparison with it.
    SelectionError (one line) where its key is not one of the arm keys `arm` (or their aliases) or no job
    holds its value."""
    if not baseline:
        return tables
    key, value = parse_pair(baseline, "--baseline")
    values = _values(tables, key, "--baseline")
    if key not in _arm_names(arm):
        why = "seeds are replicates, compared across; " if key == REPLICATE_KEY else ""
        shown = natural_sorted(tables.jobs[arm[0]].map(value_text).unique()) if arm and arm[0] in tables.jobs else []
        example = f", e.g. --baseline {arm[0]}={shown[0]}" if shown else ""
        raise SelectionError(f"--baseline {key}={value}: {key} is not an arm key ({why}arms are told apart by "
                             f"{', '.join(arm) or 'nothing'}): name an arm's value{example}")
    first = tables.jobs["job"][_held(values, key, value, "--baseline")].astype(str).tolist()
    order = first + [j for j in tables.jobs["job"].astype(str) if j not in first]
    return _subset(tables, order)


def _arm_names(arm: Sequence[str]) -> set[str]:
    """The arm keys and every alias of one (`sampler` and `sampler.name` name one key)."""
    named = set(arm)
    named |= {alias for alias, sources in ALIASES.items() if named & set(sources)}
    return named | {source for key in list(named) for source in ALIASES.get(key, ())}


# What jobs compared across sources must share: the problems and how answers are scored, the base model, how
# held-out answers are sampled, and the budget. Within one sweep such a key varies only because it was swept.
SHARED = ("task.", "model.name", "model.path", "model.gguf_file", "reward.accuracy", "reward.format",
          "eval.temperature", "max_samples", "max_tokens")


def comparable_sources(tables: Tables, by: Sequence[str] = ()) -> None:
    """Several sources: a `SHARED` key whose value differs between them (a task, an evaluation or a budget
    of their own) makes every comparison across them one of those settings as much as of the arms, so it is
    refused in one line naming the key and each source's values, unless `--by` names it as an arm key (or a
    source sweeps it itself, which makes it an arm key by default)."""
    if len(tables.roots) <= 1 or tables.jobs.empty:
        return
    source = tables.jobs["job"].astype(str).str.partition("/")[0]
    for key in tables.config_columns:
        if not key.startswith(SHARED) or key in by:
            continue
        values = tables.jobs[key].map(value_text)
        if values.nunique() > 1 and (values.groupby(source).nunique() == 1).all():  # varied inside a source: swept
            seen = {name: ", ".join(natural_sorted(v.unique())) for name, v in values.groupby(source, sort=False)}
            raise SelectionError(
                f"the sources differ in {key} ({'; '.join(f'{name}: {v}' for name, v in seen.items())}): jobs that "
                f"differ in it are not comparable; keep one value with --where {key}=VALUE, or compare it as an "
                f"arm with --by {key},...")


def arm_keys_given(tables: Tables, by: Sequence[str]) -> list[str]:
    """The arm keys `--by` names (once each), each checked against the jobs' config; the seed is refused: seeds
    are the replicates every arm is compared across, never an arm."""
    for key in by:
        if key == REPLICATE_KEY:
            raise SelectionError(f"--by {key}: seeds are the replicates each arm is compared across, never an arm "
                                 f"key; to read one seed, keep it with --where {key}=N")
        _values(tables, key, "--by")
    return list(dict.fromkeys(by))


def unaccounted(tables: Tables, arm: Sequence[str]) -> list[str]:
    """Keys whose value differs between jobs but that are neither an arm key nor the seed (nor an alias
    of either): their jobs are pooled within each arm, which the report must say."""
    named = _arm_names([*arm, REPLICATE_KEY])
    return [k for k in varying_keys(tables.jobs, tables.config_columns) if k not in named]


def pooled_line(tables: Tables, keys: Sequence[str]) -> str | None:
    """The Findings' line naming keys that vary within arms, with their values; None when there are none."""
    if not keys:
        return None
    parts = [f"`{k}` ({', '.join(natural_sorted(tables.jobs[k].map(value_text).unique()))})" for k in keys]
    return (f"**Pooled within arms**: {', '.join(parts)} {'varies' if len(keys) == 1 else 'vary'} between jobs "
            "but is not an arm key (`--by`): each arm pools its jobs over these values.")


def _subset(tables: Tables, jobs: Sequence[str]) -> Tables:
    """`tables` with only `jobs`, in that order: the jobs table's rows, each table's rows grouped by job in
    that order (within a job as they were), and the `job` categorical's codes indexing the new jobs table,
    as `load` makes them."""
    jobs = list(jobs)
    rank = {job: i for i, job in enumerate(jobs)}
    frames = {}
    for name in TABLES:
        frame = getattr(tables, name)
        if frame.empty or "job" not in frame:
            frames[name] = frame
            continue
        at = frame["job"].astype(str).map(rank).to_numpy(float)  # (rows,) NaN: a job left out
        rows = np.flatnonzero(~np.isnan(at))
        rows = rows[np.argsort(at[rows], kind="stable")]
        kept = frame.iloc[rows].reset_index(drop=True)
        frames[name] = kept.assign(job=pd.Categorical(kept["job"].astype(str), categories=jobs))
    positions = tables.jobs["job"].astype(str).map(rank)
    job_rows = tables.jobs[positions.notna().to_numpy()]
    job_rows = job_rows.iloc[np.argsort(positions.dropna().to_numpy(), kind="stable")].reset_index(drop=True)
    return replace(tables, jobs=job_rows, **frames)
