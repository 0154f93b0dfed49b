"""Guards on a run directory: one writer at a time (a lock file), and a resume that continues only
the run the directory holds (its saved config against the new one).

    with RunLock(run_dir):          # refuses a second writer in one line
        prepare(run_dir, cfg)       # saves or checks config.json, cleans what a killed start left

Under torchrun only rank 0 takes the lock (the trainer calls this once, on the process that writes
run.json and checkpoints). The lock itself: grpo_lab/run/lock.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from grpo_lab.config import TrainConfig
from grpo_lab.errors import InputError, require
from grpo_lab.run.lock import LOCK_NAME, RunDirBusy, RunDirUnwritable, RunLock
from grpo_lab.run.owned import ForeignFile, check_parts, check_start, delete_run, temporaries

__all__ = ["ABSENT_MEANS", "LOCK_NAME", "MAY_DIFFER", "ConfigMismatch", "ForeignFile", "RunDirBusy",
           "RunDirUnwritable", "RunLock", "as_it_ran", "config_diff", "check_resume", "flat_config", "prepare",
           "ran_without", "saved_config"]

log = logging.getLogger(__name__)

CONFIG_NAME = "config.json"  # the config the run was started with: the one checked record of what it computes

# Keys that may differ between the start of a run and a resume, because they cannot change any row of
# its tables. Every other key changes results, so a resume with a different value is refused.
# One place: docs/DESIGN.md ("Resuming, checkpoints and what a run records") points here.
MAY_DIFFER: dict[str, str] = {
    "out_dir": "where the run lives, not what it computes",
    "threads": "CPU threads: the same numbers, faster or slower",
    "checkpoint_every": "resume is exact from any checkpoint, so their spacing changes no row",
    "max_steps": "where the run stops: raising it extends the run, the steps already written stay the same",
    "max_samples": "as max_steps: the budget's end, not what each step does",
    "max_tokens": "as max_steps",
    "stop_untrainable": "as max_steps: whether the run ends where the step-0 check says it cannot train",
    "eval.every": "how often the held-out pool is evaluated; evaluation has its own RNG and never moves training",
    "eval.every_samples": "as eval.every, counted in samples drawn",
    "eval.every_tokens": "as eval.every, counted in tokens generated",
    "eval.every_updates": "as eval.every, counted in optimizer steps taken",
    "algo.kl_grad_every": "which steps measure the KL term's gradient (kl_grad_tied, kl_grad_untied): the same updates",
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
# Keys added after runs were started whose absence from a saved config.json means another value than today's
# default: the value those runs computed with. Such a run resumes as it ran, whatever this start's value (one run
# never mixes two behaviours): prepare() sets that value and writes it into the run's config.json.
ABSENT_MEANS: dict[str, Any] = {
    "algo.tied_batch": "skip",  # before the key, a batch whose every advantage was 0 took no optimizer step
}
AS_IT_RAN = "_as_it_ran"  # config.json: the ABSENT_MEANS keys a run resumes with as it ran, whatever a start says


class ConfigMismatch(InputError):
    """The run directory was started with a config that differs in a key that changes results."""


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
    one side (a newer or older version of grpo-lab) differs unless the other side has its default; a key of
    ABSENT_MEANS absent from the saved config never differs: the run resumes with the value it ran with."""
    defaults = flat_config(TrainConfig())
    missing = object()
    diffs = []
    kept = set(saved.get(AS_IT_RAN, ()))  # keys an earlier resume set as the run ran: they never differ either
    for key in sorted((set(saved) | set(new)) - {AS_IT_RAN}):
        if may_differ(key) or (key in ABSENT_MEANS and (key not in saved or key in kept)):
            continue
        a, b = saved.get(key, missing), new.get(key, missing)
        a = defaults.get(key, missing) if a is missing else a
        b = defaults.get(key, missing) if b is missing else b
        if a != b:
            diffs.append((key, None if a is missing else a, None if b is missing else b))
    return diffs


def ran_without(run_dir: str | Path) -> set[str]:
    """The keys of ABSENT_MEANS the run in `run_dir` resumes with as it ran: those its config.json lacks (a run
    started before the key existed; every one where a run has no config.json at all) and those an earlier resume
    recorded so (AS_IT_RAN). Empty for a new folder."""
    saved = saved_config(run_dir)
    if saved is None:
        return set(ABSENT_MEANS) if has_run(Path(run_dir)) else set()
    return {k for k in ABSENT_MEANS if k not in saved} | set(saved.get(AS_IT_RAN, ()))


def has_run(run_dir: Path) -> bool:
    """Whether the directory holds a started run: a status file, table parts or checkpoints, by their names
    (a folder that merely has an eval/ or checkpoints/ of other files is no run)."""
    return (run_dir / "run.json").exists() or any(
        any(run_dir.glob(pattern)) for pattern in ("*/part-[0-9]*.parquet", "checkpoints/step-[0-9]*"))


def saved_config(run_dir: str | Path) -> dict[str, Any] | None:
    """The flat config the run in `run_dir` was started with (config.json); None when there is none.
    An unreadable one is refused: it is the record a resume is checked against."""
    path = Path(run_dir) / CONFIG_NAME
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ConfigMismatch(f"{path}: not readable ({e}); resume=never deletes that run and starts over") from None
    if not isinstance(saved, dict):
        raise ConfigMismatch(f"{path}: not a JSON object; resume=never deletes that run and starts over")
    return saved


