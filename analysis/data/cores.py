"""How many cores a report may use: `GRPO_LAB_REPORT_PROCESSES`, else two where two are usable.

With two, a build shares its work with a second process (`analysis/scheduler.py`). 1 keeps a build to one process
(the tests' workers set it: two pytest workers already fill two cores); a daemonic process (a
`multiprocessing.Pool`'s worker) may start no process.
"""

from __future__ import annotations

import multiprocessing
import os

PROCESSES = "GRPO_LAB_REPORT_PROCESSES"  # 1: one process; unset: two where 2+ cores


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

