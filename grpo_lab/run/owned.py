"""What resume=never may delete: the files a run writes, proven by their names, and nothing else.

resume=never starts a run over in its directory. It deletes run.json, config.json and the run's own folders,
each file in them checked against the names a run writes:

    groups/ steps/ eval/ completions/   part-NNNNNN.parquet, eval's part-NNNNNN-<settings>.parquet (and their
                                        .part-*.parquet.PID.tmp)
    checkpoints/                        step-NNNNNN/ holding only what save_checkpoint writes (CHECKPOINT_FILES,
                                        optim/ of DCP files, the custom-code .py files its config.json's auto_map
                                        names); .step-NNNNNN.PID[.old].tmp folders in the making
    tensorboard/                        events.out.tfevents.* (SummaryWriter's files)

Anything else there (a file of another name, a folder, a symlink: a run writes none) is refused in one line
naming it, before anything is deleted; the folder stays as it was. run.json, config.json and evaluations.jsonl
go too, when the directory holds a run (a run.json with run_id and status, or a config.json with seed and
max_steps); without one, a file of those names is not a run's and is refused. A table part goes only when its
run_id column is the run.json's (a part of that name put there by hand, or copied from another run, is refused).
Everything else at the top of the directory is kept: Hydra's .hydra/ and the job log (appended to), wandb/ (W&B's
own files, synced or not), the lock, and whatever a person put there (notes, a report). An ingested run's folder
(its `.grpo-lab-ingest` marker) is never a training run's: refused whole.

A start that does not delete (resume=auto, always) is checked too (`check_start`): a folder that holds no run of
ours is started in only when empty but for the lock, Hydra's `.hydra/` (its three files) and `*.log` job logs;
a resume deletes the parts past its checkpoint only when they are the run's (`check_parts`), and only the parts the
training itself wrote there (`resume_parts`): a step's part-NNNNNN.parquet, never an evaluation at other settings
(part-NNNNNN-<settings>.parquet) nor an eval part that evaluations.jsonl says experiments.evaluate wrote, which the
resumed run could not redo. Checkpoint pruning deletes a step folder's files by the names save_checkpoint writes
(`delete_checkpoint`): anything else stays, and so does its folder.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from grpo_lab.errors import InputError
from grpo_lab.model.files import remote_code
from grpo_lab.run.evaluations import not_the_trainers
from grpo_lab.run.lock import LOCK_NAME

log = logging.getLogger(__name__)

TABLES = ("groups", "steps", "eval", "completions")
# a step's part, or an evaluation's at other settings (eval/part-NNNNNN-n4-t0.5-p1-m6.parquet), and their temporaries
PART_TMP = re.compile(r"\.part-\d{6}(-[A-Za-z0-9.]+)*\.parquet\.\d+\.tmp")  # tables.write_part's, before its rename
PART = re.compile(rf"part-\d{{6}}(-[A-Za-z0-9.]+)*\.parquet|{PART_TMP.pattern}")
STEP = re.compile(r"step-\d{6}")
STEP_TMP = re.compile(r"\.step-\d{6}\.\d+(\.old)?\.tmp")  # save_checkpoint's folders in the making
CHECKPOINT_FILES = re.compile(
    r"state\.pt|counters\.json|config\.json|generation_config\.json|model\.safetensors|model\.safetensors\.index\.json"
    r"|model-\d{5}-of-\d{5}\.safetensors|adapter_config\.json|adapter_model\.safetensors|README\.md")  # README: peft's
OPTIM_FILES = re.compile(r"\.metadata|__\d+_\d+\.distcp")  # DCP's files (grpo_lab/run/sharded.py)
EVENTS = re.compile(r"events\.out\.tfevents\.\d+\..+")
RECORD, CONFIG, RESERVE = "run.json", "config.json", ".run.json.reserve"
EVALUATIONS = "evaluations.jsonl"  # the record of every evaluation's part (grpo_lab/run/evaluations.py)
JSON_TMP = re.compile(r"\.(run|config)\.json\.\d+\.tmp|run\.json\.tmp")  # record.py's and guards' before rename
INGEST_MARKER = ".grpo-lab-ingest"  # an ingested run's folder (analysis/ingest/writer.py's MARKER)
HYDRA_DIR = ".hydra"
HYDRA_FILES = re.compile(r"(config|hydra|overrides)\.yaml|\.(config|hydra|overrides)\.yaml\.\d+\.tmp")
PART_STEP = re.compile(r"part-(\d{6})(-[A-Za-z0-9.]+)*\.parquet")
STEP_PART = re.compile(r"part-(\d{6})\.parquet")  # a step's own part: the one name the trainer writes


class ForeignFile(InputError):
    """A path in a run's folders that no run writes: resume=never refuses to delete it (and everything else)."""


