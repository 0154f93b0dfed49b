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
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpo_lab.run.lock import LockNotAFile
from grpo_lab.run.owned import ForeignFile
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
