"""A run owns only its files (issue 56, "Data lost"), made as the probe made them, on real tiny runs: a fresh start
into a folder of a person's files, or an ingest's, is refused in one line naming the first such file; a resume
deletes the parts past its checkpoint, and resume=never a run's parts, only when their run_id is the run's;
checkpoint pruning deletes a step folder's own files by name and leaves a person's file (and so the folder); a
`.lock` that is a symlink is never followed. Every person's file is byte-identical after."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpo_lab.run.lock import LockNotAFile
from grpo_lab.run.owned import ForeignFile
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import train

ROOT = Path(__file__).resolve().parent.parent


def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every path under `folder` with its bytes (a symlink: where it points)."""
    return {p.relative_to(folder).as_posix(): (f"-> {os.readlink(p)}" if p.is_symlink() else
                                               p.read_bytes() if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


def _part(path: Path, run_id: str, step: int) -> None:
    """A person's parquet file, named as a run's part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"run_id": [run_id] * 3, "step": [step] * 3, "reward": [0.5, 1.0, 0.0]}), path)


def _small(cfg, steps: int):
    cfg.max_steps, cfg.checkpoint_every, cfg.threads = steps, 1, 1
    return cfg


@pytest.mark.parametrize("planted", ["the probe's folder", "a part only", "notes"])
def test_a_fresh_start_into_a_folder_of_a_persons_files_is_refused_and_kept_whole(tiny_cfg, planted):
    run = Path(tiny_cfg.out_dir)
    run.mkdir()
    if planted == "the probe's folder":  # no run.json of ours: the user's own run.json, config, Hydra record, parts
        (run / "run.json").write_text(json.dumps({"name": "my experiment", "lr": 3e-4}))
        (run / "config.json").write_text(json.dumps({"lr": 3e-4}))
        (run / ".hydra").mkdir()
        (run / ".hydra" / "config.yaml").write_text("lr: 0.0003\n")
        _part(run / "groups" / "part-000007.parquet", "mine", 7)
        _part(run / "eval" / "part-000003.parquet", "mine", 3)
        first = run / "config.json"
    elif planted == "a part only":
        _part(run / "groups" / "part-000007.parquet", "mine", 7)
        first = run / "groups" / "part-000007.parquet"
    else:
        (run / "notes.txt").write_text("my notes")
        first = run / "notes.txt"
    before = _tree(run)
    with pytest.raises(ForeignFile) as refused:
        train(tiny_cfg)
    assert str(refused.value).startswith(f"{first}: a file no grpo-lab run wrote, in a folder that holds no run")
    assert "\n" not in str(refused.value)
    assert _tree(run) == before


def test_hydras_record_a_job_log_and_a_stale_lock_are_no_obstacle(tiny_cfg):
    run = Path(tiny_cfg.out_dir)
    (run / ".hydra").mkdir(parents=True)
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (run / ".hydra" / name).write_text(f"{name}: written by Hydra before the job\n")
    (run / "train.log").write_text("[hydra] job starting\n")
    (run / ".lock").write_text("{")  # a killed holder's half record
    train(_small(tiny_cfg, 1))
    assert json.loads((run / "run.json").read_text())["status"] == "done"
    assert (run / "train.log").read_text() == "[hydra] job starting\n"


@pytest.mark.parametrize("resume", ["auto", "never"])
def test_an_ingested_runs_folder_is_never_trained_into(tiny_cfg, resume):
    run = Path(tiny_cfg.out_dir)
    run.mkdir()
    files = ["run.json", "config.json", "groups/part-000001.parquet"]
    (run / ".grpo-lab-ingest").write_text(json.dumps({"written_by": "python -m analysis.ingest", "files": files}))
    (run / "run.json").write_text(json.dumps({"run_id": "trl-abc", "status": "done"}))
    (run / "config.json").write_text(json.dumps({"seed": 0, "max_steps": 1}))
    _part(run / "groups" / "part-000001.parquet", "trl-abc", 1)
    before = _tree(run)
    tiny_cfg.resume = resume
    with pytest.raises(ForeignFile, match="holds an ingested run"):
        train(tiny_cfg)
    assert _tree(run) == before


def test_a_persons_part_in_a_run_and_a_file_in_a_pruned_checkpoint_are_kept(tiny_cfg, tmp_path):
    run = train(_small(tiny_cfg, 2))  # checkpoints 1 and 2
    mine = run / "checkpoints" / "step-000001" / "mine.txt"
    mine.write_text("my notes on step 1")
    _part(run / "groups" / "part-000007.parquet", "mine", 7)  # put there by hand, past the run's checkpoint
    before = _tree(run)
    tiny_cfg.max_steps, tiny_cfg.checkpoint.keep_last = 3, 1
    with pytest.raises(ForeignFile, match=r"part-000007\.parquet: a file this run did not write"):
        train(tiny_cfg)  # a resume deletes the parts past its checkpoint: this one is not the run's
    assert _tree(run) == before
    tiny_cfg.resume = "never"
    with pytest.raises(ForeignFile, match=r"groups/part-000007\.parquet: a file no grpo-lab run writes \(its run_id"):
        train(tiny_cfg)
    assert _tree(run) == before

    mine_part = (run / "groups" / "part-000007.parquet").read_bytes()
    shutil.move(run / "groups" / "part-000007.parquet", tmp_path / "part-000007.parquet")
    tiny_cfg.resume = "auto"
    train(tiny_cfg)  # resumes at 2, checkpoints 3, keeps the last: 1 is pruned (2, evaluated, keeps its weights)
    assert sorted(p.name for p in (run / "checkpoints" / "step-000001").iterdir()) == ["mine.txt"]
    assert mine.read_text() == "my notes on step 1"
    assert (tmp_path / "part-000007.parquet").read_bytes() == mine_part
    kept = _tree(run)
    tiny_cfg.resume = "never"
    with pytest.raises(ForeignFile, match=r"step-000001/mine\.txt: a file no grpo-lab run writes"):
        train(tiny_cfg)
    assert _tree(run) == kept


def test_a_lock_that_is_a_symlink_is_never_followed(tiny_cfg, tmp_path):
    run = Path(tiny_cfg.out_dir)
    run.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("a person's file")
    (run / ".lock").symlink_to(precious)
    with pytest.raises(LockNotAFile, match=r"\.lock: a symlink"):
        train(tiny_cfg)
    assert precious.read_text() == "a person's file"
    assert (run / ".lock").is_symlink() and sorted(p.name for p in run.iterdir()) == [".lock"]


def test_the_command_line_refuses_a_persons_folder_before_hydra_writes(tmp_path):
    folder = tmp_path / "P"
    _part(folder / "eval" / "part-000002.parquet", "mine", 2)
    before = _tree(folder)
    out = subprocess.run([sys.executable, "-m", "experiments.train", "max_steps=1", f"hydra.run.dir={folder}"],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, text=True,
                         capture_output=True, timeout=600)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"error: {folder}/eval/part-000002.parquet: a file no grpo-lab run wrote, in a folder that holds no run")
    assert _tree(folder) == before  # no .hydra/, no log, no lock


def test_a_step_saved_again_keeps_a_persons_file_in_its_folder(tmp_path):
    """save_checkpoint over an existing step-NNNNNN (a weights-only checkpoint saved again at the same step): the old
    checkpoint's own files are replaced, a person's file in the folder is carried into the new one."""
    import torch
    from transformers import AutoModelForCausalLM

    from grpo_lab.model.tiny import tiny_weights
    from grpo_lab.run.checkpoints import checkpoint_dir, save_checkpoint

    model = AutoModelForCausalLM.from_pretrained(tiny_weights(), trust_remote_code=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)
    first = save_checkpoint(tmp_path, 2, model, optimizer, generator, {"samples_total": 8})
    (first / "notes.txt").write_text("mine")
    again = save_checkpoint(tmp_path, 2, model, optimizer, generator, {"samples_total": 16})
    assert again == first == checkpoint_dir(tmp_path, 2)
    assert (again / "notes.txt").read_text() == "mine"
    assert json.loads((again / "counters.json").read_text())["samples_total"] == 16
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == [again.name]  # nothing set aside is left


def test_a_resume_never_deletes_an_evaluation_experiments_evaluate_wrote(tiny_cfg, caplog):
    """Issue 56: a finished run with final_weights_only resumes from its last full checkpoint (2, before its
    weights-only 4); the parts past it that experiments.evaluate wrote (at other settings, and at the run's own
    settings with overwrite=true) are still listed in evaluations.jsonl: they stay, whole, or are redrawn exactly."""
    from grpo_lab.jobs.evaluate import evaluate_checkpoints
    from grpo_lab.run.evaluations import read_evaluations
    from grpo_lab.run.tables import read_table

    tiny_cfg.checkpoint.final_weights_only, tiny_cfg.threads = True, 1
    run = train(tiny_cfg)  # checkpoints 2 (full) and 4 (weights only); its own evaluation at 0 and 4
    evaluate_checkpoints(tiny_cfg, run, n=2, temperature=0.5, steps=[4])  # beside the run's own part
    evaluate_checkpoints(tiny_cfg, run, steps=[4], overwrite=True)  # over it, at the run's own settings
    other = run / "eval" / "part-000004-n2-t0.5-p1-m6.parquet"
    kept, rows = other.read_bytes(), read_table(run, "eval").to_pylist()
    listed = {r["part"] for r in read_evaluations(run) if r["process"] == "evaluate"}
    assert listed == {"eval/part-000004-n2-t0.5-p1-m6.parquet", "eval/part-000004.parquet"}

    caplog.set_level("INFO", logger="grpo_lab")
    train(tiny_cfg)  # resumes from 2: steps 3 and 4 drawn again, step 4 evaluated again
    assert f"resuming {run} from step 2" in caplog.text
    assert other.read_bytes() == kept
    assert all((run / part).exists() for part in listed)
    assert read_table(run, "eval").to_pylist() == rows  # the run's own part redrawn: the rows it held


@pytest.mark.parametrize("where", ["a file", "under a file", "a sweep's folder", "a symlink to nothing"])
def test_a_run_folder_that_is_a_file_is_one_line_before_anything_loads(tmp_path, where):
    """Issue 56: hydra.run.dir=FILE ended in Hydra's traceback; the command line says it in one line naming the key and
    the path, before torch loads, and the file stays as it was."""
    mine = tmp_path / "notes.txt"
    mine.write_text("a person's file")
    folder = {"a file": mine, "under a file": mine / "run", "a sweep's folder": mine,
              "a symlink to nothing": tmp_path / "gone"}[where]
    if where == "a symlink to nothing":
        folder.symlink_to(tmp_path / "nowhere")
    key = "hydra.sweep.dir" if where == "a sweep's folder" else "hydra.run.dir"
    out = subprocess.run([sys.executable, "-m", "experiments.train", "max_steps=1", f"{key}={folder}",
                          *(["-m", "seed=0,1"] if key == "hydra.sweep.dir" else [])],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, text=True,
                         capture_output=True, timeout=600)
    lines = out.stderr.strip().splitlines()
    said = {"under a file": f"lies under {mine}, a file", "a symlink to nothing": "is a symlink to nothing"}.get(
        where, "is a file")
    assert out.returncode != 0 and lines == [f"error: {key}: {folder} {said}, not a folder; a run writes its files "
                                             f"into a folder: give {key} a folder's path"], out.stderr[-2000:]
    assert mine.read_text() == "a person's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == [*(["gone"] if folder.is_symlink() else []), "notes.txt"]


def test_a_resume_that_would_shorten_a_run_is_refused_and_changes_nothing(tiny_cfg):
    """A finished run of 4 steps resumed with max_steps=1: its config would say 1 beside 4 steps of tables."""
    from grpo_lab.errors import ConfigError

    run = train(tiny_cfg)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    tiny_cfg.max_steps = 1
    with pytest.raises(ConfigError, match=r"^max_steps=1 is invalid: below step 4, which this run has reached"):
        train(tiny_cfg)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"} == before


def test_a_finished_run_started_again_with_nothing_to_train_keeps_its_record(tiny_cfg):
    """A sweep run again to resume its other jobs starts its finished ones too: they train nothing, and their
    run.json stays as their training left it (its finish time is the training's, no start added)."""
    run = train(tiny_cfg)
    record = (run / "run.json").read_bytes()
    train(tiny_cfg)
    assert (run / "run.json").read_bytes() == record
    time.sleep(1.1)  # run.json's times are to the second: each start's differs from the one before
    tiny_cfg.max_steps = 6  # a start that trains extends the record
    train(tiny_cfg)
    extended = json.loads((run / "run.json").read_text())
    assert extended["status"] == "done" and [s["status"] for s in extended["earlier_starts"]] == ["done"]
    first = json.loads(record)  # each start is named by its own start time; the run's `started` stays the first
    assert extended["earlier_starts"][0]["started"] == first["this_start"] and extended["started"] == first["started"]
    assert read_table(run, "steps")["step"].to_pylist()[-1] == 6
    time.sleep(1.1)
    tiny_cfg.max_steps = 7
    train(tiny_cfg)
    third = json.loads((run / "run.json").read_text())
    assert [s["started"] for s in third["earlier_starts"]] == [first["this_start"], extended["this_start"]]
    assert extended["this_start"] != first["this_start"] and third["started"] == first["started"]