def run_files(run_dir: Path) -> list[Path]:
    """Every path resume=never deletes in `run_dir` (files, and temporary folders whole), in a fixed order.
    Raises ForeignFile at the first path there that a run does not write; reads only."""
    run_dir = Path(run_dir)
    _not_ingested(run_dir)
    ours = is_run(run_dir)
    run_id = _run_id(run_dir)
    found = []
    for name in (RECORD, CONFIG, EVALUATIONS, RESERVE):
        path = run_dir / name
        if path.is_symlink() or path.is_dir():
            _refuse(path, run_dir, "a run writes it as a plain file")
        if path.exists():
            if name != RESERVE and not ours:
                _refuse(path, run_dir, "not a record of a grpo-lab run")
            found.append(path)
    for table in TABLES:
        for path in _folder(run_dir / table, run_dir, lambda p: p.is_file() and PART.fullmatch(p.name)):
            if PART.fullmatch(path.name) and not PART_TMP.fullmatch(path.name) and not _written_by(path, run_id):
                _refuse(path, run_dir, f"its run_id column is not this run's ({run_id})")
            found.append(path)
    found += _folder(run_dir / "tensorboard", run_dir, lambda p: p.is_file() and EVENTS.fullmatch(p.name))
    for path in _entries(run_dir / "checkpoints", run_dir):
        if path.is_symlink() or not path.is_dir():  # a symlinked step: deleting through it would reach elsewhere
            _refuse(path, run_dir, "checkpoints/ holds step-NNNNNN folders")
        elif STEP_TMP.fullmatch(path.name):
            found.append(path)
        elif STEP.fullmatch(path.name):
            found += _checkpoint(path, run_dir)
        else:
            _refuse(path, run_dir, "checkpoints/ holds step-NNNNNN folders")
    return found


def delete_run(run_dir: Path) -> int:
    """resume=never: check every path first (ForeignFile, nothing deleted), then delete the run's files one by
    one and remove its folders once empty. A file that appears meanwhile is never deleted: its folder stays."""
    run_dir = Path(run_dir)
    paths = run_files(run_dir)
    for path in paths:
        if path.is_dir():  # a checkpoint in the making (never a symlink: refused): its name is save_checkpoint's
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    folders = sorted({p.parent for p in paths if p.parent != run_dir}, key=lambda p: len(p.parts), reverse=True)
    for folder in [*folders, *(run_dir / name for name in (*TABLES, "tensorboard", "checkpoints"))]:
        try:
            folder.rmdir()  # only when empty: nothing but the run's files was in it
        except OSError:
            pass
    return len(paths)


def is_run(run_dir: Path) -> bool:
    """Whether `run_dir` holds a grpo-lab training run: a run.json with run_id and status, or a config.json with seed
    and max_steps (written first by every start, before any other file)."""
    return _is_record(Path(run_dir) / RECORD) or _is_config(Path(run_dir) / CONFIG)


def check_start(run_dir: Path) -> None:
    """A start that keeps the folder (resume auto or always): ForeignFile, in one line naming the first path, unless
    the folder is a run of ours or holds nothing a run did not write (the lock, Hydra's .hydra/ of its three files,
    top-level *.log job logs, which are appended to). An ingested run's folder is refused whole. Reads only."""
    run_dir = Path(run_dir)
    _not_ingested(run_dir)
    if is_run(run_dir) or not run_dir.is_dir():
        return
    for path in sorted(run_dir.iterdir()):
        plain = not path.is_symlink()
        if plain and path.is_file() and (path.name == LOCK_NAME or path.name.endswith(".log")):
            continue
        if plain and path.is_dir() and path.name == HYDRA_DIR:
            for inner in sorted(path.iterdir()):
                if inner.is_symlink() or not inner.is_file() or not HYDRA_FILES.fullmatch(inner.name):
                    _refuse_start(inner, run_dir)
            continue
        _refuse_start(next(iter(_files(path)), path) if plain and path.is_dir() else path, run_dir)


