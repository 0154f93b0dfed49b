"""What each job recorded besides its tables: its run.json (status, versions, machine, difficulty
labels) and the experiment's name from Hydra's records."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from analysis.data.config import job_overrides
from analysis.data.load import RUN_FILES


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


def experiment_name(root: Path, jobs: pd.DataFrame) -> str:
    """The `experiment=` choice of the sweep (multirun.yaml) or of its jobs (overrides.yaml), else
    the `experiment` config key, else the folder's name."""
    names: list[str] = []
    multirun = root / "multirun.yaml"
    if multirun.is_file():
        task = (((yaml.safe_load(multirun.read_text()) or {}).get("hydra") or {}).get("overrides") or {}).get("task")
        names += [str(o).partition("=")[2] for o in task or [] if str(o).lstrip("+").startswith("experiment=")]
    for path in jobs["path"] if not names else []:
        names += [o.partition("=")[2] for o in job_overrides(Path(path)) if o.lstrip("+").startswith("experiment=")]
    if not names and "experiment" in jobs:
        names = [str(v) for v in jobs["experiment"].dropna()]
    names = list(dict.fromkeys(names))
    return ", ".join(names) if names else root.resolve().name


def difficulty_names(jobs: pd.DataFrame) -> dict[str, str]:
    """What each difficulty label is ("1" -> "1+1 digits"), from the run.json of the jobs (the task
    writes it); {} when no job recorded any (a pass-rate bin or a "Level 3" names itself)."""
    names: dict[str, str] = {}
    for record in run_records(jobs):
        labels = record.get("difficulty_labels")
        if isinstance(labels, dict):
            names.update({str(k): str(v) for k, v in labels.items()})
    return names
