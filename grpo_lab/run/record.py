"""run.json: a job's identity and status, and where it ran (machine, packages, git state)."""

from __future__ import annotations

import errno
import json
import os
import platform
import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers

from grpo_lab import __version__, distributed

RESERVE_BYTES = 64 << 10  # room kept for the last run.json (a failure's traceback is a few kB)
FULL = (errno.ENOSPC, errno.EDQUOT)


class RunRecord:
    """run.json: identity and status of one job, rewritten atomically on every change (by rank 0 only).

    While the job runs, `.run.json.reserve` holds RESERVE_BYTES of the disk: when a write finds the disk full
    (a checkpoint filled it), the reserve is given back and run.json written in its room, so a job that fails
    on a full disk still says `failed`, not `running`."""

    def __init__(self, run_dir: Path, seed: int):
        self.path = run_dir / "run.json"
        self.reserve = run_dir / ".run.json.reserve"
        self.writes = distributed.is_main()
        old = _read_record(self.path)
        self.previous = old  # as this start found it
        start = now()
        self.data = {
            "run_id": old.get("run_id") or f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}",
            "status": "running",
            "started": old.get("started") or start,  # the run's first start
            "this_start": start,  # this start's: a resumed run's `started` stays its first
            "finished": None,
            "error": None,
            "signal": None,  # status killed: the signal that stopped it (SIGTERM, SIGINT)
            "stopped": None,  # why a run ended before max_steps or its budget (a sampler's cap)
            "version": __version__,
            "seed": seed,
            "device": None,
            "torch": torch.__version__,
            "machine": describe_machine(),
            "threads": torch.get_num_threads(),  # torch CPU threads this job ran with (config key `threads`)
            "pid": os.getpid(),  # who writes it: the next start names them if this run.json stays `running`
            "host": platform.node(),
            "transformers": transformers.__version__,
            "git": git_state(),  # the code that ran: {"commit", "dirty"}, None outside a checkout
            "world_size": distributed.world(),  # processes of the run (torchrun); 1 without
            # every earlier start of this run and how it ended (a stale `running` was recorded `killed` by
            # guards.note_unfinished before this start), oldest first: a resumed run keeps its history
            "earlier_starts": [*old.get("earlier_starts", []), *([_start(old)] if old.get("status") else [])],
        }
        self.data["run_id"] = distributed.broadcast_object(self.data["run_id"])  # rank 0's, on every rank

    @property
    def run_id(self) -> str:
        return self.data["run_id"]

    def done(self, stopped: str | None, trained: bool) -> None:
        """Record the run done. A start that found it done and trained nothing (a sweep run again to resume its
        other jobs) puts run.json back as it found it: the finish time stays the training's."""
        if not trained and self.previous.get("status") == "done":
            self.data = dict(self.previous)
            self.update()
            return
        self.update(status="done", finished=now(), stopped=stopped)

    def update(self, **fields) -> None:
        """Merge `fields` and rewrite run.json; a status other than `running` ends the job: its reserve goes."""
        self.data.update(fields)
        if not self.writes:
            return
        try:
            self._write()
        except OSError as e:
            if e.errno not in FULL or not self.reserve.exists():
                raise
            self.reserve.unlink()  # the disk is full: write in the room kept for this
            self._write()
        if self.data["status"] == "running":
            self._keep_reserve()
        else:
            self.reserve.unlink(missing_ok=True)

    def _write(self) -> None:
        tmp = self.path.with_name(f".run.json.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(self.data, indent=2))
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise

    def _keep_reserve(self) -> None:
        if self.reserve.exists() and self.reserve.stat().st_size >= RESERVE_BYTES:
            return
        try:
            with self.reserve.open("wb") as f:  # real bytes, not a sparse file: the space is taken now
                f.write(os.urandom(RESERVE_BYTES))  # (random: a compressing filesystem keeps zeros in no space)
        except OSError:  # no room even for this: the job goes on, and a later write may not record its end
            self.reserve.unlink(missing_ok=True)


def _read_record(path: Path) -> dict:
    """The run.json a previous start left ({} if none, or if it is unreadable: it is rewritten)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return old if isinstance(old, dict) else {}


def describe_machine() -> str:
    """The host in one line, e.g. "AMD EPYC, 2 CPUs, x86_64 Linux", plus the GPU when there is one."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} CPUs, {platform.machine()} {platform.system()}"
    if torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name()}"
    return text


def git_state() -> dict | None:
    """The commit of the checkout this package runs from and whether it had uncommitted changes."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode != 0 or status.returncode != 0:
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _start(record: dict) -> dict:
    """What run.json said of one start, kept in the next start's `earlier_starts`: when, by whom, how it ended."""
    error = record.get("error")
    # a record written before `this_start` existed names only the run's first start
    return {"started": record.get("this_start") or record.get("started"), "finished": record.get("finished"),
            "status": record.get("status"),
            "signal": record.get("signal"), "error": error[:300] if isinstance(error, str) else None,
            "pid": record.get("pid"), "host": record.get("host")}
