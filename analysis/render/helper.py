"""The report's second process: where two cores are usable, a build shares its work with one spawned worker.

The worker is started, and imports matplotlib and pandas, as the build begins. It computes what `report`
hands it with `begin` (this module knows no section): the sections of the eval rows, held-out scores and
coverage, from the eval rows that `load` reads first, while this process reads the groups; tie persistence,
from a few columns of the groups, while this process computes the other sections of the groups. It draws
each figure as soon as its section records it (`Helper.start`, from `Files.figure`); once the sections are
done, this process takes back the figures the worker has not claimed, the last handed over first, and draws
them too (`Helper.finish`). Nothing waits for a figure, and what crosses is small.

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

import gc
import multiprocessing
import os
import shutil
import sys
import tempfile
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


class Later:
    """A value begun in the worker (`future`), or computed here when asked for (`compute`; also where the
    worker died before it was done)."""

    def __init__(self, compute: Callable[[], Any], future: Future | None = None):
        self.compute, self.future = compute, future

    def done(self) -> bool:
        """Whether asking for the value now returns at once (the worker has it; False for one computed here)."""
        return self.future is not None and self.future.done()

    def __call__(self) -> Any:
        if self.future is None:
            return self.compute()
        try:
            return self.future.result()
        except BrokenProcessPool:
            return self.compute()


class Helper:
    """One worker process: computations and figures (drawn into `folder`) in the order they are handed over."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.started: dict[str, Future] = {}  # in the order handed over: the order the worker takes them
        # a figure is drawn by whichever process first claims it (a file made with O_EXCL): this one takes
        # them back from the end of the worker's queue, even those already passed to the worker's process
        self.claims = Path(tempfile.mkdtemp(prefix="grpo-lab-figures-"))
        # spawn, not fork: the building process has arrow's threads running, and a fork copies their locks
        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        with _SPAWNING:  # builds started at once in two threads: each puts back the real __main__
            main = sys.modules["__main__"]
            sys.modules["__main__"] = types.ModuleType("__main__")  # what spawn finds: no script to run again
            try:  # the worker is spawned here, by the first submit; its imports overlap the loading of the tables
                self.pool.submit(_warm_up)
            finally:
                sys.modules["__main__"] = main

    def begin(self, function: Callable[..., Any], *args: Any) -> Later:
        """`function(*args)` begun in the worker (computed here instead when the worker has died)."""
        try:
            return Later(partial(function, *args), self.pool.submit(function, *args))
        except BrokenProcessPool:
            return Later(partial(function, *args))

    def start(self, name: str, draw: Callable[[Path], Path]) -> None:
        try:
            self.started[name] = self.pool.submit(_draw_claimed, draw, self.folder / f"{name}.png", self.claims / name)
        except BrokenProcessPool:  # the worker has died: `finish` draws this one here
            pass

    def finish(self, figures: Mapping[str, Callable[[Path], Path]]) -> None:
        """Every figure of `figures` (name: draw) drawn: those never handed to the worker, then those it has
        not claimed, from the last handed back (it takes them from the front), so neither process waits while
        the other has a queue; those of a worker that died are drawn here too. A figure that failed in the
        worker raises its error here."""
        here = [name for name in figures if name not in self.started]
        for name in here:
            figures[name](self.folder / f"{name}.png")
        for name in reversed(self.started):
            if name in figures and _claim(self.claims / name):
                figures[name](self.folder / f"{name}.png")
        for name, future in self.started.items():
            try:
                future.result()
            except BrokenProcessPool:  # it may have died mid-way through this one: drawn again, whole
                figures[name](self.folder / f"{name}.png")

    def close(self, wait: bool) -> None:
        """Stop the worker (`wait`: until it has exited, its queue cancelled) and remove the claims."""
        self.pool.shutdown(wait=wait, cancel_futures=wait)
        shutil.rmtree(self.claims, ignore_errors=True)


_ACTIVE: ContextVar[Helper | None] = ContextVar("helper", default=None)


def active() -> Helper | None:
    """The second process of the build in progress, if it has one."""
    return _ACTIVE.get()


def begin(function: Callable[..., Any], *args: Any) -> Later:
    """`function(*args)` begun in the build's second process where there is one; call what this returns
    for its value (where there is none, the call computes it here)."""
    helper = active()
    return helper.begin(function, *args) if helper is not None else Later(partial(function, *args))


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
        helper.close(wait=True)  # a failed build leaves nothing running
        raise
    else:  # every figure is drawn (`finish` waited for them): the worker exits on its own, unwaited
        helper.close(wait=False)
    finally:
        _ACTIVE.reset(token)


def _claim(claim: Path) -> bool:
    """Whether this call made `claim` (so this process draws its figure); False when another did first."""
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _draw_claimed(draw: Callable[[Path], Path], path: Path, claim: Path) -> None:
    """In the worker: `draw(path)` unless the building process has claimed the figure first."""
    if _claim(claim):
        draw(path)


def _warm_up() -> None:
    """In the worker, first: what every figure imports, then frozen for the garbage collector (its full
    passes would scan every module's objects again while the figures make and drop many)."""
    import analysis.render.curves  # noqa: F401 - every figure module, with matplotlib and pandas
    import analysis.render.intervals  # noqa: F401
    import analysis.render.scores  # noqa: F401
    import analysis.render.tie_learning  # noqa: F401
    import analysis.render.ties  # noqa: F401
    gc.freeze()
