"""A run or a Hydra sweep directory into DataFrames, each row joined with its job's config.

Nothing here is fatal but a directory with no usable job (`NoRunsError`, one line): a failed or
killed job (`records.stopped_reason`), a job with no config or an unreadable run.json, a job with no
tables, and a part that is unreadable or breaks the table contract (analysis/data/schema.py: missing or
mistyped columns, nulls in required columns, NaN rewards) are each named in a `SkippedWarning`, listed
in `Tables.skipped`, and left out; one bad job never stops the others from loading.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf.errors import OmegaConfBaseException
from yaml import YAMLError

from analysis.data.config import config_source, flat_config, shape_conflicts, with_aliases
from analysis.data.cores import processes
from analysis.data.labels import natural_key
from analysis.data.records import RUN_FILES, read_run_record, stopped_reason
from analysis.data.schema import schema_problem, value_problems

TABLES = ("groups", "steps", "eval")
# `rewards` and `correct` (lists) are most of a groups part's bytes, and no analysis needs them
GROUP_COLUMNS = (
    "run_id", "step", "prompt_id", "difficulty", "round", "group_size", "reward_mean", "reward_std",
    "n_correct", "tie", "tie_kind", "used", "tokens", "samples_total", "tokens_total", "unit", "n_informative", "rank",
    "truncated",
)
DEFAULT_COLUMNS: dict[str, Sequence[str] | None] = {"groups": GROUP_COLUMNS, "steps": None, "eval": None}
# repeated strings, read as dictionaries: quicker to read than plain strings, and they arrive as
# categoricals, small and quick to group by
DICTIONARY_COLUMNS = {"groups": ("run_id", "prompt_id", "difficulty", "tie_kind"), "steps": ("run_id",),
                      "eval": ("run_id", "prompt_id", "difficulty", "answer")}
# the jobs table's columns that are not config; `choices`: the config groups the job's command line chose whose
# name is no key of its config (`arm=grpo`: a preset of several keys), as JSON (analysis/data/config.py)
JOB_META = ("job", "path", "status", "machine", "device", "choices")


class NoRunsError(FileNotFoundError):
    """No run or sweep directory at the path, or not one usable job in it; the message is one line."""


class BrokenContract(ValueError):
    """A part whose columns do not match the table contract (analysis/data/schema.py)."""


class SkippedWarning(UserWarning):
    """A job or a part left out of the analysis; the message names it and says why."""


@dataclass(frozen=True)
class Skipped:
    """A job or part left out: `name` is relative to the loaded directory."""

    name: str
    reason: str


@dataclass
class Tables:
    """What `load` found. `jobs` has one row per loaded job (job, path, status, then config columns)."""

    root: Path  # the first source
    jobs: pd.DataFrame
    groups: pd.DataFrame
    steps: pd.DataFrame
    eval: pd.DataFrame
    skipped: list[Skipped] = field(default_factory=list)
    own: dict[str, tuple[str, ...]] = field(default_factory=dict)  # each table's own columns, not its config
    roots: tuple[Path, ...] = ()  # every source, in the order given (one: `root`)

    @property
    def config_columns(self) -> list[str]:
        """The config columns (flattened keys and aliases) joined onto every table row."""
        return [c for c in self.jobs.columns if c not in JOB_META]


def is_run(path: Path) -> bool:
    """Whether `path` looks like one job's directory."""
    return any((path / name).exists() for name in (*RUN_FILES, ".hydra", *TABLES))


def find_jobs(path: Path) -> list[Path]:
    """The run directories of `path`: itself if it is a run, else its run subfolders in natural order."""
    if is_run(path):
        return [path]
    children = (p for p in path.iterdir() if p.is_dir() and is_run(p))
    return sorted(children, key=lambda p: natural_key(p.name))


