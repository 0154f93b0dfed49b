"""Figures drawn in a second process while the report computes the rest.

A third of a report's time is matplotlib (axes, ticks, text, PNG encoding), and no section waits for a
figure: so each figure is handed, as soon as its section records it, to one worker process that draws
it into the build folder, while this process goes on to the next section; once the sections are done,
this process draws the figures the worker has not begun (`Drawing.finish`). The worker is started (and
imports matplotlib and pandas) while the tables load. A figure is `draw(data, path, **options)` with
`draw` a module-level function: it crosses to the worker by pickle, so it draws there exactly as it
would here (same code, same data, same style; the PNGs are byte for byte the same).

One core, or `GRPO_LAB_REPORT_PROCESSES=1` (the tests' workers set it: two pytest workers already fill
two cores), draws every figure in this process at the end instead.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

PROCESSES = "GRPO_LAB_REPORT_PROCESSES"  # 1: draw in the building process; unset: a second one where 2+ cores


class Drawing:
    """One worker process drawing figures into `folder` in the order they are handed over."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.started: dict[str, Future] = {}
        # spawn, not fork: the building process has arrow's threads running, and a fork copies their locks
        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        self.pool.submit(_warm_up)  # the worker's imports overlap the loading of the tables

    def start(self, name: str, draw: Callable[[Path], Path]) -> None:
        self.started[name] = self.pool.submit(draw, self.folder / f"{name}.png")

    def finish(self, figures: Mapping[str, Callable[[Path], Path]]) -> None:
        """Every figure of `figures` (name: draw) drawn: those the worker has not begun (or was never handed)
        are drawn here, from the last one back (the worker takes them from the front), so neither process
        waits while the other has a queue; a figure that failed in the worker raises its error here."""
        for name in reversed(list(figures)):
            if name not in self.started or self.started[name].cancel():
                figures[name](self.folder / f"{name}.png")
        for future in self.started.values():
            if not future.cancelled():
                future.result()


_ACTIVE: ContextVar[Drawing | None] = ContextVar("drawing", default=None)


def active() -> Drawing | None:
    """The drawing process of the build in progress, if it has one."""
    return _ACTIVE.get()


def processes() -> int:
    """How many processes a report may use: GRPO_LAB_REPORT_PROCESSES, else 2 where two cores are usable."""
    value = os.environ.get(PROCESSES, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"{PROCESSES}={value!r}: expected a whole number of processes (1 or 2)") from None
    return min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@contextmanager
def drawing(folder: Path) -> Iterator[Drawing | None]:
    """Within the block, figures that sections record start drawing into `folder` at once in a second
    process (None, and nothing started, where the report may use one process only)."""
    if processes() < 2:
        yield None
        return
    worker = Drawing(folder)
    token = _ACTIVE.set(worker)
    try:
        yield worker
    finally:
        _ACTIVE.reset(token)
        worker.pool.shutdown(wait=True, cancel_futures=True)  # a failed build leaves no worker behind


def _warm_up() -> None:
    import analysis.render.curves  # noqa: F401 - every figure module, with matplotlib and pandas
    import analysis.render.intervals  # noqa: F401
    import analysis.render.scores  # noqa: F401
    import analysis.render.tie_learning  # noqa: F401
    import analysis.render.ties  # noqa: F401
