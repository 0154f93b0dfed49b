"""The report's front matter: its title (the experiment's name), and what ran where: the resolved
config (keys that vary across jobs and keys that do not), git commit, package versions, machine and
wall time per job, read from each job's run.json and Hydra's records. Every path is shown relative
to the report, so a report copied off a cluster names no machine's folders."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pandas as pd
import yaml

from analysis import markdown
from analysis.arms import varying_keys
from analysis.config import ALIASES, job_overrides
from analysis.labels import natural_sorted
from analysis.load import RUN_FILES, Tables

# keys the entry point sets at run time: Hydra's config.yaml holds a placeholder for them
RUNTIME = {"out_dir": "each job's own folder (the entry point sets it to Hydra's output directory)"}
PACKAGES = {"version": "grpo-lab", "torch": "torch", "transformers": "transformers"}  # run.json key -> name


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


def relative(path: str | Path, report_dir: Path) -> str:
    """`path` as seen from the report's folder."""
    return Path(os.path.relpath(Path(path).resolve(), report_dir.resolve())).as_posix()


def difficulty_names(jobs: pd.DataFrame) -> dict[str, str]:
    """What each difficulty label is ("1" -> "1+1 digits"), from the run.json of the jobs (the task
    writes it); {} when no job recorded any (a pass-rate bin or a "Level 3" names itself)."""
    names: dict[str, str] = {}
    for record in run_records(jobs):
        labels = record.get("difficulty_labels")
        if isinstance(labels, dict):
            names.update({str(k): str(v) for k, v in labels.items()})
    return names


def _duration(started: object, finished: object) -> str:
    try:
        seconds = (datetime.fromisoformat(str(finished)) - datetime.fromisoformat(str(started))).total_seconds()
    except (TypeError, ValueError):
        return "–"
    minutes, sec = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m{sec:02d}s" if minutes >= 60 else f"{minutes}m{sec:02d}s"


def wall_times(jobs: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per job: job, its arm keys and seed, status, started, finished, wall time (first start
    to finish, so a resumed job's time includes the pause)."""
    records = run_records(jobs)
    keys = [k for k in dict.fromkeys([*arm, "seed"]) if k in jobs]
    out = jobs[["job", *keys, "status"]].copy()
    out["started"] = [r.get("started") for r in records]
    out["finished"] = [r.get("finished") for r in records]
    out["wall_time"] = [_duration(r.get("started"), r.get("finished")) for r in records]
    return out


def _count(values: Sequence[str]) -> str:
    counts = pd.Series(list(values)).value_counts(sort=False)
    return "; ".join(f"{v} ({n} job{'s' * (n > 1)})" if len(counts) > 1 else str(v) for v, n in counts.items())


def _git(record: dict) -> str:
    git = record.get("git")
    if not isinstance(git, dict) or not git.get("commit"):
        return "not recorded" if "git" not in record else "not a git checkout"
    return f"`{str(git['commit'])[:12]}`" + (" with uncommitted changes" if git.get("dirty") else "")


def _machine(record: dict) -> str:
    return f"{record.get('machine') or 'not recorded'} (device {record.get('device') or 'unknown'})"


def _value(value: object, root: Path, report_dir: Path) -> str:
    """A config value for the report: an absolute path shown relative to the report."""
    text = str(value)
    return relative(text, report_dir) if os.path.isabs(text) and not text.startswith("//") else text


def provenance(tables: Tables, arm: Sequence[str], report_dir: Path, command: str | None) -> str:
    """The collapsed block under the findings: command, source, jobs, code, packages, machines,
    wall times and the resolved config."""
    jobs = tables.jobs
    records = run_records(jobs)
    varying = varying_keys(jobs, tables.config_columns)
    shown_as_alias = {source for alias in varying for source in ALIASES.get(alias, ())}
    fixed = [k for k in tables.config_columns if k not in varying and k not in shown_as_alias
             and k not in ALIASES and jobs[k].notna().any()]  # an alias repeats its key
    packages = [f"{name} {_count([str(r.get(key) or 'not recorded') for r in records])}"
                for key, name in PACKAGES.items()]
    times = wall_times(jobs, arm)
    vary = [f"- `{k}`: {', '.join(_value(v, tables.root, report_dir) for v in natural_sorted(jobs[k].astype(str).unique()))}"
            for k in varying]
    constant = pd.DataFrame({"key": fixed, "value": [RUNTIME.get(k) or _value(jobs[k].dropna().iloc[0], tables.root,
                                                                              report_dir) for k in fixed]})
    return "\n".join([
        "<details>", "<summary>Config and provenance (command, code, packages, machine, wall time, resolved "
        "config)</summary>", "",
        f"- Command: `{command}`" if command else "- Command: not recorded (no multirun.yaml or .hydra/hydra.yaml)",
        f"- Source: `{relative(tables.root, report_dir)}` (relative to this report)",
        f"- Jobs: {len(jobs)} loaded, {len(tables.skipped)} jobs or parts skipped (listed under Jobs)",
        f"- Code: git {_count([_git(r) for r in records])}",
        f"- Packages: {', '.join(packages)}",
        f"- Machine: {_count([_machine(r) for r in records])}",
        f"- Arms are told apart by: {', '.join(f'`{k}`' for k in arm) or '–'} (seeds are replicates)", "",
        "Wall time per job (from its first start to its finish, in run.json):", "",
        markdown.table(times), "",
        "Config keys that vary across jobs:", "", *(vary or ["None: every job has the same config."]), "",
        f"Config keys that do not vary ({len(fixed)}):", "",
        markdown.table(constant) if fixed else "None.", "",
        "</details>",
    ])