def source_names(roots: Sequence[Path]) -> list[str]:
    """What each source is called in job names when there are several: its folder's name, made unique
    by its position where two share a name."""
    names = [root.resolve().name or str(root) for root in roots]
    return [f"{name}#{i + 1}" if names.count(name) > 1 else name for i, name in enumerate(names)]


def load(
    path: str | Path | Sequence[str | Path],
    tables: Sequence[str] = TABLES,
    columns: Mapping[str, Sequence[str] | None] | None = None,
    *,
    first: Sequence[str] = (),
    on_first: Callable[[Tables], object] | None = None,
) -> Tables:
    """Load a run or sweep directory, or several (`path` a list): one table of every source's jobs,
    each job named `<source>/<job>` when there are several, a run found twice (the same run id in its
    run.json: a sweep and a copy of one of its jobs) counted once.

    `tables` picks which of groups/steps/eval to read (the others come back empty); `columns`
    overrides, per table, the columns read (None: all; groups default to `GROUP_COLUMNS`).
    Each table gains a `job` column (the job's folder, relative to `path`) and the job's config
    columns, all categorical (cast before arithmetic: `df.temperature.astype(float)`); where a
    config column shares a table column's name (groups' `group_size`) the table's column wins.

    `first`: tables read before the others; `on_first` is then called, while the others are read, with
    what those hold: the other tables empty, the jobs those with a readable part of them (fewer than in
    the end where a job has parts of the other tables only; nothing is warned of yet). The report begins
    its held-out sections there while the groups load.

    >>> tables = load("multirun/2025-01-01/12-00-00")  # doctest: +SKIP
    >>> tables.groups.groupby(["sampler", "difficulty"], observed=True).tie.mean()  # doctest: +SKIP
    """
    roots = [Path(p) for p in ([path] if isinstance(path, (str, Path)) else path)]
    if not roots:
        raise NoRunsError("no run or sweep directory given")
    for root in roots:
        if not root.is_dir():
            raise NoRunsError(f"no run or sweep directory at {root}")
    if unknown := set(tables) - set(TABLES):
        raise ValueError(f"tables {sorted(unknown)}: must be among {', '.join(TABLES)}")
    wanted = {**DEFAULT_COLUMNS, **(columns or {})}
    found_jobs, names, entries = [], [], []
    for root, source in zip(roots, source_names(roots)):
        found = find_jobs(root)
        if not found:
            raise NoRunsError(f"no grpo-lab runs in {root}: no folder with run.json, .hydra or table parts")
        here = [run_dir.relative_to(root).as_posix() if run_dir != root else root.name for run_dir in found]
        found_jobs += found
        names += here if len(roots) == 1 else [f"{source}/{name}" for name in here]
        entries += [(entry if len(roots) == 1 else f"{source}/{entry}", reason)
                    for entry, reason in other_entries(root, found)]
        from analysis.data.plan import outside_plan  # plan reads the jobs as this module finds them

        for job, reason in outside_plan(root, found).items():  # a job copied in from another sweep
            k = found_jobs.index(job)
            entries.append((names.pop(k), reason))
            found_jobs.pop(k)
    records = _job_records(found_jobs, names)
    stages = [stage for stage in ([t for t in tables if t in first], [t for t in tables if t not in first]) if stage]
    # a reading thread per core the report may use (`cores.processes`): a part is opened and decoded mostly
    # without the GIL, so two read a sweep in 0.55-0.6x the time of one; this thread gathers the first tables
    with ThreadPoolExecutor(processes()) as pool:
        reads = [[None if isinstance(record, str) else pool.submit(_read_job, run_dir, name, stage, wanted)
                  for run_dir, name, record in zip(found_jobs, names, records)] for stage in stages]
        if on_first is not None and len(stages) > 1:
            early = _gather(found_jobs, names, records, reads[:1], stages[0], lambda *skip: None)
            if early[0]:
                on_first(_tables(roots, *early, wanted, []))
        skipped: list[Skipped] = []
        jobs, pieces = _gather(found_jobs, names, records, reads, tables, partial(_skip, skipped, stacklevel=4))
    for entry, reason in entries:
        _skip(skipped, entry, reason)
    if not jobs:
        reasons = "; ".join(f"{s.name}: {s.reason}" for s in skipped[:3])
        where = roots[0] if len(roots) == 1 else ", ".join(map(str, roots))
        raise NoRunsError(f"no usable job in {where}: {len(found_jobs)} found, every one skipped ({reasons})")
    return _tables(roots, jobs, pieces, wanted, skipped)


