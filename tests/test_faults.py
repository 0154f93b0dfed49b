"""Faults outside the config, each one line naming the file or folder and a non-zero exit, never a traceback:
a model folder whose config.json is invalid or whose weights are truncated or empty, a read-only run
directory, and a disk that fills during a checkpoint (run.json then says `failed`, what was written stays
whole, and the same command resumes once there is room). Filesystems are real: a size-limited tmpfs and a
read-only remount, each in a private mount namespace (`unshare`), skipped where none can be made."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fixtures.models import build_chat_model
from grpo_lab.run.record import RunRecord
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import Diverged, Trainer

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
SMALL = ["prompts_per_step=2", "sampler.group_size=2", "task.levels=[1,2]", "task.train_per_level=4",
         "task.eval_per_level=2", "eval.n=2"]
APP = ("import sys; from experiments.train import run; "
       f"sys.argv = ['train', '--config-path', {str(ROOT / 'conf')!r}, *sys.argv[1:]]; run()")
CAN_MOUNT = shutil.which("unshare") is not None and subprocess.run(
    ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True).returncode == 0
needs_mount = pytest.mark.skipif(not CAN_MOUNT, reason="no private mount namespace here (unshare -rm)")


def _lines(out: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in out.stderr.strip().splitlines() if not ln.startswith("[")]  # log lines aside


def _cli(*args: str, module: str = "experiments.train") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=ENV, text=True, capture_output=True,
                          timeout=900)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("models") / "qwen2-chat")


def _broken_copy(chat_dir: Path, where: Path, name: str, content: bytes | None) -> Path:
    folder = where / name.replace("/", "-")
    shutil.copytree(chat_dir, folder)
    target = folder / name.split("/")[0]
    if content is None:  # cut to half its length
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    else:
        target.write_bytes(content)
    return folder


@pytest.mark.parametrize("name,content,expected", [
    ("config.json", b"{ not json", "config.json: not a readable JSON file"),
    ("config.json", b"[1, 2]", "config.json: not a model config (a JSON object with a 'model_type')"),
    ("model.safetensors", None, "model.safetensors: truncated ("),
    ("model.safetensors", b"", "model.safetensors: empty (0 bytes)"),
    ("model.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!", "not a safetensors file"),
])
def test_a_broken_model_folder_is_one_line_before_anything_loads(chat_dir, tmp_path, name, content, expected):
    folder = _broken_copy(chat_dir, tmp_path, name, content)
    out = _cli("model=local", f"model.path={folder}", "task.chat_template=true", "task.answer_format=boxed",
               "max_steps=1", *SMALL, f"hydra.run.dir={tmp_path / 'run'}")
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
    out = _cli("model=local", f"model.path={folder}", "task.chat_template=true", "task.answer_format=boxed",
               "max_steps=1", *SMALL, f"hydra.run.dir={run}")
    lines = _lines(out)
    assert out.returncode != 0 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"error: model.path='{folder}': {folder} cannot be loaded ("), lines[0]
    assert json.loads((run / "run.json").read_text())["status"] == "failed"


def _in_namespace(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a shell script as root of a private mount namespace: its mounts vanish with it."""
    return subprocess.run(["unshare", "-rm", "bash", "-c", script], cwd=ROOT, env=ENV, text=True,
                          capture_output=True, timeout=1800)