def resume_parts(run_dir: Path, after: int) -> list[Path]:
    """The parts a resume from step `after` deletes, by name, in a fixed order: in each table the step parts
    (part-NNNNNN.parquet) past `after`, the rows the resumed run draws again; in eval/ only those the trainer wrote
    (`evaluations.not_the_trainers`). An evaluation at other settings (a tagged part) or one experiments.evaluate
    wrote at the run's own settings is never among them: the resumed run redraws the checkpoints they measured
    exactly, and could not redo them. Reads only."""
    run_dir = Path(run_dir)
    theirs = not_the_trainers(run_dir)
    found = []
    for table in TABLES:
        for path in _listed(run_dir / table):
            step = STEP_PART.fullmatch(path.name)
            if step and int(step.group(1)) > after and f"{table}/{path.name}" not in theirs:
                found.append(path)
    return found


def check_parts(run_dir: Path, after: int) -> None:
    """A resume deletes the run's parts past its checkpoint's step `after` (`resume_parts`): ForeignFile, in one
    line, at the first of them that is not the run's (its run_id column is not run.json's). Reads only."""
    run_dir = Path(run_dir)
    run_id = _run_id(run_dir)
    for path in resume_parts(run_dir, after):
        if not (path.is_file() and not path.is_symlink() and _written_by(path, run_id)):
            kind = "a symlink" if path.is_symlink() else "a folder" if path.is_dir() else "a file"
            raise ForeignFile(
                f"{path}: {kind} this run did not write (its run_id column is not {run_id}); resuming from step "
                f"{after} deletes the run's parts after it, so nothing in {run_dir} was changed: move it out, "
                "or use another out_dir")


def remove_parts_after(run_dir: Path, after: int) -> int:
    """A resume from step `after`: delete the parts `resume_parts` names (the training's own, past it), each proved
    the run's first (`check_parts`: ForeignFile, nothing deleted), and the table parts' temporaries; returns how many
    parts went. Only the run directory's lock holder may call this: another writer's temporaries would go too."""
    run_dir = Path(run_dir)
    check_parts(run_dir, after)
    found = resume_parts(run_dir, after)
    for path in found:
        path.unlink(missing_ok=True)
    for path in (p for t in TABLES for p in _listed(run_dir / t)):
        if PART_TMP.fullmatch(path.name) and path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
    return len(found)


def delete_checkpoint(step: Path) -> list[Path]:
    """Checkpoint pruning: delete the files of one step-NNNNNN folder that save_checkpoint writes (by name), and the
    folder once empty. Anything else (a person's file) stays, and so does its folder; returns what stayed."""
    code = _custom_code(step / "config.json")
    kept = []
    for path in sorted(step.iterdir()):
        if path.name == "optim" and path.is_dir() and not path.is_symlink():
            for inner in sorted(path.iterdir()):
                if inner.is_file() and not inner.is_symlink() and OPTIM_FILES.fullmatch(inner.name):
                    inner.unlink()
                else:
                    kept.append(inner)
            _rmdir(path)
        elif path.is_file() and not path.is_symlink() and (CHECKPOINT_FILES.fullmatch(path.name) or path.name in code):
            path.unlink()
        else:
            kept.append(path)
    _rmdir(step)
    if kept:
        log.warning("pruning %s: kept %s (a checkpoint's files are only what save_checkpoint writes), so the folder "
                    "stays", step, ", ".join(str(p.relative_to(step)) for p in kept[:3]))
    return kept


