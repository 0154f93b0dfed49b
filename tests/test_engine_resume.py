"""A run killed (SIGKILL) and started again with the same command writes the tables of one uninterrupted run, under
either rollout engine, with LoRA dropout on: every random stream the update draws from (torch's global generator,
dropout's) is the checkpoint's after a resume. vLLM seeds the global generators when its engine starts, and its CPU
sampler draws from torch's at every engine step (grpo_lab/rollout/vllm_engine.py keeps them as they were); without
that, 8 of 12 steps' losses differed. All four tables are compared whole (groups with their advantages, steps but
their timings, eval, completions). The vllm case runs where vLLM is installed (docs/SCALING.md, "Rollouts through
vLLM"): `.venv-vllm/bin/python -m pytest -m vllm -n 0 tests/test_engine_resume.py`."""

from __future__ import annotations

import importlib.util
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_lab.run.tables import read_table, varying_columns

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("groups", "steps", "eval", "completions")
ARGS = ["max_steps=12", "checkpoint_every=6", "model.lora.rank=4", "model.lora.dropout=0.1", "algo.lr=3e-3",
        "task.levels=[2]", "task.train_per_level=32", "task.eval_per_level=8", "prompts_per_step=8", "eval.n=4",
        "log_completions=4", "seed=3"]
VLLM = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")


def _command(run: Path, engine: str) -> list[str]:
    extra = ["rollout.vllm.kv_cache_gb=0.25"] if engine == "vllm" else []
    return [sys.executable, "-m", "experiments.train", f"hydra.run.dir={run}", f"rollout.engine={engine}", *ARGS,
            *extra]


def _env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(home), "PYTHONPATH": str(ROOT)}


def _plain(value):
    """A cell as plain data in which NaN equals NaN (lists and arrays compared element by element)."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def same_tables(run: Path) -> dict[str, list[dict]]:
    """The four tables of a run without what differs between equal runs: run_id and the timings."""
    out = {}
    for name in TABLES:
        t = read_table(run, name)
        t = t.drop_columns(varying_columns(t.column_names))
        out[name] = _plain(t.to_pylist())
    return out


def assert_same_tables(a: Path, b: Path) -> None:
    ta, tb = same_tables(a), same_tables(b)
    for name in TABLES:
        assert len(ta[name]) == len(tb[name]) > 0, name
        for i, (ra, rb) in enumerate(zip(ta[name], tb[name])):
            assert ra == rb, (name, i, {k: (ra[k], rb.get(k)) for k in ra if ra[k] != rb.get(k)})


@pytest.mark.heavy
@pytest.mark.parametrize("engine", ["hf", pytest.param("vllm", marks=[pytest.mark.vllm, VLLM])])
def test_a_lora_dropout_run_killed_and_resumed_writes_the_uninterrupted_tables(tmp_path, engine):
    whole = subprocess.run(_command(tmp_path / "whole", engine), cwd=ROOT, capture_output=True, text=True,
                           timeout=900, env=_env(tmp_path))
    assert whole.returncode == 0, whole.stderr[-3000:]
    part = tmp_path / "part"
    killed = subprocess.Popen(_command(part, engine), cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=_env(tmp_path))
    deadline = time.monotonic() + 600
    while not (part / "checkpoints" / "step-000006").exists():
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL  # killed part way, not ended
    assert read_table(part, "steps").num_rows < 12
    resumed = subprocess.run(_command(part, engine), cwd=ROOT, capture_output=True, text=True, timeout=900,
                             env=_env(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout + resumed.stderr
    losses = [r["loss"] for r in read_table(tmp_path / "whole", "steps").to_pylist()]
    assert len(set(losses)) > 6  # the steps trained: dropout drew a mask in each of them
    assert_same_tables(tmp_path / "whole", part)
