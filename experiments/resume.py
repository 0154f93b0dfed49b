"""Before Hydra starts: the folders a command line will write into, refused in one line when one cannot be
written, holds a run started with another config, holds files no run wrote (resume=never: in the run's folders;
otherwise anywhere, unless it holds a run of ours), or is an ingested run's folder. Hydra writes
before any job runs (a sweep's `multirun.yaml`, the launcher's logs), so a start that will be refused must be
refused here, where nothing has been written yet. Each job checks again under its lock
(grpo_lab.run.guards.prepare): this is the early, whole-command answer; that one is the authority.

A sweep's job folders are `hydra.sweep.dir/<job number>` in Hydra's own order (its BasicSweeper's product of
the sweeper params and the command line). A sweep with another `hydra.sweep.subdir` is checked job by job
only (its folders cannot be told before Hydra runs).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from experiments.common import compose_job, task_overrides
from grpo_lab.errors import InputError
from grpo_lab.run.guards import CONFIG_NAME, check_resume, may_differ
from grpo_lab.run.lock import RunDirUnwritable
from grpo_lab.run.owned import check_start, run_files

JOB_NUM = "${hydra.job.num}"  # Hydra's default sweep subdir


def job_folders(base: DictConfig, args: list[str]) -> list[tuple[Path, list[str]]] | None:
    """(folder, overrides) of every job the command line runs, in Hydra's job order; None when the folders
    cannot be told before Hydra runs (an interpolation this side cannot resolve, a custom sweep subdir)."""
    task = task_overrides(args)
    try:
        if not any(a in ("-m", "--multirun") for a in args):
            return [(Path(OmegaConf.select(base, "hydra.run.dir", throw_on_missing=True)), task)]
        if OmegaConf.to_container(base.hydra.sweep, resolve=False).get("subdir") != JOB_NUM:
            return None
        sweep = Path(OmegaConf.select(base, "hydra.sweep.dir", throw_on_missing=True))
    except OmegaConfBaseException:
        return None
    params = [f"{k}={v}" for k, v in (base.hydra.sweeper.get("params") or {}).items()]
    jobs = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(params + task), None)[0]
    return [(sweep / str(k), list(job)) for k, job in enumerate(jobs)]


def _writable(folder: Path, key: str) -> None:
    """The folder, or the nearest folder above it that exists (Hydra creates the rest), must be a folder and take
    writes. `key`: the override that names it (hydra.run.dir, hydra.sweep.dir), for the message."""
    at = folder
    while not (at.exists() or at.is_symlink()) and at != at.parent:
        at = at.parent
    if not at.is_dir():  # Hydra's makedirs would fail in a traceback: a run writes into a folder
        kind = "a symlink to nothing" if not at.exists() else "a file"
        where = f"is {kind}" if at == folder else f"lies under {at}, {kind}"
        raise RunDirUnwritable(f"{key}: {folder} {where}, not a folder; a run writes its files into a folder: give "
                               f"{key} a folder's path")
    if not os.access(at, os.W_OK):
        why = "a read-only filesystem" if os.statvfs(at).f_flag & os.ST_RDONLY else "no permission to write"
        raise RunDirUnwritable(f"{folder}: cannot write there ({why}{'' if at == folder else f' at {at}'})")


def _same_overrides(folder: Path, overrides: list[str]) -> bool:
    """Whether the job in `folder` was started with these overrides, but for keys that may differ."""
    recorded = folder / ".hydra" / "overrides.yaml"
    try:
        before = [str(o) for o in (yaml.safe_load(recorded.read_text(encoding="utf-8")) or [])]
    except (OSError, ValueError, yaml.YAMLError):
        return False

    def kept(items: list[str]) -> list[str]:
        return sorted(o for o in items if not may_differ(o.split("=")[0].lstrip("+~")))
    return kept(before) == kept(overrides)


def _starts_over(config_name: str, overrides: list[str], single: Any | None, composed: list[Any]) -> bool:
    """Whether the job runs with resume=never: its last `resume=` override, else its config's. The preflight
    composed every swept value at least once: when those jobs agree, every job does (nothing to compose)."""
    said = [o.split("=", 1)[1] for o in overrides if "=" in o and o.split("=", 1)[0].lstrip("+~") == "resume"]
    if said:
        return said[-1] == "never"
    if single is not None:
        return single.resume == "never"
    if len({job.resume for job in composed}) == 1:
        return composed[0].resume == "never"
    return compose_job(config_name, overrides).resume == "never"


def check_folders(config_name: str, base: DictConfig, args: list[str], single: Any | None,
                  composed: list[Any] = ()) -> None:
    """Raise InputError (one line) when a folder this command writes cannot be written, holds a run that this
    command would resume with another config, is to start over (resume=never) but holds a file no run writes, or
    holds no run of ours but files a run did not write (grpo_lab/run/owned.py: run_files, check_start). single:
    the one job's typed config when not a sweep; composed: the jobs the preflight composed."""
    planned = job_folders(base, args)
    if not planned:
        return
    multirun = any(a in ("-m", "--multirun") for a in args)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if multirun:
        _writable(planned[0][0].parent, key)  # the sweep folder: multirun.yaml goes there first
    for folder, overrides in planned:
        _writable(folder, key)
        if not folder.is_dir():
            continue
        if _starts_over(config_name, overrides, single, list(composed)):
            run_files(folder)  # resume=never deletes only a run's own files: a folder holding others is refused here
            continue
        check_start(folder)  # a folder of a person's files, or an ingest's, is no run to start in
        if not (folder / CONFIG_NAME).is_file():
            continue
        if single is None and _same_overrides(folder, overrides):
            continue  # the job's own command again (budgets may differ): nothing to compose
        job = single if single is not None else compose_job(config_name, overrides)
        check_resume(folder, job)


def refusal(config_name: str, base: DictConfig | None, args: list[str], jobs: list[Any]) -> str | None:
    """check_folders as one line, or None when every folder may be written."""
    if base is None:
        return None
    multirun = any(a in ("-m", "--multirun") for a in args)
    try:
        check_folders(config_name, base, args, None if multirun else jobs[0], jobs)
    except InputError as e:
        return str(e)
    return None
