"""How many cores a report may use: `GRPO_LAB_REPORT_PROCESSES`, else two where two are usable.

The build reads table parts on `readers()` threads and, with two, shares its work with a second process
(`render.helper`). 1 keeps a build to one thread and one process (the tests' workers set it: two pytest
workers already fill two cores); a daemonic process (a `multiprocessing.Pool`'s worker) may start no process.
"""

from __future__ import annotations

import multiprocessing
import os

PROCESSES = "GRPO_LAB_REPORT_PROCESSES"  # 1: one process, one reading thread; unset: two where 2+ cores


def processes() -> int:
    """How many processes a report may use: GRPO_LAB_REPORT_PROCESSES, else 2 where two cores are usable;
    1 in a daemonic process, which may not start one."""
    if multiprocessing.current_process().daemon:
        return 1
    value = os.environ.get(PROCESSES, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"{PROCESSES}={value!r}: expected a whole number of processes (1 or 2)") from None
    return min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def readers() -> int:
    """How many threads read a sweep's table parts: a part's decoding lets go of the GIL, so two cores read
    two parts at once (1 where the report may use one process)."""
    return min(2, processes())
