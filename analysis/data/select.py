"""Which jobs a report reads and how it tells arms apart, when the user says so: `--where KEY=VALUE` keeps a
subset of jobs, `--by KEY[,KEY]` names the arm keys, `--baseline KEY=VALUE` names the arm every difference is
taken against (it becomes `a`). Each refuses a key no job has, or a value no job holds, in one line; a key that
varies but is neither an arm key nor the seed is named (`unaccounted`), never pooled silently."""

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
    """Each job's value of `key` as the report names it, or SelectionError listing the keys that vary."""
    if key not in tables.jobs.columns:
        varying = ", ".join(varying_keys(tables.jobs, tables.config_columns)) or "none"
        raise SelectionError(f"{option} {key}: no job has this key (keys that vary here: {varying})")
    return tables.jobs[key].map(value_text)


def keep_jobs(tables: Tables, where: Sequence[str]) -> Tables:
    """Only the jobs whose value of each KEY is VALUE (`where`: "KEY=VALUE" texts, all must hold)."""
    if not where:
        return tables
    keep = np.ones(len(tables.jobs), bool)
    for text in where:
        key, value = parse_pair(text, "--where")
        values = _values(tables, key, "--where")
        if not (values == value).any():
            raise SelectionError(f"--where {key}={value}: no job has it ({key} is "
                                 f"{', '.join(natural_sorted(values.unique()))})")
        keep &= (values == value).to_numpy()
    return _subset(tables, tables.jobs["job"][keep].astype(str).tolist())


def baseline_first(tables: Tables, baseline: str | None) -> Tables:
    """The jobs of the baseline arm first in every table, so that arm is `a` of each comparison with it."""
    if not baseline:
        return tables
    key, value = parse_pair(baseline, "--baseline")
    values = _values(tables, key, "--baseline")
    if not (values == value).any():
        raise SelectionError(f"--baseline {key}={value}: no job has it ({key} is "
                             f"{', '.join(natural_sorted(values.unique()))})")
    first = tables.jobs["job"][(values == value).to_numpy()].astype(str).tolist()
    order = first + [j for j in tables.jobs["job"].astype(str) if j not in first]
    return _subset(tables, order)


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
    """The arm keys `--by` names, each checked against the jobs' config."""
    for key in by:
        _values(tables, key, "--by")
    return list(by)


def unaccounted(tables: Tables, arm: Sequence[str]) -> list[str]:
    """Keys whose value differs between jobs but that are neither an arm key nor the seed (nor an alias
    of either): their jobs are pooled within each arm, which the report must say."""
    named = set(arm) | {REPLICATE_KEY}
    named |= {alias for alias, sources in ALIASES.items() if named & set(sources)}
    named |= {source for key in list(named) for source in ALIASES.get(key, ())}
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
