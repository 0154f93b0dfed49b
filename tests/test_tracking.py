"""Real runs watched as they go: a joblib sweep (no terminal) with every logger backend, whose job
logs, TensorBoard event files, offline W&B run and completions table are read back with their
own readers and checked against the parquet tables."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb.proto import wandb_internal_pb2

from analysis.data.completions import read_completions
from analysis.sections.examples import examples_markdown
from grpo_lab.run.tables import read_table

ROOT = Path(__file__).resolve().parent.parent
STEPS = 3


def read_wandb_records(path: Path) -> list[wandb_internal_pb2.Record]:
    """The records of a .wandb transaction log: LevelDB's log format (32 KiB blocks of records with a
    7-byte header: crc32c, length, type full/first/middle/last) after a 7-byte ':W&B' file header,
    each record a wandb_internal Record protobuf. wandb 0.31 ships no Python reader of its own."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, payloads, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            payloads.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            payloads.append(pending + chunk)
    records = []
    for payload in payloads:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records


def wandb_history(records) -> dict[int, dict[str, float]]:
    """step -> {key: value} of the history records."""
    out = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            out[r.history.step.num] = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                       for item in r.history.item}
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("tracked") / "sweep"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    out = subprocess.run([sys.executable, "-m", "experiments.train", "-m", "launcher=joblib", "logger=many",
                          "seed=0,1", f"max_steps={STEPS}", "prompts_per_step=4", "sampler.group_size=4",
                          "task.levels=[1,2,4]", "task.train_per_level=4", "task.eval_per_level=2", "eval.n=4",
                          "log_completions=8", f"hydra.sweep.dir={sweep}"],
                         cwd=ROOT, env=env, text=True, capture_output=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return sweep


def _jobs(sweep: Path) -> list[Path]:
    return sorted(p for p in sweep.iterdir() if (p / "run.json").exists())


def test_sweep_job_logs_hold_progress_lines(sweep):
    for job in _jobs(sweep):
        log = (job / "train.log").read_text()
        lines = log.splitlines()
        assert "loading" in lines[0]  # the first line comes before torch loads
        assert "starting at step 1" in log and "eval at step 0: accuracy" in log
        assert f"step 1/{STEPS} | samples 16 |" in log  # the first step always has its line
        assert "run finished:" in log and "held-out accuracy: step 0" in log
        assert f"report: python -m analysis {job}" in log or "report: python -m analysis" in log


def test_tensorboard_events_hold_the_step_metrics(sweep):
    for job in _jobs(sweep):
        acc = EventAccumulator(str(job / "tensorboard"))
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert {"losses/kl", "losses/clip_frac", "losses/grad_norm", "charts/reward_mean", "charts/samples_total",
                "ties/all_correct", "ties/1", "eval/pass@1/all", "eval/pass@4/2"} <= tags
        steps = read_table(job, "steps").to_pandas()
        kl = acc.Scalars("losses/kl")
        assert [e.step for e in kl] == steps["step"].tolist()
        assert [e.value for e in kl] == pytest.approx(steps["kl"].tolist(), rel=1e-6)
        reward = acc.Scalars("charts/reward_mean")
        assert [e.value for e in reward] == pytest.approx(steps["reward_mean"].tolist(), rel=1e-6)
        assert [e.step for e in acc.Scalars("eval/pass@1/all")] == [0, STEPS]
        ev = read_table(job, "eval").to_pandas()
        assert acc.Scalars("eval/pass@1/all")[-1].value == pytest.approx(ev[ev.step == STEPS]["correct"].mean())


def test_offline_wandb_run_holds_the_step_metrics(sweep):
    for job in _jobs(sweep):
        (log_file,) = (job / "wandb").glob("offline-run-*/run-*.wandb")
        records = read_wandb_records(log_file)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        meta = json.loads((job / "run.json").read_text())
        assert run.run_id == meta["run_id"]
        assert run.display_name.startswith("seed=") and run.run_group == str(sweep)  # named by overrides and sweep
        history = wandb_history(records)
        steps = read_table(job, "steps").to_pandas()
        for row in steps.itertuples():
            assert history[row.step]["losses/kl"] == pytest.approx(row.kl, rel=1e-9)
            assert history[row.step]["charts/samples_total"] == row.samples_total
        ev = read_table(job, "eval").to_pandas()
        assert history[0]["eval/pass@1/all"] == pytest.approx(ev[ev.step == 0]["correct"].mean())


def test_completions_are_whole_groups_matching_the_group_table(sweep):
    for job in _jobs(sweep):
        comp = read_table(job, "completions").to_pandas()
        groups = read_table(job, "groups").to_pandas()
        assert sorted(set(comp["step"])) == list(range(1, STEPS + 1))
        for step, rows in comp.groupby("step"):
            # two whole groups of 4; the first step also keeps the first group of each difficulty
            assert len(rows) == 8 if step > 1 else len(rows) >= 8 and len(rows) % 4 == 0
            drawn = groups[groups.step == step].reset_index(drop=True)
            for g, members in rows.groupby("group"):
                assert members["sample"].tolist() == [0, 1, 2, 3]
                assert members["reward"].tolist() == pytest.approx(list(drawn.loc[g, "rewards"]))
                assert members["correct"].tolist() == list(drawn.loc[g, "correct"])
                assert (members["prompt_id"] == drawn.loc[g, "prompt_id"]).all()
                assert (members["tie"] == drawn.loc[g, "tie"]).all()
    text = examples_markdown(read_completions(sweep))
    assert "#### Difficulty" in text and "| sample | completion | reward | correct |" in text


def test_resumed_run_keeps_one_tensorboard_event_per_step(tiny_cfg):
    """A step redone after a resume (its checkpoint lost) is in the events once, as in the tables."""
    from grpo_lab.train.trainer import train

    tiny_cfg.max_steps, tiny_cfg.checkpoint_every = 3, 2
    tiny_cfg.logger.backends = ["tensorboard"]
    run = train(tiny_cfg)
    shutil.rmtree(run / "checkpoints" / "step-000003")  # as if killed after step 3's events, before its checkpoint
    train(tiny_cfg)
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    steps = read_table(run, "steps").to_pandas()
    assert [e.step for e in acc.Scalars("losses/kl")] == steps["step"].tolist() == [1, 2, 3]
    assert [e.value for e in acc.Scalars("losses/kl")] == pytest.approx(steps["kl"].tolist(), rel=1e-6)
