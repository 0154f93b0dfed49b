"""One writer per run directory (its races: tests/test_lock.py), resume only with the same config, faults on disk."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_lab.config import AlgoConfig, TrainConfig
from grpo_lab.run.guards import ConfigMismatch, RunDirBusy, RunLock, config_diff, flat_config, prepare
from grpo_lab.run.tables import read_table, write_part
from grpo_lab.train.trainer import train

ROOT = Path(__file__).resolve().parent.parent


def test_training_refuses_a_locked_directory(tiny_cfg):
    Path(tiny_cfg.out_dir).mkdir(parents=True)
    with RunLock(tiny_cfg.out_dir):
        with pytest.raises(RunDirBusy):
            train(tiny_cfg)
    assert not (Path(tiny_cfg.out_dir) / "run.json").exists()  # refused before writing anything


def test_config_diff_names_only_keys_that_change_results():
    a = flat_config(TrainConfig())
    b = flat_config(TrainConfig(seed=4, threads=2, out_dir="elsewhere", max_steps=7))
    b["sampler.group_size"] = 4
    b["logger.backend"] = "wandb"  # a tracking group: may differ
    assert [k for k, _, _ in config_diff(a, b)] == ["sampler.group_size", "seed"]
    old = dict(a)
    del old["reward.step_budget_s"]  # a run saved before a key existed: its default stands in
    assert config_diff(old, a) == []
    del old["algo.tied_batch"]  # ABSENT_MEANS: not its default but the value the run ran with, which it keeps
    assert config_diff(old, flat_config(TrainConfig(algo=AlgoConfig(tied_batch="step")))) == []
    assert config_diff(old, flat_config(TrainConfig(algo=AlgoConfig(tied_batch="skip")))) == []


def test_resume_checks_the_config(tiny_cfg):
    tiny_cfg.max_steps = 2
    tiny_cfg.eval.n = 0
    run = train(tiny_cfg)
    saved = json.loads((run / "config.json").read_text())
    assert saved["seed"] == 0 and saved["sampler.group_size"] == 4

    tiny_cfg.seed, tiny_cfg.algo.lr = 4, 5e-4
    with pytest.raises(ConfigMismatch, match=r"algo.lr 0.0001 -> 0.0005, seed 0 -> 4"):
        train(tiny_cfg)
    assert read_table(run, "steps").num_rows == 2  # nothing touched

    tiny_cfg.seed, tiny_cfg.algo.lr = 0, 1e-4
    tiny_cfg.max_steps, tiny_cfg.threads = 3, 1  # may differ: extends the run
    train(tiny_cfg)
    assert read_table(run, "steps").num_rows == 3

    tiny_cfg.seed, tiny_cfg.resume = 5, "never"  # start over, explicitly
    train(tiny_cfg)
    steps = read_table(run, "steps").to_pandas()
    assert steps["step"].tolist() == [1, 2, 3] and json.loads((run / "config.json").read_text())["seed"] == 5


def test_resume_says_where_it_resumes(tiny_cfg, caplog):
    tiny_cfg.max_steps, tiny_cfg.eval.n = 2, 0
    train(tiny_cfg)
    caplog.clear()
    tiny_cfg.max_steps = 3
    with caplog.at_level(logging.INFO, logger="grpo_lab"):
        train(tiny_cfg)
    assert f"resuming {tiny_cfg.out_dir} from step 2" in caplog.text


def test_next_start_notes_a_stale_running_and_cleans_temporaries(tmp_path, caplog):
    run = tmp_path / "run"
    cfg = TrainConfig(out_dir=str(run))
    (run / "checkpoints" / ".step-000004.123.tmp").mkdir(parents=True)
    write_part(run, "groups", 1, [])
    (run / "groups" / ".part-000002.parquet.999.tmp").write_bytes(b"half")
    (run / ".run.json.999.tmp").write_text("{")
    (run / "run.json").write_text(json.dumps({"run_id": "r", "status": "running", "started": "then", "pid": 999,
                                              "host": "h"}))
    with RunLock(run):
        prepare(run, cfg)
    err = caplog.text
    assert "ended without recording how (run.json still said running)" in err and "pid 999" in err
    left = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    assert left == ["checkpoints", "config.json", "groups", "groups/part-000001.parquet", "run.json"]


CHILD = """
import json, resource, signal, sys
from grpo_lab.config import TrainConfig
from grpo_lab.train.trainer import train
if sys.argv[2] == "limit":  # a real write fault: files past 1 MB fail with EFBIG, as on a full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
cfg = TrainConfig(out_dir=sys.argv[1], max_steps=2, prompts_per_step=2, checkpoint_every=1, threads=1)
cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [1], 4, 2
cfg.sampler.group_size, cfg.eval.n = 2, 2
train(cfg)
"""


def _child(run: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(run), mode], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


def test_a_write_fault_is_shown_recorded_and_cleaned_up(tmp_path):
    run = tmp_path / "run"
    out = _child(run, "limit")  # the model's weights (2.6 MB) cannot be written: the checkpoint fails
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert "File too large" in last or "Errno 27" in last, out.stderr[-2000:]
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "failed" and ("File too large" in record["error"] or "27" in record["error"])
    assert list((run / "checkpoints").glob(".step-*.tmp"))  # what the fault left behind ...

    out = _child(run, "free")
    assert out.returncode == 0, out.stderr[-2000:]
    assert not list((run / "checkpoints").glob(".step-*.tmp"))  # ... is gone on the next start
    assert json.loads((run / "run.json").read_text())["status"] == "done"
    assert read_table(run, "steps").to_pandas()["step"].tolist() == [1, 2]


def test_the_first_error_wins_when_run_json_cannot_be_written(tiny_cfg, monkeypatch, caplog):
    """Root ignores read-only folders, so the failure to record is injected; the first error is real."""
    from grpo_lab.run import record

    run = Path(tiny_cfg.out_dir)
    run.mkdir(parents=True)
    real_update = record.RunRecord.update

    def update(self, **fields):
        if fields.get("status") == "failed":
            raise OSError(30, "Read-only file system", str(self.path))
        real_update(self, **fields)
    monkeypatch.setattr(record.RunRecord, "update", update)
    tiny_cfg.eval.n = 0
    with pytest.raises(FileExistsError):  # the first error: a file where the groups folder belongs, once started
        train(tiny_cfg, on_start=lambda folder: (folder / "groups").write_text("a file where groups/ belongs"))
    assert "could not record the failure" in caplog.text
    caplog.clear()
    monkeypatch.undo()
    (run / "groups").unlink()
    tiny_cfg.max_steps = 1
    train(tiny_cfg)  # the next start says the last one ended unrecorded
    assert "ended without recording how" in caplog.text


def _train_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


def test_the_command_line_says_it_in_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "1+1", "answer": "2", "level": 1}) + "\n" + '["a list"]\n')
    out = _train_cli("task=mathset", f"task.path={bad}", f"hydra.run.dir={tmp_path / 'a'}")
    assert out.returncode != 0 and out.stderr.strip() == f"config error: {bad}:2: not a JSON object (a list)"

    run = tmp_path / "busy"
    run.mkdir()
    with RunLock(run):
        out = _train_cli("max_steps=1", f"hydra.run.dir={run}")
    assert out.returncode != 0
    last = [ln for ln in out.stderr.strip().splitlines() if not ln.startswith("[")]  # progress log lines aside
    assert len(last) == 1 and last[0].startswith("error: ") and f"being written by pid {os.getpid()}" in last[0]


def test_standalone_evaluation_is_a_writer_too(tmp_path):
    from grpo_lab.jobs.evaluate import evaluate_checkpoints

    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r", "status": "running"}))
    with RunLock(tmp_path):
        with pytest.raises(RunDirBusy):
            evaluate_checkpoints(TrainConfig(), tmp_path, n=1, temperature=1.0)
