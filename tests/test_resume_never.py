"""resume=never deletes only what a run wrote: every file in the run's folders proven by its
name, anything else refused in one line naming it before anything is deleted (by the preflight before Hydra
writes, and under the lock), a person's own files at the top kept; sweeps start over as before."""

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpo_lab.config import TrainConfig
from grpo_lab.run.owned import ForeignFile, delete_run, run_files
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import train

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
TINY = ["prompts_per_step=2", "sampler.group_size=2", "task.levels=[1,2]", "task.train_per_level=4",
        "task.eval_per_level=2", "eval.n=2", "checkpoint_every=1", "threads=1"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=ROOT, env=ENV, text=True,
                          capture_output=True, timeout=600)


def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every path under `folder` with its bytes (a symlink: where it points)."""
    return {p.relative_to(folder).as_posix(): (f"-> {os.readlink(p)}" if p.is_symlink() else
                                               p.read_bytes() if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


def _cfg(run: Path, **kw) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(run), max_steps=2, prompts_per_step=2, checkpoint_every=1, threads=1, **kw)
    cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [1, 2], 4, 2
    cfg.sampler.group_size, cfg.eval.n = 2, 2
    cfg.logger.backends = ["console", "tensorboard"]
    return cfg


@pytest.fixture(scope="module")
def made_run(tmp_path_factory) -> Path:
    """A real run of two steps: tables, eval, checkpoints, TensorBoard events."""
    run = tmp_path_factory.mktemp("never") / "run"
    train(_cfg(run))
    return run


@pytest.fixture
def run(made_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(made_run, copy, symlinks=True)
    return copy


def test_the_issues_folder_that_is_no_run_is_refused_and_kept_whole(tmp_path):
    """The issue's case: P holds eval/my_eval.py and checkpoints/model.ckpt; both were deleted without a word."""
    folder = tmp_path / "P"
    (folder / "eval").mkdir(parents=True)
    (folder / "checkpoints").mkdir()
    (folder / "eval" / "my_eval.py").write_text("print('mine')\n")
    (folder / "checkpoints" / "model.ckpt").write_bytes(b"weights")
    before = _tree(folder)
    out = _cli("max_steps=2", "resume=never", *TINY, f"hydra.run.dir={folder}")
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: {folder}/eval/my_eval.py: a file no grpo-lab run writes (eval/ holds only the files a run writes "
        f"there); resume=never deletes only a run's own files, so nothing in {folder} was deleted: move it out, or "
        "use another out_dir")
    assert _tree(folder) == before  # refused by the preflight: no .hydra/, no log, no lock either

    with pytest.raises(ForeignFile, match="eval/my_eval.py"):  # and under the lock, for callers of the library
        train(_cfg(folder, resume="never"))
    assert _tree(folder) == before


def test_a_run_restarts_and_a_persons_files_at_the_top_are_kept(run):
    old_id = json.loads((run / "run.json").read_text())["run_id"]
    (run / "notes.md").write_text("what I tried\n")
    (run / "report").mkdir()
    (run / "report" / "REPORT.md").write_text("an old report\n")
    events = sorted(p.name for p in (run / "tensorboard").iterdir())
    assert events and len(run_files(run)) > 10
    train(_cfg(run, resume="never", seed=3))
    assert (run / "notes.md").read_text() == "what I tried\n"
    assert (run / "report" / "REPORT.md").read_text() == "an old report\n"
    record = json.loads((run / "run.json").read_text())
    assert record["run_id"] != old_id and record["status"] == "done"
    assert json.loads((run / "config.json").read_text())["seed"] == 3
    assert read_table(run, "steps").to_pandas()["step"].tolist() == [1, 2]
    assert not set(events) & {p.name for p in (run / "tensorboard").iterdir()}  # the old events went


def test_a_lora_run_starts_over_too(tmp_path):
    """Adapter checkpoints hold peft's files (adapter_config.json, adapter_model.safetensors, its README.md)."""
    run = tmp_path / "lora"
    cfg = _cfg(run)
    cfg.model.lora.rank = 4
    train(cfg)
    assert (run / "checkpoints" / "step-000002" / "README.md").exists()
    cfg.resume, cfg.max_steps = "never", 1
    train(cfg)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000001"]


@pytest.mark.parametrize("plant", ["file in a checkpoint", "symlink in eval", "symlink named as a part",
                                   "folder in groups", "file in optim", "file in tensorboard", "eval is a symlink",
                                   "run.json of someone else", "a checkpoint that is a symlink"])