def _gather(run_dirs: Sequence[Path], names: Sequence[str], records: Sequence[dict | str],
            reads: Sequence[Sequence[Future | None]], tables: Sequence[str], skip: Callable[[str, str], None]
            ) -> tuple[list[dict], dict[str, list[pa.Table]]]:
    """(jobs, pieces): the usable jobs' records and their tables (tagged with the job's index), from each
    job's reads (one per stage of `load`), in job order; what cannot be used is passed to `skip` (name,
    why), a job's parts in table and part order, whichever thread read them."""
    jobs: list[dict] = []
    pieces: dict[str, list[pa.Table]] = {t: [] for t in tables}
    for i, (run_dir, name, record) in enumerate(zip(run_dirs, names, records)):
        if isinstance(record, str):
            skip(name, record)
            continue
        try:
            read = {t: found for stage in reads for t, found in stage[i].result().items()}
        except Exception as err:  # noqa: BLE001 - one bad job must not stop the report for the others
            skip(name, f"unreadable ({type(err).__name__}: {err})")
            continue
        for t in tables:
            for part, problem in read[t][1]:
                skip(part, problem)
        if all(read[t][0] is None for t in tables):
            skip(name, f"no readable {'/'.join(tables)} parts")
            continue
        if config_source(run_dir) is None:  # never an arm of its own with every config column empty
            skip(name, "no config (.hydra/config.yaml or config.json): its arm cannot be told")
            continue
        jobs.append(record)
        for t in tables:
            if read[t][0] is not None:
                pieces[t].append(_tag(read[t][0], len(jobs) - 1))
    return jobs, pieces


def _tables(roots: Sequence[Path], jobs: list[dict], pieces: Mapping[str, list[pa.Table]],
            wanted: Mapping[str, Sequence[str] | None], skipped: list[Skipped]) -> Tables:
    """The Tables of the usable jobs' records and tagged pieces (tables not read come back empty)."""
    # object columns: a config value keeps its type (max_steps 8, not 8.0 beside a job that lacks it)
    jobs_frame = pd.DataFrame(jobs, dtype=object)
    jobs_frame = jobs_frame[[*JOB_META, *(c for c in jobs_frame.columns if c not in JOB_META)]]
    per_job = {c: pd.Categorical(jobs_frame[c]) for c in jobs_frame.columns if c not in JOB_META}
    frames = {t: _to_frame(pieces.get(t, []), wanted[t], jobs_frame["job"], per_job) for t in TABLES}
    own = {t: tuple(c for c in frame.columns if c != "job" and (c not in jobs_frame or c in _read_columns(pieces[t])))
           for t, frame in frames.items() if t in pieces}
    return Tables(root=roots[0], jobs=jobs_frame, skipped=skipped, own=own, roots=tuple(roots), **frames)


def _skip(skipped: list[Skipped], name: str, reason: str, stacklevel: int = 3) -> None:
    skipped.append(Skipped(name, reason))
    warnings.warn(f"skipped {name}: {reason}", SkippedWarning, stacklevel=stacklevel)