def check_resume(run_dir: str | Path, cfg: TrainConfig) -> None:
    """Refuse, naming the keys, a start whose config differs from the run `run_dir` holds in a key that changes
    results. Reads only: the entry points call it before anything is written, prepare() again under the lock."""
    if cfg.resume == "never":
        return
    saved = saved_config(run_dir)
    diffs = config_diff(saved, flat_config(cfg)) if saved is not None else []
    if diffs:
        listed = ", ".join(f"{k} {a!r} -> {b!r}" for k, a, b in diffs)
        raise ConfigMismatch(f"{run_dir} holds a run started with another config ({listed}); use another "
                             "out_dir, or resume=never to delete that run and start over")


def as_it_ran(run_dir: str | Path, cfg: TrainConfig) -> TrainConfig:
    """`cfg`, with each key of ABSENT_MEANS that the run's saved config.json lacks (a run started before the key
    existed) set to the value the run computed with; `cfg` itself where nothing is missing."""
    missing = {k: ABSENT_MEANS[k] for k in ran_without(run_dir)}
    if not missing:
        return cfg
    cfg = copy.deepcopy(cfg)
    for key, value in missing.items():
        *path, name = key.split(".")
        node = cfg
        for part in path:
            node = getattr(node, part)
        if getattr(node, name) != value:
            log.info("%s was started before %s existed: it resumes as it ran, %s=%s", run_dir, key, key, value)
        setattr(node, name, value)
    return cfg


def prepare(run_dir: str | Path, cfg: TrainConfig) -> TrainConfig:
    """Before a (re)start, holding the lock: refuse a config that differs from the saved one (before anything
    changes), or with resume=never delete the run's own files (refusing, before any deletion, a folder holding
    others), else refuse a folder that is neither empty nor a run of ours (`check_start`) and read the checkpoint
    it resumes from and the parts past it, which the start deletes (`check_resumable`); record a last start that ended
    unrecorded as killed, remove temporaries a killed start left, and save config.json. Returns the config the
    run goes on with: `cfg`, or `as_it_ran` for a run started before a key of ABSENT_MEANS existed."""
    run_dir = Path(run_dir)
    if cfg.resume != "never":  # a folder of a person's files, or an ingest's, is no run to start in (owned.py)
        check_start(run_dir)
    check_resume(run_dir, cfg)
    kept: list[str] = []
    if cfg.resume == "never":  # only the files a run writes, by name; anything else refuses (grpo_lab/run/owned.py)
        delete_run(run_dir)
    else:
        if not (run_dir / CONFIG_NAME).exists() and has_run(run_dir):
            log.warning("%s has no %s (made by an older version): resuming without a config check", run_dir,
                        CONFIG_NAME)
        kept = sorted(ran_without(run_dir))
        cfg = as_it_ran(run_dir, cfg)
        check_resumable(run_dir, cfg)
    note_unfinished(run_dir)
    clean_temporaries(run_dir)
    flat = flat_config(cfg)
    if kept:  # every later resume of this run keeps the value it ran with too
        flat[AS_IT_RAN] = kept
    _write_json(run_dir / CONFIG_NAME, flat)
    return cfg


def check_resumable(run_dir: Path, cfg: TrainConfig) -> None:
    """The checkpoint a resume would load, read before anything is written (a refused resume leaves every file as
    it was): its weights as far as their headers, its state.pt safely, saved by as many processes as this start
    has (BadCheckpoint, UnsafeCheckpoint, ModelFileError or WorldSizeChanged, in one line); and every table part
    past it, which the start deletes, the run's own (ForeignFile otherwise)."""
    from grpo_lab import distributed
    from grpo_lab.run.checkpoints import check_checkpoint, check_world_size, latest_checkpoint

    if (ckpt := latest_checkpoint(run_dir)) is not None:
        reached = int(ckpt.name[5:])
        require(cfg.max_steps >= reached, "max_steps", cfg.max_steps,
                f"below step {reached}, which this run has reached (its latest checkpoint): a resume continues a run, "
                "it cannot shorten one (its tables and config would disagree); raise max_steps, or start over with "
                "resume=never")
        check_checkpoint(ckpt, cfg.model.trust_remote_code)
        check_world_size(ckpt, distributed.world())
    check_parts(run_dir, int(ckpt.name[5:]) if ckpt is not None else 0)  # the parts the start deletes are the run's


def note_unfinished(run_dir: Path) -> None:
    """A run.json that still says `running` while we hold the lock: its writer is gone (the kernel released its
    lock), without recording why (kill -9, a lost node, a disk that refused the write). Record that start as
    `killed` (the report names it so) and say so; the run resumes from its last checkpoint."""
    path = run_dir / "run.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(record, dict) or record.get("status") != "running":
        return
    who = f" (pid {record['pid']} on {record.get('host')})" if record.get("pid") else ""
    log.warning("the previous start of %s%s, started %s, ended without recording how (run.json still said "
                "running): it was killed or could not write; recorded as killed", run_dir, who, record.get("started"))
    record.update(status="killed", finished=None, signal=None,
                  error=f"the process{who} ended without recording how; the next start found run.json running")
    try:
        _write_json(path, record)
    except OSError as e:  # the start goes on: its own run.json write will say whether the disk takes writes
        log.warning("could not record %s as killed (%s)", path, e.strerror)


def clean_temporaries(run_dir: Path) -> int:
    """Remove what an interrupted writer leaves: part and run.json temporaries, checkpoint folders in
    the making. Safe only under the lock. Returns how many went."""
    found = temporaries(run_dir)  # by the names the run's writers give them, in the run's own folders only
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