def test_anything_a_run_does_not_write_is_refused_and_nothing_is_deleted(run, tmp_path, plant):
    outside = tmp_path / "outside.txt"
    outside.write_text("not the run's")
    named = {
        "file in a checkpoint": run / "checkpoints" / "step-000002" / "notes.txt",
        "symlink in eval": run / "eval" / "latest",
        "symlink named as a part": run / "eval" / "part-000009.parquet",
        "folder in groups": run / "groups" / "old",
        "file in optim": run / "checkpoints" / "step-000001" / "optim" / "mine.bin",
        "file in tensorboard": run / "tensorboard" / "my_plot.png",
        "eval is a symlink": run / "eval",
        "run.json of someone else": run / "run.json",
        "a checkpoint that is a symlink": run / "checkpoints" / "step-000003",
    }
    path = named[plant]
    if plant.startswith("symlink"):
        path.symlink_to(outside)
    elif plant == "a checkpoint that is a symlink":  # a folder elsewhere holding what a checkpoint holds
        shutil.copytree(run / "checkpoints" / "step-000002", tmp_path / "elsewhere")
        path.symlink_to(tmp_path / "elsewhere")
    elif plant == "folder in groups":
        path.mkdir()
    elif plant == "eval is a symlink":
        shutil.rmtree(path)
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "part-000001.parquet").write_bytes(b"someone's")
        path.symlink_to(tmp_path / "elsewhere")
    elif plant == "run.json of someone else":
        (run / "config.json").unlink()  # no record of a run is left to vouch for it
        path.write_text(json.dumps({"experiment": "mine"}))
    else:
        path.parent.mkdir(exist_ok=True)
        path.write_text("mine")
    before = _tree(run)
    elsewhere = _tree(tmp_path / "elsewhere") if (tmp_path / "elsewhere").exists() else None
    with pytest.raises(ForeignFile) as refused:
        train(_cfg(run, resume="never", seed=4))
    assert str(refused.value).startswith(f"{path}: a ") and "\n" not in str(refused.value)
    assert _tree(run) == before and outside.read_text() == "not the run's"
    if elsewhere is not None:
        assert _tree(tmp_path / "elsewhere") == elsewhere


def test_a_file_that_appears_while_the_run_is_deleted_is_never_deleted(tmp_path):
    """A race: someone writes into eval/ while resume=never deletes. Either the check sees the file first (refused),
    or the deletion does not know it (its folder stays), or the emptied folder went before the write, which then
    fails and says so to its writer: a file that was written survives every time."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"run_id": ["r"]}), sink)  # a part of the run "r": resume=never reads its run_id column
    part = sink.getvalue().to_pybytes()
    for trial in range(30):
        folder = tmp_path / f"run{trial}"
        for table in ("groups", "steps", "eval"):
            (folder / table).mkdir(parents=True)
            for step in range(1, 60):
                (folder / table / f"part-{step:06d}.parquet").write_bytes(part)
        (folder / "run.json").write_text(json.dumps({"run_id": "r", "status": "done"}))
        late = folder / "eval" / "late.txt"

        told = []

        def write_late(path: Path, told: list) -> None:
            time.sleep(random.uniform(0, 0.004))
            try:
                path.write_text("late")
            except FileNotFoundError:  # eval/ was empty and removed first: the writer is told, nothing was written
                told.append(path)
        writer = threading.Thread(target=write_late, args=(late, told))
        writer.start()
        try:
            delete_run(folder)
        except ForeignFile:
            pass
        writer.join()
        assert (told and not late.parent.exists()) or late.read_text() == "late", trial


def test_a_sweep_starts_over_and_a_foreign_file_in_one_job_refuses_the_whole_command(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", "seed=0,1", "max_steps=1", *TINY, f"hydra.sweep.dir={sweep}"]
    first = _cli(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    ids = [json.loads((sweep / j / "run.json").read_text())["run_id"] for j in ("0", "1")]
    (sweep / "1" / "checkpoints" / "step-000001" / "mine.txt").write_text("mine")
    before = _tree(sweep)
    refused = _cli(*args, "resume=never")
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].startswith(
        f"error: {sweep}/1/checkpoints/step-000001/mine.txt: a file no grpo-lab run writes")
    assert _tree(sweep) == before  # job 0's run too: refused before Hydra or any job wrote

    (sweep / "1" / "checkpoints" / "step-000001" / "mine.txt").unlink()
    again = _cli(*args, "resume=never")
    assert again.returncode == 0, again.stderr[-3000:]
    for j, old in zip(("0", "1"), ids):
        record = json.loads((sweep / j / "run.json").read_text())
        assert record["status"] == "done" and record["run_id"] != old
        assert read_table(sweep / j, "steps").num_rows == 1
