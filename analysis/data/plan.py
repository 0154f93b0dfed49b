"""The jobs a sweep meant to run against those it holds. Hydra's `multirun.yaml` records the sweep (its
sweeper's `params` and the command line's overrides); their product, in Hydra's order (its BasicSweeper's),
is every job the sweep launches, job k in the folder `k` (Hydra's default subdir). A launcher whose worker
died takes down the jobs it had not begun: they leave no folder, and the report names each with its
overrides (`missing_jobs`), so a sweep that lost jobs never reads as a smaller sweep that ran whole."""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from analysis.data.config import job_overrides
from analysis.data.load import SkippedWarning, find_jobs, is_run, source_names

# `hydra.runtime.output_dir`, as Hydra writes it: the only key of that name four spaces in, under `runtime:`
OUTPUT_DIR = re.compile(r"^  runtime:\n(?:    .*\n)*?    output_dir: (.*)$", re.M)
MAX_PLANNED = 100_000  # a sweep of more jobs is not enumerated (its count alone would not be read)


class MissingJobsWarning(SkippedWarning):
    """Jobs a sweep meant to run that left no run; the message names them."""


@dataclass(frozen=True)
class Missing:
    """A job the sweep meant to run that left no run: its name as the report names jobs (its folder;
    `<source>/<folder>` with several sources) and its overrides."""

    job: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """What the sources' multirun.yaml meant: `meant` jobs in all (sources without one count none), of which
    `missing` left no run."""

    meant: int = 0
    missing: list[Missing] = field(default_factory=list)


def planned_jobs(root: Path) -> list[tuple[str, ...]] | None:
    """Each job's overrides in Hydra's job order, from `root/multirun.yaml`; None where there is none, or it
    cannot be read as a basic sweep's (another sweeper, an override Hydra's parser refuses, too many jobs)."""
    path = root / "multirun.yaml"
    if not path.is_file():
        return None
    try:
        hydra = (yaml.safe_load(path.read_text()) or {}).get("hydra") or {}
        sweeper = hydra.get("sweeper") or {}
        if not str(sweeper.get("_target_") or "BasicSweeper").endswith("BasicSweeper"):
            return None  # another sweeper (optuna, ...) chooses its jobs as it runs
        params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
        task = [str(o) for o in ((hydra.get("overrides") or {}).get("task") or [])]
        # Hydra's own parser and product: its grammar (choice, range, glob, quoting) is not re-implemented here
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        overrides = OverridesParser.create().parse_overrides(params + task)
        sizes = {o.get_key_element(): len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1
                 for o in overrides}  # a key given twice: the last wins, as in Hydra's product
        if math.prod(sizes.values()) > MAX_PLANNED:
            return None
        batches = BasicSweeper.split_arguments(overrides, None)
    except Exception:  # noqa: BLE001 - a record Hydra itself would not read: the sweep's size cannot be told
        return None
    return [tuple(job) for batch in batches for job in batch]


def missing_jobs(roots: Sequence[Path]) -> Plan:
    """The jobs each source's multirun.yaml meant to run that left no run: job k is there where its folder
    `k` holds one, or a run whose recorded overrides are job k's (a sweep with another subdir). Named in a
    `MissingJobsWarning` and in the report (its Jobs section and a line of the Findings)."""
    meant, missing = 0, []
    for root, source in zip(roots, source_names(roots)):
        planned = planned_jobs(root)
        if planned is None:
            continue
        meant += len(planned)
        found = {tuple(sorted(_overrides(job))) for job in find_jobs(root)}
        for k, overrides in enumerate(planned):
            if not is_run(root / str(k)) and tuple(sorted(overrides)) not in found:
                missing.append(Missing(str(k) if len(roots) == 1 else f"{source}/{k}", overrides))
    if missing:
        named = "; ".join(f"{m.job} ({' '.join(m.overrides)})" for m in missing[:5])
        warnings.warn(f"missing {len(missing)} of the {meant} jobs the sweep meant to run (multirun.yaml), which "
                      f"left no run: {named}{' ...' if len(missing) > 5 else ''}", MissingJobsWarning, stacklevel=2)
    return Plan(meant, missing)


def outside_plan(root: Path, found: Sequence[Path]) -> dict[Path, str]:
    """The jobs of the sweep `root` (`found`, its run folders) that Hydra ran as another job, each with why: a job
    copied in from elsewhere. Each job's .hydra/hydra.yaml records the folder Hydra wrote it into
    (`hydra.runtime.output_dir`). A job whose folder has another name than that was another job (another sweep's
    job 0 copied in as job 4); one with its name, written under another folder than most of the sweep's jobs, is
    another sweep's only where the sweep's multirun.yaml plans no job of that number (a sweep moved, and some of
    its jobs resumed there, keeps them all). {} for a single run, or where fewer than two jobs record a folder."""
    if list(found) == [root]:
        return {}
    written = {job: where for job in found if (where := _output_dir(job)) is not None}
    counts = Counter(where.parent for where in written.values()).most_common(2)
    if len(written) < 2:
        return {}
    home = counts[0][0] if len(counts) == 1 or counts[0][1] > counts[1][1] else None
    planned = planned_jobs(root)
    out = {}
    for job, where in written.items():
        if where.name != job.name:
            out[job] = f"Hydra ran it as {where}, another job than this folder's: "
        elif home is not None and where.parent != home and planned is not None and not (
                job.name.isdigit() and int(job.name) < len(planned)):
            out[job] = (f"Hydra ran it in {where.parent}, not in this sweep's {home}, and this sweep's multirun.yaml "
                        f"plans {len(planned)} jobs: ")
    return {job: why + "a job copied in from another sweep is left out; give that sweep as a source of its own"
            for job, why in out.items()}


def _output_dir(job: Path) -> Path | None:
    """Where Hydra wrote the job: its .hydra/hydra.yaml's `hydra.runtime.output_dir`, read from that one line (the
    whole record is 170 lines: parsed for each of a sweep's jobs, it cost a 221-job report 1.7 s); None where it
    does not say."""
    try:
        found = OUTPUT_DIR.search((job / ".hydra" / "hydra.yaml").read_text())
        where = yaml.safe_load(found.group(1)) if found else None
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return Path(where) if isinstance(where, str) and where else None


def _overrides(job: Path) -> list[str]:
    try:
        return job_overrides(job)
    except (OSError, ValueError, yaml.YAMLError):  # unreadable: the job is matched by its folder alone
        return []