@needs_mount
def test_a_read_only_run_directory_is_one_line_and_stays_as_it_was(tmp_path):
    done = tmp_path / "done"
    out = _cli("max_steps=1", *SMALL, f"hydra.run.dir={done}")
    assert out.returncode == 0, out.stderr[-2000:]
    mnt, report = tmp_path / "mnt", tmp_path / "report"
    mnt.mkdir()
    report.mkdir()
    args = " ".join(["max_steps=2", *SMALL])
    py = sys.executable
    script = f"""
mount -t tmpfs tmpfs {mnt} && cp -a {done} {mnt}/run && mount -o remount,ro {mnt} || exit 99
find {mnt}/run -type f | sort | xargs sha256sum > {report}/before
{py} -m experiments.train {args} hydra.run.dir={mnt}/run 2> {report}/resume.err; echo $? > {report}/resume.rc
{py} -m experiments.train {args} hydra.run.dir={mnt}/new/run 2> {report}/new.err; echo $? > {report}/new.rc
{py} -c "{APP}" {args} hydra.run.dir={mnt}/run 2> {report}/app.err > /dev/null; echo $? > {report}/app.rc
{py} -m experiments.evaluate run_dir={mnt}/run n=2 2> {report}/evaluate.err; echo $? > {report}/evaluate.rc
find {mnt}/run -type f | sort | xargs sha256sum > {report}/after
"""
    out = _in_namespace(script, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    for name, folder in (("resume", mnt / "run"), ("new", mnt / "new" / "run"), ("app", mnt / "run"),
                         ("evaluate", mnt / "run")):
        lines = [ln for ln in (report / f"{name}.err").read_text().strip().splitlines() if not ln.startswith("[")]
        assert int((report / f"{name}.rc").read_text()) != 0, name
        assert len(lines) == 1 and lines[0].startswith(f"error: {folder}") and "cannot write there" in lines[0], (
            name, lines)
        assert "read-only" in lines[0].lower(), lines[0]
    assert (report / "before").read_text() == (report / "after").read_text()


def _tables(run: Path) -> dict:
    out = {}
    for name in ("groups", "steps", "eval"):
        t = read_table(run, name)
        rows = t.drop_columns([c for c in t.column_names if c == "run_id" or c.startswith("t_")]).to_pylist()
        out[name] = [{k: "nan" if v != v else v for k, v in row.items()} for row in rows]  # NaN equals NaN here
    return out


@needs_mount
def test_a_disk_that_fills_during_a_checkpoint_fails_the_run_and_loses_nothing(tmp_path):
    """A 12 MB tmpfs fills during a checkpoint: each holds 2.6 MB of weights, and 5.4 MB of Adam's moments once
    a step has updated (the first steps may tie all their groups and leave them empty)."""
    args = ["max_steps=3", "checkpoint_every=1", *SMALL]
    reference = tmp_path / "reference"
    out = _cli(*args, f"hydra.run.dir={reference}")
    assert out.returncode == 0, out.stderr[-2000:]
    mnt, saved = tmp_path / "mnt", tmp_path / "saved"
    mnt.mkdir()
    line = " ".join(args)
    py = sys.executable
    script = f"""
mount -t tmpfs -o size=12m tmpfs {mnt} || exit 99
{py} -m experiments.train {line} hydra.run.dir={mnt}/run 2> {tmp_path}/full.err; echo $? > {tmp_path}/full.rc
df -k {mnt} | tail -1 > {tmp_path}/df
cp -a {mnt}/run {saved}
mount -o remount,size=64m {mnt}
{py} -m experiments.train {line} hydra.run.dir={mnt}/run 2> {tmp_path}/again.err; echo $? > {tmp_path}/again.rc
cp -a {mnt}/run {tmp_path}/resumed
"""
    out = _in_namespace(script, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in (tmp_path / "full.err").read_text().strip().splitlines() if not ln.startswith("[")]
    assert int((tmp_path / "full.rc").read_text()) != 0 and len(lines) == 1, lines
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
    partial, whole = _tables(saved), _tables(reference)
    assert partial["steps"] == whole["steps"][:step] and len(partial["steps"]) == step
    assert int((tmp_path / "again.rc").read_text()) == 0, (tmp_path / "again.err").read_text()[-2000:]
    resumed = tmp_path / "resumed"
    assert json.loads((resumed / "run.json").read_text())["status"] == "done"
    assert _tables(resumed) == whole  # the same rows as a run that never met a full disk
    assert not list(resumed.glob("checkpoints/.step-*")) and not (resumed / ".run.json.reserve").exists()


def test_non_finite_weights_fail_the_run_instead_of_being_saved(tiny_cfg):
    """A fault the config checks cannot see (a diverged update, a bad kernel): the weights are checked before
    every checkpoint. The fault is real NaN in a real weight."""
    Path(tiny_cfg.out_dir).mkdir(parents=True)
    record = RunRecord(Path(tiny_cfg.out_dir), tiny_cfg.seed)
    trainer = Trainer(tiny_cfg, record)
    trainer.step()
    trainer.checkpoint()
    with torch.no_grad():
        next(trainer.model.parameters()).view(-1)[0] = float("nan")
    trainer.step()
    with pytest.raises(Diverged, match="step 2: the policy's weights are no longer finite.*last checkpoint is step 1"):
        trainer.checkpoint()
    assert not (Path(tiny_cfg.out_dir) / "checkpoints" / "step-000002").exists()
    trainer.scorer.close()
