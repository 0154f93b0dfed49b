"""A job stopped by a signal records why before it goes: SIGTERM (a scheduler's preemption, a pool terminating
its worker, `kill`) and SIGINT (Ctrl-C) raise `Killed` in the job, train() writes run.json `killed` with the
signal's name, and the exception goes on up. Nothing else is needed for the run to resume: table parts and
checkpoints appear by rename, so wherever the signal lands they are as whole as after any step.

A handler another part installed is left in place (under torchrun, grpo_lab.distributed's: a SIGTERM there
means another rank failed, recorded as `failed`); a second signal while the first unwinds acts as it would
have without this (the handlers are given back at once), so a stuck cleanup can still be interrupted.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

STOPPING = (signal.SIGTERM, signal.SIGINT)
_DEFAULTS = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}


class Killed(KeyboardInterrupt):
    """The job got SIGTERM or SIGINT. A KeyboardInterrupt, as Ctrl-C's own: no `except Exception` on the way out
    mistakes it for the job's own error, and whatever stops on Ctrl-C (a test session) stops on it too."""

    def __init__(self, signum: int, where: str = ""):
        super().__init__(signum, where)  # its args: what a pool's worker pickles it with
        self.signum, self.where = signum, where
        self.signal = signal.Signals(signum).name

    def __str__(self) -> str:
        return f"stopped by {self.signal}{' ' + self.where if self.where else ''}"


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within: SIGTERM and SIGINT raise Killed in the main thread (where Python runs handlers), wherever they
    still have their default handlers; outside the main thread (no handlers there) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed = {}

    def stop(signum: int, frame) -> None:
        for sig, handler in installed.items():  # the first signal stops the job; a second one acts as by default
            signal.signal(sig, handler)
        raise Killed(signum)

    for sig in STOPPING:
        if signal.getsignal(sig) is _DEFAULTS[sig]:
            installed[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in installed.items():
            if signal.getsignal(sig) is stop:
                signal.signal(sig, handler)
