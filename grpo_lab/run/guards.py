"""Guards on a run directory: one writer at a time (a lock file), and a resume that continues only
the run the directory holds (its saved config against the new one).

    with RunLock(run_dir):          # refuses a second writer in one line
        prepare(run_dir, cfg)       # saves or checks config.json, cleans what a killed start left

Under torchrun only rank 0 takes the lock (the trainer calls this once, on the process that writes
run.json and checkpoints).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from grpo_lab.config import TrainConfig
from grpo_lab.errors import InputError

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
CONFIG_NAME = "config.json"  # the config the run was started with (Hydra rewrites .hydra/ on every start)

# Keys that may differ between the start of a run and a resume, because they cannot change any row of
# its tables. Every other key changes results, so a resume with a different value is refused.
# One place: the README's "Resuming" section points here.
MAY_DIFFER: dict[str, str] = {
    "out_dir": "where the run lives, not what it computes",
    "threads": "CPU threads: the same numbers, faster or slower",
    "checkpoint_every": "resume is exact from any checkpoint, so their spacing changes no row",
    "max_steps": "where the run stops: raising it extends the run, the steps already written stay the same",
    "max_samples": "as max_steps: the budget's end, not what each step does",
    "max_tokens": "as max_steps",
    "eval.every": "how often the held-out pool is evaluated; evaluation has its own RNG and never moves training",
    "eval.every_samples": "as eval.every, counted in samples drawn",
    "checkpoint.keep_last": "which checkpoints are kept on disk, not what any step computes",
    "checkpoint.keep_steps": "as checkpoint.keep_last",
    "checkpoint.keep_eval": "as checkpoint.keep_last",
    "checkpoint.final_weights_only": "what the last checkpoint keeps once the run is done",
    "resume": "how this start treats the directory",
    "reward.workers": "processes that check LaTeX answers: the same verdicts, sooner",
    "log_completions": "completions kept for reading (completions/); training draws and learns the same",
    "dist.timeout_s": "how long a collective waits for a stuck rank before failing the run",
}
# Key prefixes that may differ, for whole groups that only report (tracking/logging backends).
MAY_DIFFER_PREFIXES: tuple[str, ...] = ("logger.", "logging.", "tracking.")


class RunDirBusy(InputError):
    """Another live process writes this run directory."""


class ConfigMismatch(InputError):
    """The run directory was started with a config that differs in a key that changes results."""


def _host() -> str:
    return socket.gethostname()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunLock:
    """`<run_dir>/.lock`, created exclusively and holding {pid, host, since}. A lock whose holder is a
    dead process on this host is stale and taken over (with a message); a live holder, or one on
    another host (whose pids this host cannot check), is refused in one line."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_NAME
        self.held = False

    def acquire(self) -> RunLock:
        me = {"pid": os.getpid(), "host": _host(), "since": _now()}
        for _ in range(3):  # a stale lock is removed, then created again; a racing writer wins at most once
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is None:  # empty or half-written: its writer died between open and write
                    self._remove_stale("unreadable")
                    continue
                if holder.get("host") == me["host"] and not _alive(int(holder.get("pid", -1))):
                    self._remove_stale(f"pid {holder.get('pid')} on {holder.get('host')} is gone")
                    continue
                where = "this host" if holder.get("host") == me["host"] else f"host {holder.get('host')}"
                raise RunDirBusy(
                    f"{self.path.parent} is being written by pid {holder.get('pid')} on {where} since "
                    f"{holder.get('since')}; wait for it, use another out_dir, or delete {self.path} if that "
                    "process is gone") from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise RunDirBusy(f"{self.path}: could not take the lock (another process keeps taking it)")

    def _holder(self) -> dict | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _remove_stale(self, why: str) -> None:
        log.warning("removing a stale lock on %s (%s)", self.path.parent, why)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def release(self) -> None:
        if self.held:
            self.held = False
            try:
                self.path.unlink()
            except OSError:  # a read-only or vanished directory: the next start finds the pid dead
                pass

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def flat_config(cfg: TrainConfig | dict) -> dict[str, Any]:
    """A config as {"sampler.group_size": 8, ...} (lists kept as lists)."""
    tree = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else cfg
    out: dict[str, Any] = {}

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    walk(tree, "")
    return out


def may_differ(key: str) -> bool:
    return key in MAY_DIFFER or key.startswith(MAY_DIFFER_PREFIXES)


def config_diff(saved: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, saved value, new value) for every key that changes results and differs. A key absent on
    one side (a newer or older version of grpo-lab) differs unless the other side has its default."""
    defaults = flat_config(TrainConfig())
    missing = object()
    diffs = []
    for key in sorted(set(saved) | set(new)):
        if may_differ(key):
            continue
        a, b = saved.get(key, missing), new.get(key, missing)
        a = defaults.get(key, missing) if a is missing else a
        b = defaults.get(key, missing) if b is missing else b
        if a != b:
            diffs.append((key, None if a is missing else a, None if b is missing else b))
    return diffs


def has_run(run_dir: Path) -> bool:
    """Whether the directory holds a started run (a status file, tables or checkpoints)."""
    return any((run_dir / name).exists() for name in ("run.json", "groups", "steps", "eval", "checkpoints"))


# what resume=never deletes: everything a run writes but Hydra's .hydra/ and the lock
RUN_CONTENTS = ("run.json", CONFIG_NAME, "groups", "steps", "eval", "completions", "checkpoints", "tensorboard")


def prepare(run_dir: str | Path, cfg: TrainConfig) -> None:
    """Before a (re)start, holding the lock: with resume=never delete the run's contents; otherwise
    refuse a config that differs from the saved one, say when the last start ended unrecorded,
    and remove temporaries a killed start left. Saves config.json on a first start."""
    run_dir = Path(run_dir)
    saved_path = run_dir / CONFIG_NAME
    if cfg.resume == "never":
        for name in RUN_CONTENTS:
            path = run_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    new = flat_config(cfg)
    if saved_path.exists():
        saved = json.loads(saved_path.read_text())
        diffs = config_diff(saved, new)
        if diffs:
            listed = ", ".join(f"{k} {a!r} -> {b!r}" for k, a, b in diffs)
            raise ConfigMismatch(f"{run_dir} holds a run started with another config ({listed}); use another "
                                 "out_dir, or resume=never to delete that run and start over")
    elif has_run(run_dir):
        log.warning("%s has no %s (made by an older version): resuming without a config check", run_dir, CONFIG_NAME)
    note_unfinished(run_dir)
    clean_temporaries(run_dir)
    _write_json(saved_path, new)


def note_unfinished(run_dir: Path) -> None:
    """A run.json that still says `running` while we hold the lock: its writer died without recording
    why (killed, or a disk that refused the write). Say so; the run resumes from its last checkpoint."""
    try:
        record = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and record.get("status") == "running":
        who = f" (pid {record['pid']} on {record.get('host')})" if record.get("pid") else ""
        log.warning("the previous start of %s%s, started %s, ended without recording how (run.json still said "
                    "running): it was killed or could not write", run_dir, who, record.get("started"))


def clean_temporaries(run_dir: Path) -> int:
    """Remove what an interrupted writer leaves: part and run.json temporaries, checkpoint folders in
    the making. Safe only under the lock. Returns how many went."""
    found = [*run_dir.glob("*/.part-*.tmp"), *run_dir.glob(".*.json.*.tmp"), *run_dir.glob("run.json.tmp"),
             *run_dir.glob("checkpoints/.step-*.tmp")]
    for path in found:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return len(found)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)
