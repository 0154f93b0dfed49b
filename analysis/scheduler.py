"""The report's second process: where two cores are usable, a build shares its work with one worker.

The worker is started as the build begins: forked where that is safe (`start_method`), else spawned (it then
imports matplotlib and pandas while this process reads). It computes what the runner hands it with `begin`
(`analysis.runner` decides what, from what the report's parts declare; this module knows no section): values
begun from the eval rows that `load` reads first, while this process reads the groups, their figures drawn there
too before it hands a value back (`begin(..., figures=)`; `hand_over` moves them into place); values either
process makes, whichever claims them first (`begin(..., claimable=True)`, `Later.take`). It draws each other
figure as soon as its section records it (`Helper.start`, from `Files.figure`); while this process waits for a
value the worker is making, and once the sections are done, it takes back the figures the worker has not
claimed, the last handed over first, and draws them too (`Helper.draw_until`, `Helper.finish`). Nothing waits
for a figure, and what crosses is small.

What crosses to the worker is pickled: a figure is `draw(data, path, **options)` with `draw` a
module-level function, a computation a module-level function and its arguments. Each runs there exactly
as it would here (same code, same data, same style): the report is byte for byte the one built in one
process (tests/test_scheduler.py).

One core, `GRPO_LAB_REPORT_PROCESSES=1` or a daemonic process (`data.cores.processes`) builds the report in
this process alone; a worker that dies (killed, out of memory) leaves what it had to this process.

A spawned worker is started without the caller's `__main__`: it needs only this package, and spawn would
otherwise run the caller's script again in it (a script that calls `build_report` without an
`if __name__ == "__main__":` guard would start a second build there, and fail).
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import Any

from analysis.data.cores import processes
from analysis.data.labels import current_order, label_order

_SPAWNING = threading.Lock()


class Later:
    """A value begun in the worker (`future`), or computed here when asked for (`compute`; also where the
    worker died before it was done). `drawn`: the folder where the worker drew the value's figures before
    handing it back (None where it drew none, or the value was computed here). `claim`: a value either process
    may compute, whichever claims it first (`Helper.begin(..., claimable=True)`)."""

    def __init__(self, compute: Callable[[], Any], future: Future | None = None, drawn: Path | None = None,
                 claim: Path | None = None, helper: Helper | None = None):
        self.compute, self.future, self.drawn, self.claim, self.helper = compute, future, drawn, claim, helper
        self.here = future is None  # computed in this process when asked for

    def take(self) -> bool:
        """Whether the value is this process's to compute: claimed here now where the worker has not begun it
        (then the worker skips it), so nothing waits behind the worker's queue for it."""
        if not self.here and self.claim is not None and _claim(self.claim):
            self.here, self.drawn = True, None
        return self.here

    def done(self) -> bool:
        """Whether asking for the value now returns at once (the worker has it; False for one computed here)."""
        return not self.here and self.future is not None and self.future.done()

    def __call__(self) -> Any:
        if self.take():
            return self.compute()
        if self.helper is not None:  # not idle meanwhile: the figures queued behind it, from the last
            self.helper.draw_until(self.future.done)
        try:
            value = self.future.result()
        except BrokenProcessPool:
            self.drawn = None  # nor its figures
            return self.compute()
        return value[1] if self.claim is not None else value  # claimable: (made there, value)


