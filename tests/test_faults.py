"""Faults outside the config, each one line naming the file or folder and a non-zero exit, never a traceback:
a model folder whose config.json is invalid or whose weights are truncated or empty, a read-only run
directory, and a disk that fills during a checkpoint (run.json then says `failed`, what was written stays
whole, and the same command resumes once there is room). Filesystems are real: a size-limited tmpfs and a
read-only remount, each in a private mount namespace (fixtures/runs.py), skipped where none can be made."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

from fixtures.models import build_chat_model
from fixtures.runs import (
    BROKEN_MODELS,
    CHAT,
    READ_ONLY,
    SMALL,
    broken_copy,
    can_mount,
    cli,
    error_lines,
    full_disk,
    in_namespace,
    read_only,
    tables,
)
from grpo_lab.run.record import RunRecord
from grpo_lab.train.trainer import Diverged, Trainer

needs_mount = pytest.mark.skipif(not can_mount(), reason="no private mount namespace here (unshare -rm)")


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("models") / "qwen2-chat")


@pytest.mark.parametrize("name,content,expected", BROKEN_MODELS)
def test_a_broken_model_folder_is_one_line_before_anything_loads(chat_dir, tmp_path, name, content, expected):
    folder = broken_copy(chat_dir, tmp_path, name, content)
    out = cli("model=local", f"model.path={folder}", *CHAT, f"hydra.run.dir={tmp_path / 'run'}")
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"config error: {folder / name}") and expected in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


def test_a_model_transformers_cannot_build_is_one_line_and_recorded(chat_dir, tmp_path):
    """Past the cheap checks (valid JSON naming a model_type) transformers itself refuses: the job says so
    in one line naming the folder, and run.json records it."""
    folder = tmp_path / "odd"
    shutil.copytree(chat_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["hidden_size"] = "wide"
    (folder / "config.json").write_text(json.dumps(config))
    run = tmp_path / "run"
    out = cli("model=local", f"model.path={folder}", *CHAT, f"hydra.run.dir={run}")
    lines = error_lines(out.stderr)
    assert out.returncode != 0 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"error: model.path='{folder}': {folder} cannot be loaded ("), lines[0]
    assert json.loads((run / "run.json").read_text())["status"] == "failed"


@needs_mount
def test_a_read_only_run_directory_is_one_line_and_stays_as_it_was(tmp_path):
    done = tmp_path / "done"
    out = cli("max_steps=1", *SMALL, f"hydra.run.dir={done}")
    assert out.returncode == 0, out.stderr[-2000:]
    results, unchanged = read_only(done, tmp_path / "ro")
    for name in READ_ONLY:  # a resume, a new run beside it, the job past the preflight, an evaluation
        rc, lines, folder = results[name]
        assert rc != 0 and len(lines) == 1, (name, lines)
        assert lines[0].startswith(f"error: {folder}") and "cannot write there" in lines[0], (name, lines)
        assert "read-only" in lines[0].lower(), lines[0]
    assert unchanged


@needs_mount
@needs_mount
@pytest.mark.parametrize("size_kb", [64, 1024])  # full at the zip's first records, or in the middle of the tensor
def test_state_pt_on_a_full_disk_raises_enospc_not_torchs_runtime_error(tmp_path, size_kb):
    """torch.save's zip writer says a failed write only as its own RuntimeError ("unexpected pos ..."), with no errno:
    save_torch raises the write's own OSError (ENOSPC), which the train command says in one line."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = ("import errno, torch; from grpo_lab.run.checkpoints import save_torch\n"
            "try:\n"
            f"    save_torch({{'x': torch.zeros(2**20)}}, '{mnt}/state.pt')\n"
            "except OSError as e:\n"
            "    print('OSError', errno.errorcode[e.errno])\n")
    out = in_namespace(f"mount -t tmpfs -o size={size_kb}k tmpfs {mnt} || exit 99\n{sys.executable} -c \"{code}\"")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "OSError ENOSPC"


def test_a_disk_that_fills_during_a_checkpoint_fails_the_run_and_loses_nothing(tmp_path):
    """A 12 MB tmpfs fills during a checkpoint: each holds 2.6 MB of weights, and 5.4 MB of Adam's moments once
    a step has updated (the first steps may tie all their groups and leave them empty)."""
    args = ["max_steps=3", "checkpoint_every=1", *SMALL]
    reference = tmp_path / "reference"
    out = cli(*args, f"hydra.run.dir={reference}")
    assert out.returncode == 0, out.stderr[-2000:]
    got = full_disk(args, tmp_path / "full")
    lines, saved, mnt = got["lines"], got["saved"], got["mnt"]
    assert got["rc"] != 0 and len(lines) == 1, lines
    failed_at = re.match(rf"error: writing {mnt}/run/checkpoints/\.step-(\d{{6}})\.\d+\.tmp: No space left on device "
                         r"\(ENOSPC\); the job stopped", lines[0])
    assert failed_at, lines[0]
    record = json.loads((saved / "run.json").read_text())
    assert record["status"] == "failed" and "No space left on device" in record["error"]
    assert not (saved / ".run.json.reserve").exists()  # given back to write run.json
    # what was written before the fault is whole: every checkpoint before it, every part up to it
    step = int(failed_at.group(1))
    kept = sorted(p.name for p in (saved / "checkpoints").glob("step-*"))
    assert kept == [f"step-{s:06d}" for s in range(1, step)]
    for name in kept:
        for file in ("model.safetensors", "counters.json"):
            assert (saved / "checkpoints" / name / file).read_bytes() == (
                reference / "checkpoints" / name / file).read_bytes()
    partial, whole = tables(saved), tables(reference)
    assert partial["steps"] == whole["steps"][:step] and len(partial["steps"]) == step
    assert got["again_rc"] == 0, got["again_err"][-2000:]
    resumed = got["resumed"]
    assert json.loads((resumed / "run.json").read_text())["status"] == "done"
    assert tables(resumed) == whole  # the same rows as a run that never met a full disk
    assert not list(resumed.glob("checkpoints/.step-*")) and not (resumed / ".run.json.reserve").exists()


def test_non_finite_weights_fail_the_run_instead_of_being_saved(tiny_cfg):
    """A fault the config checks cannot see (a diverged update, a bad kernel): the weights are checked before
    every checkpoint. The fault is real NaN in a real weight."""
    Path(tiny_cfg.out_dir).mkdir(parents=True)
    trainer = Trainer(tiny_cfg, RunRecord(Path(tiny_cfg.out_dir), tiny_cfg.seed))
    trainer.step()
    trainer.checkpoint()
    with torch.no_grad():
        next(trainer.model.parameters()).view(-1)[0] = float("nan")
    trainer.step()
    with pytest.raises(Diverged, match="step 2: the policy's weights are no longer finite.*last checkpoint is step 1"):
        trainer.checkpoint()
    assert not (Path(tiny_cfg.out_dir) / "checkpoints" / "step-000002").exists()
    trainer.scorer.close()