def _job_records(run_dirs: Sequence[Path], names: Sequence[str]) -> list[dict | str]:
    """Each job's row (status and config, aliases added), or why it cannot be used: unreadable, failed,
    a copy of a job read before it (the same run id: `0.bak` beside `0`), or a config of another shape
    than the other jobs' (`shape_conflicts`)."""
    records: list[tuple[dict, dict] | str] = []
    first_of: dict[str, str] = {}  # run id -> the job read under it
    for run_dir, name in zip(run_dirs, names):
        try:
            status, flat = read_run_record(run_dir), flat_config(run_dir)
        except (OSError, ValueError, YAMLError, OmegaConfBaseException) as err:
            records.append(f"unreadable run.json or config ({err})")
            continue
        if not isinstance(status, dict):
            records.append(f"run.json is not a JSON object (a {type(status).__name__})")
            continue
        run_id = status.get("run_id")
        if isinstance(run_id, str) and run_id in first_of:
            records.append(f"a copy of job {first_of[run_id]} (the same run id, {run_id}, in its run.json): "
                           "each run counts once")
            continue
        if isinstance(run_id, str):
            first_of[run_id] = name
        if status.get("status") == "failed":
            records.append(f"failed ({status.get('error') or 'no error recorded'})")
            continue
        if stopped := stopped_reason(status):  # killed, or `running` by a process that is gone: never loaded as done
            records.append(stopped)
            continue
        records.append((status, flat))
    usable = [i for i, record in enumerate(records) if not isinstance(record, str)]
    odd = shape_conflicts([records[i][1] for i in usable])  # type: ignore[index]
    out: list[dict | str] = []
    for i, (record, run_dir, name) in enumerate(zip(records, run_dirs, names)):
        if isinstance(record, str):
            out.append(record)
        elif usable.index(i) in odd:
            out.append(odd[usable.index(i)])
        else:
            status, flat = record
            out.append({**with_aliases(flat, run_dir), "job": name, "path": str(run_dir),
                        "status": status.get("status", "unknown"), "machine": status.get("machine"),
                        "device": status.get("device")})
    return out


def other_entries(root: Path, jobs: Sequence[Path]) -> list[tuple[str, str]]:
    """What else a sweep folder holds, each with why it is not read: everything but its jobs, Hydra's
    `multirun.yaml`, the report folder and hidden entries (launchers' state, a report being built)."""
    if jobs == [root]:
        return []
    known = {*(p.name for p in jobs), "multirun.yaml", "report"}
    out = []
    for entry in sorted(root.iterdir(), key=lambda p: natural_key(p.name)):
        if entry.name in known or entry.name.startswith("."):
            continue
        out.append((entry.name, "not a run (no run.json, .hydra or table parts)" if entry.is_dir()
                    else "not a run folder (a file)"))
    return out


def _read_job(run_dir: Path, name: str, tables: Sequence[str], wanted: Mapping[str, Sequence[str] | None]
              ) -> dict[str, tuple[pa.Table | None, list[tuple[str, str]]]]:
    """Each of one job's tables (None where it has no readable part), with the parts that cannot be used,
    each (name, why), in part order."""
    read = {}
    for t in tables:
        problems: list[tuple[str, str]] = []
        read[t] = _read_parts(run_dir / t, wanted[t], f"{name}/{t}", problems), problems
    return read


def _read_parts(folder: Path, columns: Sequence[str] | None, name: str, skipped: list[tuple[str, str]]
                ) -> pa.Table | None:
    """All readable parts of one table of one job, or None if there are none. Parts that cannot be
    used are added to `skipped` as (name, why), in part order."""
    dictionary = [c for c in DICTIONARY_COLUMNS[folder.name] if columns is None or c in columns]
    paths = _part_paths(folder)
    problems: dict[int, str] = {}
    read: dict[int, pa.Table] = {}
    checked: list[tuple[pq.ParquetSchema, str | None, list[str] | None]] = []  # a run's parts share one schema
    for i, part in enumerate(paths):
        try:
            read[i] = _read_part(part, columns, dictionary, checked)
        except (OSError, pa.ArrowException) as err:
            problems[i] = f"unreadable part ({err})"
        except BrokenContract as err:
            problems[i] = str(err)
    found = value_problems(folder.name, list(read.values()))
    problems |= {i: problem for i, problem in zip(read, found) if problem}
    skipped += [(f"{name}/{paths[i].name}", problems[i]) for i in sorted(problems)]
    parts = [table for i, table in read.items() if i not in problems]
    # "permissive": a part written by an older version may lack a column or use a narrower int
    return pa.concat_tables(parts, promote_options="permissive") if parts else None