class Helper:
    """One worker process: computations and figures (drawn into `folder`) in the order they are handed over."""

    def __init__(self, folder: Path, warm: tuple[str, ...] = ()):
        self.folder = folder
        self.started: dict[str, Future] = {}  # in the order handed over: the order the worker takes them
        self.placed: set[str] = set()  # drawn by the worker with the value they show, and moved into `folder`
        self.draws: dict[str, Callable[[Path], Path]] = {}  # each figure handed to the worker
        self.taken: set[str] = set()  # figures handed to the worker and taken back: drawn here
        # a figure is drawn by whichever process first claims it (a file made with O_EXCL): this one takes
        # them back from the end of the worker's queue, even those already passed to the worker's process
        self.claims = Path(tempfile.mkdtemp(prefix="grpo-lab-figures-"))
        self.method = start_method()
        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(self.method))
        # the worker is started here, by the first submit: a spawned one's imports overlap the loading of the tables
        if self.method == "fork":
            # Python 3.12+ warns of any thread; the native pools' are safe (start_method)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", r".*multi-threaded, use of fork\(\)", DeprecationWarning)
                self.pool.submit(_warm_up, warm)
            return
        with _SPAWNING:  # builds started at once in two threads: each puts back the real __main__
            main = sys.modules["__main__"]
            sys.modules["__main__"] = types.ModuleType("__main__")  # what spawn finds: no script to run again
            try:
                self.pool.submit(_warm_up, warm)
            finally:
                sys.modules["__main__"] = main

    def begin(self, function: Callable[..., Any], *args: Any, figures: Callable[[Any], Iterable[Any]] | None = None,
              claimable: bool = False) -> Later:
        """`function(*args)` begun in the worker (computed here instead when the worker has died). `figures`
        (a module-level function of the value: the `Files` of its sections): the worker draws them too, into a
        folder of their own, before it hands the value back; `hand_over` moves them into place. `claimable`:
        whichever process claims it first computes it (the worker as it reaches it in its queue; this one with
        `Later.take`, or when it asks for the value before the worker has begun it)."""
        compute = partial(function, *args)
        order = current_order()  # the labels' order here (a recorded difficulty order): the worker sorts alike
        try:
            if claimable:
                claim = Path(tempfile.mkdtemp(prefix="task-", dir=self.claims)) / "claim"
                return Later(compute, self.pool.submit(_in_order, order, _unless_claimed, function, args, claim),
                             claim=claim, helper=self)
            if figures is None:
                return Later(compute, self.pool.submit(_in_order, order, function, *args), helper=self)
            drawn = Path(tempfile.mkdtemp(prefix="drawn-", dir=self.claims))  # a value dropped leaves none behind
            return Later(compute, self.pool.submit(_in_order, order, _drawn, function, args, figures, drawn), drawn,
                         helper=self)
        except BrokenProcessPool:
            return Later(compute)

    def place(self, name: str, drawn: Path) -> None:
        """The figure `name`, drawn by the worker into `drawn`, moved into the report's figures."""
        self.folder.mkdir(parents=True, exist_ok=True)
        shutil.move(drawn / f"{name}.png", self.folder / f"{name}.png")
        self.placed.add(name)

    def start(self, name: str, draw: Callable[[Path], Path]) -> None:
        try:
            self.started[name] = self.pool.submit(_in_order, current_order(), _draw_claimed, draw,
                                                  self.folder / f"{name}.png", self.claims / name)
            self.draws[name] = draw
        except BrokenProcessPool:  # the worker has died: `finish` draws this one here
            pass

    def draw_until(self, done: Callable[[], bool], only: Iterable[str] | None = None) -> None:
        """Figures taken back from the end of the worker's queue (those of `only`, where given) and drawn here,
        each claimed just before it is drawn (the worker goes on meanwhile), until `done()` (a value the worker
        is computing, which this process waits for) or none is left unclaimed."""
        for name in reversed(self.started):
            if done():
                return
            if (only is None or name in only) and name not in self.taken and _claim(self.claims / name):
                self.draws[name](self.folder / f"{name}.png")
                self.taken.add(name)

    def finish(self, figures: Mapping[str, Callable[[Path], Path]]) -> None:
        """Every figure of `figures` (name: draw) drawn: those never handed to the worker, then those it has
        not claimed, from the last handed back (it takes them from the front), so neither process waits while
        the other has a queue; those of a worker that died are drawn here too. A figure that failed in the
        worker raises its error here."""
        here = [name for name in figures if name not in self.started and name not in self.placed]
        for name in here:
            figures[name](self.folder / f"{name}.png")
        self.draw_until(lambda: False, only=figures)
        for name, future in self.started.items():
            try:
                future.result()
            except BrokenProcessPool:  # it may have died mid-way through one it claimed: drawn again, whole
                if name not in self.taken:
                    figures[name](self.folder / f"{name}.png")

    def close(self, wait: bool) -> None:
        """Stop the worker (`wait`: until it has exited, its queue cancelled) and remove the claims."""
        self.pool.shutdown(wait=wait, cancel_futures=wait)
        shutil.rmtree(self.claims, ignore_errors=True)


