"""What a folder is to the writers of analysis (the report's, the ingest's, the viewer's): a run's folder shows it by
its record or its writer's lock, and nothing of analysis writes into one, or into a folder inside one."""

from __future__ import annotations

import json
import os
from pathlib import Path

# a job's record, its disk reserve while it runs, or its writer's lock (grpo_lab/run/lock.py): a `.lock` counts
# where it holds a holder's record ({pid, host, since}), as grpo-lab's does (pytest leaves empty ones, for one)
RUN_SIGNS = ("run.json", "status.json", ".run.json.reserve", ".lock")
LOCK = ".lock"


def run_sign(folder: Path) -> str | None:
    """The first of `RUN_SIGNS` in `folder`, or None where it is not a run's."""
    return next((sign for sign in RUN_SIGNS if os.path.lexists(folder / sign)
                 and (sign != LOCK or holds_a_record(folder / sign))), None)


def holds_a_record(lock: Path) -> bool:
    """Whether a `.lock` is a run's: it holds its holder's record (grpo_lab/run/lock.py writes it once held)."""
    try:
        with open(lock, "rb") as f:
            record = json.loads(f.read(4096))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "pid" in record


def run_above(path: Path) -> tuple[Path, str] | None:
    """The nearest folder above `path` that is a run's, with its sign; None where none is."""
    for above in path.resolve().parents:
        if sign := run_sign(above):
            return above, sign
    return None