def _part_paths(folder: Path) -> list[Path]:
    """The folder's parts (`part-*.parquet`) in name order; none where there is no folder."""
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.name.startswith("part-") and e.name.endswith(".parquet"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [folder / name for name in names]


def _read_part(path: Path, columns: Sequence[str] | None, dictionary: Sequence[str],
               checked: list[tuple[pq.ParquetSchema, str | None, list[str] | None]]) -> pa.Table:
    with pa.OSFile(str(path)) as source:  # an open file: no filesystem to resolve for each of many parts
        try:
            file = pq.ParquetFile(source, pre_buffer=False, read_dictionary=dictionary)
        except KeyError:  # a part lacking one of the dictionary columns: ask only for those it has
            present = pq.read_schema(path).names
            file = pq.ParquetFile(source, pre_buffer=False, read_dictionary=[c for c in dictionary if c in present])
        # the contract and the columns to read, once per distinct file schema: compared as parquet stores it
        # (1 us; arrow's schema takes 20 us to build and as long to hash), which fixes each column's name and
        # kind, all the verdict reads
        stored = file.schema
        known = next((verdict for seen, *verdict in checked if stored.equals(seen)), None)
        if known is None:
            schema = file.schema_arrow
            known = [schema_problem(path.parent.name, schema), [c for c in columns if c in schema.names] if columns
                     else None]
            checked.append((stored, *known))
        problem, present_columns = known
        if problem:
            raise BrokenContract(problem)
        # a part holds one step: too small for reader threads to pay for themselves
        return file.read(columns=present_columns, use_threads=False)


def _read_columns(pieces: list[pa.Table]) -> set[str]:
    return {name for piece in pieces for name in piece.column_names}


def _tag(table: pa.Table, job_index: int) -> pa.Table:
    """The table with a `_job` column holding the job's index (replaced by the `job` categorical later)."""
    return table.append_column("_job", pa.array(np.full(table.num_rows, job_index, dtype=np.int32)))


def _to_frame(pieces: list[pa.Table], columns: Sequence[str] | None, jobs: pd.Series,
              config: Mapping[str, pd.Categorical]) -> pd.DataFrame:
    """One DataFrame from every job's table: the table's columns, then `job` (`jobs`: each job's name) and
    the config columns (`config`: each one's value per job) it does not have itself."""
    if not pieces:
        return pd.DataFrame(columns=["job", *(columns or [])])
    frame = pa.concat_tables(pieces, promote_options="permissive").to_pandas()
    codes = frame.pop("_job").to_numpy()  # (rows,) index into `jobs`
    # config columns are categoricals (one value per job): a column of small ints however many rows
    joined = {"job": pd.Categorical.from_codes(codes, categories=jobs, validate=False),
              **{c: _per_row(per_job, codes) for c, per_job in config.items() if c not in frame.columns}}
    return pd.concat([frame, pd.DataFrame(joined, index=frame.index, copy=False)], axis=1)


def _per_row(per_job: pd.Categorical, codes: np.ndarray) -> pd.Categorical:
    """A per-job categorical spread over rows, each row's job given by its index (`codes`, in range: not
    checked again). A key with one value in every job (most keys of a sweep) is zeros, which the kernel
    hands out untouched (no pass over the rows to write them)."""
    if len(per_job.categories) == 1 and not (per_job.codes != 0).any():
        row_codes = np.zeros(len(codes), per_job.codes.dtype)
    else:
        row_codes = per_job.codes[codes]
    return pd.Categorical.from_codes(row_codes, dtype=per_job.dtype, validate=False)