def start_method() -> str:
    """How the worker is started: "fork" on Linux where no Python thread runs but the caller's, else "spawn".

    A forked worker has every module this process has imported: it saves a spawned one's 1-1.5 s of imports, a
    tenth of a large build's work. Fork copies only the calling thread; another Python thread could hold a lock
    (stdout's, logging's, the import lock) that would stay held in the worker forever, so a process running one
    (a notebook's kernel, a build beside another in two threads) spawns. The native threads a build's process may
    have (numpy's BLAS pool, arrow's thread pools and its allocator's) re-make themselves in a forked child: each
    registers handlers for fork (pthread_atfork)."""
    return "fork" if sys.platform.startswith("linux") and threading.active_count() == 1 else "spawn"


_ACTIVE: ContextVar[Helper | None] = ContextVar("helper", default=None)


def active() -> Helper | None:
    """The second process of the build in progress, if it has one."""
    return _ACTIVE.get()


def begin(function: Callable[..., Any], *args: Any, figures: Callable[[Any], Iterable[Any]] | None = None,
          claimable: bool = False) -> Later:
    """`function(*args)` begun in the build's second process where there is one; call what this returns
    for its value (where there is none, the call computes it here). `figures`, `claimable`: see `Helper.begin`."""
    helper = active()
    if helper is None:
        return Later(partial(function, *args))
    return helper.begin(function, *args, figures=figures, claimable=claimable)


def hand_over(files: Iterable[Any], of: Later | None = None) -> None:
    """The figures of `files` (each a section's `Files`), recorded in the worker by a computation `begin`
    handed it (`of`, its value taken): moved into place where the worker drew them with it, else handed back
    to it to draw."""
    helper = active()
    if helper is not None:
        for found in files:
            for name, draw in found.figures.items():
                if of is not None and of.drawn is not None:
                    helper.place(name, of.drawn)
                else:
                    helper.start(name, draw)


@contextmanager
def helping(folder: Path, warm: tuple[str, ...] = ()) -> Iterator[Helper | None]:
    """Within the block, the build's second process (figures drawn into `folder`, the modules named in `warm`
    imported there first; None, and nothing started, where the report may use one process only)."""
    if processes() < 2:
        yield None
        return
    helper = Helper(folder, warm)
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


def _in_order(order: tuple[str, ...], function: Callable[..., Any], *args: Any) -> Any:
    """In the worker: `function(*args)` with the labels in the order the building process had them (`label_order`),
    so a figure or value made there sorts as one made here."""
    with label_order(order):
        return function(*args)


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


def _unless_claimed(function: Callable[..., Any], args: tuple, claim: Path) -> tuple[bool, Any]:
    """In the worker: (True, `function(*args)`) where this process claims it first, else (False, None): the
    building process took it."""
    return (True, function(*args)) if _claim(claim) else (False, None)


def _drawn(function: Callable[..., Any], args: tuple, figures: Callable[[Any], Iterable[Any]], folder: Path) -> Any:
    """In the worker: `function(*args)`, the figures of its value (`figures(value)`: `Files`) drawn into `folder`.
    A computation begun while the tables load has its figures drawn there meanwhile,
    not handed back and forth once the build has them."""
    value = function(*args)
    for found in figures(value):
        for name, draw in found.figures.items():
            draw(folder / f"{name}.png")
    return value


def _warm_up(modules: tuple[str, ...]) -> None:
    """In the worker, first: the modules the build names (every figure module, with matplotlib and pandas), then
    frozen for the garbage collector (its full passes would scan every module's objects again while the figures
    make and drop many)."""
    for name in modules:
        importlib.import_module(name)
    gc.freeze()
