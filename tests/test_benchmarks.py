"""The benchmark scripts run (their numbers live in benchmarks/RESULTS.md, not in tests)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def _run(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, text=True, capture_output=True, timeout=600)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the check really runs; run it by hand")
def test_gpu_check_imports_and_skips_without_cuda():
    out = _run("benchmarks/gpu_check.py")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "gpu_check: no CUDA device here; skipped"


def test_vs_trl_smoke():
    pytest.importorskip("trl", reason="TRL is a benchmark extra: pip install -e '.[bench]'")
    out = _run("benchmarks/vs_trl.py", "--smoke", "--threads", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("ratio (ours/TRL samples/s): ")


def test_samplers_benchmark_smoke():
    out = _run("benchmarks/samplers.py", "--smoke")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| greso |" in out.stdout and "| 256 |" in out.stdout


def test_speed_regression_benchmark_smoke():
    out = _run("benchmarks/regression.py", "--baseline", ".", "--blocks", "1", "--steps-per-block", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("this tree / baseline: ")


def test_preflight_benchmark_smoke():
    out = _run("benchmarks/preflight.py", "--reps", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| main job" in out.stdout and "| 11 |" in out.stdout
