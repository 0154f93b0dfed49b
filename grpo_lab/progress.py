"""Progress a person can watch: tqdm bars on a terminal, plain periodic log lines otherwise (sweep
jobs, log files), and a heartbeat so a run never goes quiet for long. Everything goes through
`logging`, so Hydra's per-job `.log` files hold it too."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

log = logging.getLogger("grpo_lab")
T = TypeVar("T")


def on_terminal() -> bool:
    """Whether progress bars would reach a person: stderr is a terminal (not a sweep job or a pipe)
    with a width (a pseudo-terminal of 0 columns shows an empty bar)."""
    try:
        return sys.stderr.isatty() and os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (OSError, ValueError):
        return False


def duration(seconds: float) -> str:
    """Seconds as a short duration: "42s", "3m05s", "2h10m"."""
    s = int(round(max(seconds, 0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def iterate(items: Iterable[T], total: int, what: str, every_s: float = 10.0) -> Iterator[T]:
    """Yield `items`, showing progress: a tqdm bar on a terminal; otherwise a log line at the start
    and every `every_s` seconds (done/total, rate, ETA). Both end with a log line."""
    start = last = time.monotonic()
    if on_terminal():
        from tqdm import tqdm

        yield from tqdm(items, total=total, desc=what, dynamic_ncols=True, leave=False)
        log.info("%s: %d/%d in %s", what, total, total, duration(time.monotonic() - start))
        return
    log.info("%s: 0/%d", what, total)
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if now - last >= every_s and done < total:
            rate = done / (now - start)
            log.info("%s: %d/%d, %.1f/s, ETA %s", what, done, total, rate, duration((total - done) / rate))
            last = now
    log.info("%s: %d/%d in %s", what, done, total, duration(time.monotonic() - start))


class Heartbeat:
    """A daemon thread that logs what the run is doing whenever nothing else was logged through
    `say` for `every_s` seconds: a long step or evaluation of a large model still shows signs of
    life. `doing` names the current activity; `say` logs a line and restarts the clock."""

    def __init__(self, every_s: float = 25.0, prefix: str = "", doing: str = "starting"):
        self.every_s, self.prefix = every_s, prefix  # prefix: whose line, in a sweep's shared console
        self.doing = doing
        self._since = self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="grpo-lab-heartbeat", daemon=True)
        self._thread.start()

    def set(self, doing: str) -> None:
        if doing != self.doing:
            self.doing, self._since = doing, time.monotonic()

    def say(self, msg: str, *args) -> None:
        log.info(msg, *args)
        self._last = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(min(self.every_s, 1.0)):
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self.say("%sstill %s (%s so far)", self.prefix, self.doing, duration(now - self._since))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


