"""The benchmark scripts run (their numbers live in benchmarks/RESULTS.md, not in tests)."""

import importlib.util
import os
import re
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
    assert "| greso |" in out.stdout and "| replay |" in out.stdout and "| 256 |" in out.stdout


def test_arms_benchmark_smoke():
    out = _run("benchmarks/arms.py", "--smoke")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| dars |" in out.stdout and "one held-out evaluation" in out.stdout


def test_length_buckets_benchmark_smoke():
    out = _run("benchmarks/length_buckets.py", "--steps", "1", "--rounds", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("machine: ") and "padding share" in lines[1] and "1 bucket(s)" in lines[1]
    assert [line.split(":")[0].strip() for line in lines[3:6]] == [f"length_buckets={k}" for k in (1, 2, 3)]
    assert lines[-1].startswith("highest 1-min load average while timed: ")


def test_speed_regression_benchmark_smoke():
    out = _run("benchmarks/regression.py", "--baseline", ".", "--blocks", "1", "--steps-per-block", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("this tree / baseline: ")


def test_analysis_speed_benchmark_smoke_and_its_guard(tmp_path):
    args = ("benchmarks/analysis_speed.py", "--smoke", "--dir", str(tmp_path), "--repeats", "1")
    met = _run(*args, "--sizes", "1", "2", "--reference", "2", "--goal", "1e9")  # nothing above 2 to compare
    assert met.returncode == 0, met.stderr[-2000:]
    table = [line.split() for line in met.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in table] == ["1", "2"]
    groups = [int(row[1].replace(",", "")) for row in table]
    assert groups[1] == 2 * groups[0]  # size 2 is the sweep run twice as long
    assert met.stdout.strip().splitlines()[-1].startswith("goal met")
    missed = _run(*args, "--sizes", "1", "--reference", "1", "--goal", "1e-6")  # no report is that fast
    assert missed.returncode == 1 and "goal missed: size 1: report / read = " in missed.stdout


def test_the_analysis_speed_goal_is_held_at_the_reference_size_and_above():
    spec = importlib.util.spec_from_file_location("analysis_speed", ROOT / "benchmarks" / "analysis_speed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.goal_missed({1: 8.0, 4: 2.9, 16: 2.5}, 3, 4) == []  # the small sweep's fixed costs are not held
    assert bench.goal_missed({1: 2.0, 4: 3.2, 16: 2.5}, 3, 4) == ["size 4: report / read = 3.20 > 3"]
    assert bench.goal_missed({4: 2.0, 16: 2.3}, 3, 4) == ["size 16: report / read = 2.30, worse than 2.00 at size 4"]
    assert bench.goal_missed({4: 2.0, 16: 2.15}, 3, 4) == []  # within the spread between runs
    assert bench.goal_missed({1: 1.0}, 3, 4) == ["size 4 was not timed (--sizes): the goal is held there"]


def test_preflight_benchmark_smoke():
    out = _run("benchmarks/preflight.py", "--reps", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| main job" in out.stdout and "| 11 |" in out.stdout


def test_speed_check_reads_the_ratio_lines_the_benchmarks_print(tmp_path):
    """benchmarks/speed_check.py finds each goal's ratio in its benchmark's real output (a smoke run of each that
    is quick here; the SmolLM2 lines are the same format, printed by vs_trl_smollm2.compare)."""
    pytest.importorskip("trl", reason="TRL is a benchmark extra: pip install -e '.[bench]'")

    spec = importlib.util.spec_from_file_location("speed_check", ROOT / "benchmarks" / "speed_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    patterns = {name: pattern for name, _, _, pattern, _, _ in check.checks(None)}
    tiny = _run("benchmarks/vs_trl.py", "--smoke", "--threads", "1")
    report = _run("benchmarks/analysis_speed.py", "--smoke", "--dir", str(tmp_path), "--repeats", "1", "--sizes", "4",
                  "--reference", "4", "--goal", "1e9")
    assert tiny.returncode == 0 and report.returncode == 0, (tiny.stderr + report.stderr)[-2000:]
    for name, out in (("tiny vs TRL, samples/s, 1 thread", tiny.stdout),
                      ("report / bare read at size 4", report.stdout)):
        found = re.search(patterns[name], out, re.MULTILINE)
        assert found is not None, (name, out[-1500:])
        median, low, high = map(float, found.groups())
        assert 0 < low <= median <= high
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from vs_trl_smollm2 import ratio_line

    for style in ("short", "two-shot"):
        line = ratio_line(style, [3.3, 2.9, 3.1], [3.4, 3.6, 3.2])
        found = re.search(patterns[f"SmolLM2 vs TRL, tokens/s, {style} prompts, 2 threads"], line, re.MULTILINE)
        assert found is not None and found.groups() == ("3.10", "2.90", "3.30"), line


def test_profile_step_splits_both_trainers_steps():
    """Every phase is found on both sides (a renamed TRL method would leave its phase at 0) and the phases fit
    within the step; with --gemms, each side's matrix products are found, within its step, at a rate below the
    machine's best."""
    pytest.importorskip("trl", reason="TRL is a benchmark extra: pip install -e '.[bench]'")
    out = _run("benchmarks/profile_step.py", "--steps", "1", "--threads", "1", "--gemms")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {cells[1].strip(): (float(cells[2]), float(cells[3])) for cells in
            (line.split("|") for line in out.stdout.splitlines() if line.startswith("| ") and "phase" not in line)}
    gemms = {k: rows.pop(k) for k in list(rows) if k.startswith("gemm")}
    for phase in ("rollout", "rewards", "reference pass", "policy forward", "backward", "optimizer"):
        assert rows[phase][0] > 0 and rows[phase][1] > 0, (phase, rows[phase])
    assert rows["tables"][0] > 0
    peak = float(re.search(r"one 2048\^3 product: (\d+) GFLOP/s", out.stdout).group(1))
    for side in (0, 1):
        assert rows["rest"][side] >= 0 and rows["total"][side] >= max(v[side] for v in rows.values())
        assert 0 < gemms["gemm GFLOP (profiled)"][side] and 0 < gemms["gemm GFLOP/s (profiled)"][side] < 1.2 * peak
        assert 0 < gemms["gemm ms (profiled)"][side] < 2 * rows["total"][side]  # the profiler slows what it times


def test_viewer_benchmark_smoke():
    import shutil

    if not shutil.which("chromium") and not os.environ.get("GRPO_LAB_REQUIRE_BROWSER"):
        pytest.skip("no chromium here (apt-get install chromium)")
    out = _run("benchmarks/viewer.py", "reports/main", "--repeats", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"\| open from disk to ready \| \d+ \(\d+-\d+\) \|", out.stdout)
    assert "| filter: clear | " in out.stdout and "24,226 |" in out.stdout  # every group of the main job listed


def test_study_job_benchmark_sets_configs_and_trees_side_by_side():
    """Sides on this tree by their overrides and the baseline tree's job as it is: one table row each, the first
    side the ratios' 1.00, and the job's own evaluation timed (rows/s > 0)."""
    out = _run("benchmarks/study_job.py", "--baseline", ".", "--side", "plain", "--side", "nokl algo.beta=0",
               "--tree", "again", ".",
               "--job", "seed=0 prompts_per_step=2 sampler.group_size=2 task.eval_per_level=1 eval.n=2 max_samples=64",
               "--blocks", "1", "--steps", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split(" | ") for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r[0].strip("| ") for r in rows] == ["baseline", "plain", "nokl", "again"]
    assert [r[1] for r in rows] == ["(none)", "(none)", "algo.beta=0", "(none)"]
    assert rows[0][-3:] == ["1.00", "1.00", "1.00 |"] and all(float(r[5].split()[0]) > 0 for r in rows)
    assert "1 blocks of 1 steps" in out.stdout and "flags" in out.stdout
