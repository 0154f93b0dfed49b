"""What each job recorded besides its tables: its run.json (status, versions, machine, difficulty
labels) and the experiment's name from Hydra's records. A job whose run.json says `killed` (the trainer
writes it when the job is stopped by a signal, or the next start does when it finds the job's `running`
left by a process that is gone), or still says `running` though its process is gone (this host, its pid
not alive), is read as killed (`stopped_reason`): never as a job that is running or done. A job its sampler
stopped (a sampler's cap on its rounds: run.json `status` done, `stopped` says why) is loaded as done, and named
with its reason (`sampler_stop`) wherever the report says its jobs are done."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import yaml

from analysis.data.config import job_overrides

RUN_FILES = ("run.json", "status.json")  # DESIGN.md names both; read whichever the job wrote
KILLED = "killed"  # a job stopped before it finished: run.json's own word, or the report's for a `running` left


def read_run_record(run_dir: Path) -> object:
    """The job's run.json (or status.json) as JSON ({} where it has neither); OSError or ValueError where
    it cannot be read."""
    for name in RUN_FILES:
        if (run_dir / name).exists():
            return json.loads((run_dir / name).read_text())
    return {}


def stopped_reason(record: dict) -> str | None:
    """Why a job that is not `failed` did not finish, as the report says it (it begins with `KILLED`): its
    run.json says `killed`, or says `running` though the process that wrote it is gone; None otherwise."""
    status = record.get("status")
    if status == KILLED:
        return f"{KILLED} ({record.get('error') or record.get('stopped') or 'stopped before it finished'})"
    if status == "running" and _process_gone(record):
        return (f"{KILLED} (its run.json still says running, but its process, pid {record['pid']} on this host "
                f"{record['host']}, is gone)")
    return None


def sampler_stop(record: dict) -> str | None:
    """Why a job that finished (`status` done) ended before its budget, as its run.json says it (`stopped`: a
    sampler's cap, "greso sampler: 8 generation rounds ... Stopped at step 72; ..."); None where it ran to its
    budget or is not done."""
    stopped = record.get("stopped")
    if record.get("status") != "done" or not stopped:
        return None
    return str(stopped).strip()


def running_note(record: dict) -> str:
    """For a job whose run.json says `running` and that is not known to be gone: what can be told of it."""
    pid, host = record.get("pid"), record.get("host")
    if not isinstance(pid, int) or not isinstance(host, str):
        return "no process recorded: cannot tell whether it still runs"
    if host != platform.node():
        return f"pid {pid} on host {host}: cannot tell from here whether it still runs"
    return f"pid {pid} on this host still runs"


def _process_gone(record: dict) -> bool:
    """Whether the process named in a `running` record is gone: this host's, and no process has its pid (a
    pid reused since reads as alive: the report then says running, never killed, of a live job)."""
    pid, host = record.get("pid"), record.get("host")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or host != platform.node():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):  # another user's (alive), or no pid a process can have
        return False
    return False


def run_records(jobs: pd.DataFrame) -> list[dict]:
    """Each job's run.json as a dict ({} where it is missing or not an object), in the jobs' order."""
    out = []
    for path in jobs["path"]:
        found = next((Path(path) / name for name in RUN_FILES if (Path(path) / name).is_file()), None)
        try:
            data = json.loads(found.read_text()) if found else {}
        except (OSError, ValueError):
            data = {}
        out.append(data if isinstance(data, dict) else {})
    return out


def experiment_name(root: Path, jobs: pd.DataFrame, roots: Sequence[Path] = ()) -> str:
    """The `experiment=` choice of the sweep (multirun.yaml) or of its jobs (overrides.yaml), else
    the `experiment` config key, else the folder's name. Several sources (`roots`): each source's own name so
    found, over its own jobs, joined by " + " (never the first source's alone)."""
    if len(roots) > 1:
        from analysis.data.load import source_names  # load imports this module

        names = []
        for source, folder in zip(roots, source_names(roots)):
            own = jobs[[_under(Path(path), Path(source)) for path in jobs["path"]]] if "path" in jobs else jobs
            found = _experiments(Path(source), own)
            names.append(", ".join(found) if found else folder)
        return " + ".join(dict.fromkeys(names))
    names = _experiments(root, jobs)
    return ", ".join(names) if names else root.resolve().name


def _experiments(root: Path, jobs: pd.DataFrame) -> list[str]:
    """The `experiment=` choices of `root`'s sweep or of its jobs, else their `experiment` key; [] where none."""
    names: list[str] = []
    multirun = root / "multirun.yaml"
    if multirun.is_file():
        task = (((yaml.safe_load(multirun.read_text()) or {}).get("hydra") or {}).get("overrides") or {}).get("task")
        names += [str(o).partition("=")[2] for o in task or [] if str(o).lstrip("+").startswith("experiment=")]
    for path in jobs["path"] if not names and "path" in jobs else []:
        names += [o.partition("=")[2] for o in job_overrides(Path(path)) if o.lstrip("+").startswith("experiment=")]
    if not names and "experiment" in jobs:
        names = [str(v) for v in jobs["experiment"].dropna()]
    return list(dict.fromkeys(names))


def _under(path: Path, root: Path) -> bool:
    """Whether the job folder `path` is `root` or inside it."""
    path, root = path.resolve(), root.resolve()
    return path == root or root in path.parents


def difficulty_order(jobs: pd.DataFrame) -> tuple[str, ...]:
    """The order the jobs' run.json give their difficulty labels (`difficulty_order`: an ingested run's, by first
    appearance in its logs or `--difficulty-order`), the first job's first and each later job's new labels after;
    () where none records one (natural order then: "2" before "10", "p0.0-0.2" before "p0.2-0.4")."""
    order: dict[str, None] = {}
    for record in run_records(jobs):
        labels = record.get("difficulty_order")
        if isinstance(labels, list):
            order.update(dict.fromkeys(str(label) for label in labels))
    return tuple(order)


def difficulty_names(jobs: pd.DataFrame) -> dict[str, str]:
    """What each difficulty label is ("1" -> "1+1 digits"), from the run.json of the jobs (the task
    writes it); {} when no job recorded any (a pass-rate bin or a "Level 3" names itself)."""
    names: dict[str, str] = {}
    for record in run_records(jobs):
        labels = record.get("difficulty_labels")
        if isinstance(labels, dict):
            names.update({str(k): str(v) for k, v in labels.items()})
    return names