def _rmdir(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _files(folder: Path) -> list[Path]:
    """Every path under `folder`, depth first and sorted: the first one a refusal names."""
    out = []
    for path in sorted(folder.iterdir()):
        out += _files(path) if path.is_dir() and not path.is_symlink() else [path]
    return out or [folder]


def _refuse_start(path: Path, run_dir: Path) -> None:
    kind = "a symlink" if path.is_symlink() else "a folder" if path.is_dir() else "a file"
    raise ForeignFile(f"{path}: {kind} no grpo-lab run wrote, in a folder that holds no run (no run.json or "
                      f"config.json of one); a run starts only in an empty folder or its own, so nothing in {run_dir} "
                      "was changed: move it out, or use another out_dir")


def _not_ingested(run_dir: Path) -> None:
    marker = run_dir / INGEST_MARKER
    if marker.exists() or marker.is_symlink():
        raise ForeignFile(f"{marker}: {run_dir} holds an ingested run (python -m analysis.ingest wrote it); a training "
                          "run never writes into an ingest's folder, so nothing there was changed: use another out_dir")


def _run_id(run_dir: Path) -> str | None:
    data = _json(run_dir / RECORD)
    return data.get("run_id") if isinstance(data, dict) and isinstance(data.get("run_id"), str) else None


def _written_by(part: Path, run_id: str | None) -> bool:
    """Whether a table part is the run's: every row's run_id is `run_id` (a part of no rows: the table's columns
    with a run_id column). A file that is not readable parquet is no run's."""
    if run_id is None:
        return False
    try:
        column = pq.read_table(part, columns=["run_id"]).column("run_id")
    except Exception:  # noqa: BLE001 - not parquet, no run_id column, cut short: pyarrow raises many types
        return False
    return set(column.to_pylist()) <= {run_id}


def temporaries(run_dir: Path) -> list[Path]:
    """What an interrupted writer of the run left, by the names the writers give them: table parts before their
    rename (in the table folders only), checkpoint folders in the making whose files are a checkpoint's, and
    run.json's and config.json's temporaries. A path of another name, or a temporary folder holding anything
    a checkpoint does not, is left alone."""
    run_dir = Path(run_dir)
    found = [p for t in TABLES for p in _listed(run_dir / t) if PART_TMP.fullmatch(p.name) and p.is_file()]
    for path in _listed(run_dir / "checkpoints"):
        if STEP_TMP.fullmatch(path.name) and path.is_dir() and not path.is_symlink():
            try:
                _checkpoint(path, run_dir)
            except ForeignFile:
                continue
            found.append(path)
    found += [p for p in _listed(run_dir) if JSON_TMP.fullmatch(p.name) and p.is_file() and not p.is_symlink()]
    return found


def _listed(folder: Path) -> list[Path]:
    return sorted(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []


def _checkpoint(step: Path, run_dir: Path) -> list[Path]:
    """A step-NNNNNN folder's files, each one save_checkpoint writes (ForeignFile otherwise)."""
    code = _custom_code(step / "config.json")
    found = []
    for path in _entries(step, run_dir):
        if path.name == "optim" and path.is_dir() and not path.is_symlink():
            found += _folder(path, run_dir, lambda p: p.is_file() and OPTIM_FILES.fullmatch(p.name))
        elif path.is_file() and not path.is_symlink() and (CHECKPOINT_FILES.fullmatch(path.name) or path.name in code):
            found.append(path)
        else:
            _refuse(path, run_dir, "a checkpoint holds only what save_checkpoint writes")
    return found


def _folder(folder: Path, run_dir: Path, ours) -> list[Path]:
    found = []
    for path in _entries(folder, run_dir):
        if path.is_symlink() or not ours(path):
            _refuse(path, run_dir, f"{folder.name}/ holds only the files a run writes there")
        found.append(path)
    return found


def _entries(folder: Path, run_dir: Path) -> list[Path]:
    """A run folder's entries, sorted (the first foreign one is always the same); [] when it is absent."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        _refuse(folder, run_dir, "a run writes it as a folder")
    try:
        return sorted(folder.iterdir())
    except FileNotFoundError:
        return []


def _refuse(path: Path, run_dir: Path, why: str) -> None:
    kind = "a symlink" if path.is_symlink() else "a folder" if path.is_dir() else "a file"
    raise ForeignFile(f"{path}: {kind} no grpo-lab run writes ({why}); resume=never deletes only a run's own "
                      f"files, so nothing in {run_dir} was deleted: move it out, or use another out_dir")


def _json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _is_record(path: Path) -> bool:
    data = _json(path)
    return isinstance(data, dict) and {"run_id", "status"} <= set(data)


def _is_config(path: Path) -> bool:
    data = _json(path)
    return isinstance(data, dict) and {"seed", "max_steps"} <= set(data)


def _custom_code(config: Path) -> set[str]:
    """The .py files save_pretrained copies beside a trusted custom model (model.trust_remote_code): the modules
    its config.json's auto_map names (`model.files.remote_code`)."""
    found = remote_code(config.parent)
    if found is None or found[0].name != config.name:
        return set()
    return {f"{name.split('--')[-1].rsplit('.', 1)[0]}.py" for name in found[1] if "." in name}
