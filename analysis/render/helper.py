"""The report's second process: where two cores are usable, a build shares its work with one spawned worker.

The worker computes what `report` hands it with `begin` (the sections of the eval rows, held-out scores and
coverage: `report.held_out_sections`; this module knows no section) while this process computes those of
the groups, and draws each figure as soon as its section records it (`Helper.start`, from `Files.figure`),
while this process goes on to the next section; once the sections are done, this process draws the
figures the worker has not begun (`Helper.finish`). Nothing waits for a figure, and the held-out sections read only the eval rows, small
to send. The worker is started, and imports matplotlib and pandas, while the tables load (`load` reads
with `data.cores.readers()` threads meanwhile).

What crosses to the worker is pickled: a figure is `draw(data, path, **options)` with `draw` a
module-level function, a computation a module-level function and its arguments. Each runs there exactly
as it would here (same code, same data, same style): the report is byte for byte the one built in one
process (tests/test_report_helper.py).

One core, `GRPO_LAB_REPORT_PROCESSES=1` or a daemonic process (`data.cores.processes`) builds the report in
this process alone; a worker that dies (killed, out of memory) leaves what it had to this process.

The worker is started without the caller's `__main__`: it needs only this package, and spawn would
otherwise run the caller's script again in it (a script that calls `build_report` without an
`if __name__ == "__main__":` guard would start a second build there, and fail).
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import Any

from analysis.data.cores import processes

_SPAWNING = threading.Lock()


class Helper:
    """One worker process: computations and figures (drawn into `folder`) in the order they are handed over."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.started: dict[str, Future] = {}
        # spawn, not fork: the building process has arrow's threads running, and a fork copies their locks
        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        with _SPAWNING:  # builds started at once in two threads: each puts back the real __main__
            main = sys.modules["__main__"]
            sys.modules["__main__"] = types.ModuleType("__main__")  # what spawn finds: no script to run again
            try:  # the worker is spawned here, by the first submit; its imports overlap the loading of the tables
                self.pool.submit(_warm_up)
            finally:
                sys.modules["__main__"] = main

    def begin(self, function: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        """`function(*args)` begun in the worker; call what this returns for its value (computed here
        instead when the worker has died)."""
        try:
            future = self.pool.submit(function, *args)
        except BrokenProcessPool:
            return partial(function, *args)

        def result() -> Any:
            try:
                return future.result()
            except BrokenProcessPool:
                return function(*args)
        return result

    def start(self, name: str, draw: Callable[[Path], Path]) -> None:
        try:
            self.started[name] = self.pool.submit(draw, self.folder / f"{name}.png")
        except BrokenProcessPool:  # the worker has died: `finish` draws this one here
            pass

    def finish(self, figures: Mapping[str, Callable[[Path], Path]]) -> None:
        """Every figure of `figures` (name: draw) drawn: those the worker has not begun (or was never handed)
        are drawn here, from the last one back (the worker takes them from the front), so neither process
        waits while the other has a queue, and so are those of a worker that died; a figure that failed in
        the worker raises its error here."""
        for name in reversed(list(figures)):
            if name not in self.started or self.started[name].cancel():
                figures[name](self.folder / f"{name}.png")
        for name, future in self.started.items():
            if future.cancelled():
                continue
            try:
                future.result()
            except BrokenProcessPool:
                figures[name](self.folder / f"{name}.png")


_ACTIVE: ContextVar[Helper | None] = ContextVar("helper", default=None)


def active() -> Helper | None:
    """The second process of the build in progress, if it has one."""
    return _ACTIVE.get()


def begin(function: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """`function(*args)` begun in the build's second process where there is one; call what this returns
    for its value (where there is none, the call computes it here)."""
    helper = active()
    return helper.begin(function, *args) if helper is not None else partial(function, *args)


def hand_over(files: Iterable[Any]) -> None:
    """The figures of `files` (each a section's `Files`), recorded in the worker by a computation `begin`
    handed it, handed back to it to draw."""
    helper = active()
    if helper is not None:
        for found in files:
            for name, draw in found.figures.items():
                helper.start(name, draw)


@contextmanager
def helping(folder: Path) -> Iterator[Helper | None]:
    """Within the block, the build's second process (figures drawn into `folder`; None, and nothing
    started, where the report may use one process only)."""
    if processes() < 2:
        yield None
        return
    helper = Helper(folder)
    token = _ACTIVE.set(helper)
    try:
        yield helper
    except BaseException:
        helper.pool.shutdown(wait=True, cancel_futures=True)  # a failed build leaves nothing running
        raise
    else:  # every figure is drawn (`finish` waited for them): the worker exits on its own, unwaited
        helper.pool.shutdown(wait=False)
    finally:
        _ACTIVE.reset(token)


def _warm_up() -> None:
    import analysis.render.curves  # noqa: F401 - every figure module, with matplotlib and pandas
    import analysis.render.intervals  # noqa: F401
    import analysis.render.scores  # noqa: F401
    import analysis.render.tie_learning  # noqa: F401
    import analysis.render.ties  # noqa: F401
