"""Bounds from what can learn: temperatures, the clip, RL-ZVP's alpha, evaluation with nothing
to evaluate, and every count that multiplies samples by tokens measured against the memory free before any model
loads (grpo_lab/footprint.py), the numbers said in the one-line refusal; the floor it counts checked against what
a real evaluation of the built-in model holds."""

import subprocess
import sys
from pathlib import Path

import pytest

from grpo_lab.advantage.rl_zvp import MAX_ALPHA as MAX_ZVP_ALPHA
from grpo_lab.config import MAX_EPS_HIGH, MAX_TEMPERATURE, MIN_TEMPERATURE, TrainConfig
from grpo_lab.config.checks import check_memory, validate
from grpo_lab.errors import ConfigError
from grpo_lab.footprint import (
    EVAL_BATCH_ROWS,
    GIB,
    ROW_BYTES,
    TOKEN_BYTES,
    Shape,
    available,
    eval_rows_per_call,
    model_shape,
    sampling_bytes,
)

ROOT = Path(__file__).resolve().parent.parent


def refusal(**values) -> str | None:
    """validate's one line for a default config with `values` set ("algo__eps_low": algo.eps_low), or None."""
    cfg = TrainConfig()
    for name, value in values.items():
        *path, leaf = name.split("__")
        node = cfg
        for p in path:
            node = getattr(node, p)
        setattr(node, leaf, value)
    try:
        validate(cfg)
    except ConfigError as e:
        assert "\n" not in str(e)
        return str(e)
    return None


@pytest.mark.parametrize("key,refused,accepted", [
    ("rollout__temperature", [0.0, 1e-30, 0.049, MAX_TEMPERATURE * 1.01, 1e30],
     [MIN_TEMPERATURE, 1.0, MAX_TEMPERATURE]),
    ("eval__temperature", [1e-30, 0.01, MAX_TEMPERATURE + 0.5, -1.0], [0.0, MIN_TEMPERATURE, 0.7, MAX_TEMPERATURE]),
    ("algo__eps_low", [0.0, 1.0, 1.5, -0.1], [1e-6, 0.2, 0.999]),
    ("algo__eps_high", [0.0, -0.2, MAX_EPS_HIGH + 0.01, 1e9], [1e-6, 0.28, MAX_EPS_HIGH]),
    ("algo__zvp_alpha", [0.0, -0.1, MAX_ZVP_ALPHA * 1.001, 1e9], [0.05, 0.1, 0.3, MAX_ZVP_ALPHA]),
])
def test_bounds_refuse_what_cannot_learn_and_keep_what_can(key, refused, accepted):
    name = key.replace("__", ".")
    for value in refused:
        message = refusal(**{key: value})
        assert message is not None and message.startswith(f"{name}={value!r} is invalid: must be"), (value, message)
    for value in accepted:
        assert refusal(**{key: value}) is None, value


def test_the_refusals_say_why():
    assert "every group ties" in refusal(rollout__temperature=1e-30)
    assert "1 - eps_low" in refusal(algo__eps_low=1.5)
    assert "RL-ZVP tested 0.05-0.3" in refusal(algo__zvp_alpha=1e9)


def test_evaluation_with_nothing_to_evaluate_is_refused(tmp_path):
    assert refusal(task__eval_per_level=0) == (
        "eval.n=16 is invalid: evaluation is on, but task=arithmetic has no held-out problem (task.eval_per_level=0): "
        "nothing to evaluate; set eval.n=0 (eval=none) or give it held-out problems")
    assert refusal(task__eval_per_level=0, eval__n=0) is None
    one = tmp_path / "one.jsonl"  # one problem, on the training side of the hash split
    one.write_text('{"problem": "What is $1+1$?", "answer": "2"}\n')
    message = refusal(task__name="mathset", task__path=str(one))
    assert message.startswith("eval.n=16 is invalid: evaluation is on, but task=mathset has no held-out problem")
    assert refusal(task__name="mathset", task__path=str(one), eval__n=0) is None
    same = tmp_path / "same.jsonl"  # the same problem under another id, as the held-out file
    same.write_text('{"problem": "What is  $1+1$?", "answer": "2", "id": "other"}\n')
    assert refusal(task__name="mathset", task__path=str(one), task__eval_path=str(same)).startswith(
        f"task.eval_path={str(same)!r} is invalid: leaves no training problem")  # its one problem is held out


def test_memory_is_counted_before_anything_loads_and_the_numbers_are_said():
    cfg = TrainConfig()
    cfg.eval.n = 65_536  # the largest n the range allows: 64 held-out prompts x 65,536 samples, one prompt a call
    shape = model_shape("tiny", None, None, "auto")
    assert shape == Shape(kv_bytes=4 * 2 * 4 * 32 * 4, vocab=84)  # the built-in model: 4 layers, 4 KV heads of 32
    rows, call = 64 * 65_536, eval_rows_per_call(64, 65_536)
    assert call == EVAL_BATCH_ROWS == 65_536  # past 1,024 samples a prompt, one prompt's samples a batch
    need = call * (6 * (TOKEN_BYTES + shape.kv_bytes) + 4 * 84) + rows * ROW_BYTES
    assert sampling_bytes(rows, call, 6, shape, True, rows) == need
    with pytest.raises(ConfigError) as caught:
        check_memory(cfg, 128, 64, free=need - 1)
    assert str(caught.value) == (
        f"eval.n=65536 is invalid: an evaluation of eval.n=65,536 x 64 held-out prompts (4,194,304 samples of up to 6 "
        f"tokens) holds at least {need / GIB:,.1f} GiB, and this machine has {(need - 1) / GIB:,.1f} GiB free "
        "(MemAvailable, or a cgroup's limit); lower eval.n, or cap the rows sampled at once with "
        "rollout.max_rows_per_call")
    check_memory(cfg, 128, 64, free=need)  # exactly enough
    cfg.rollout.max_rows_per_call = 1024  # a call of 1,024 rows: what is left is the eval rows
    check_memory(cfg, 128, 64, free=rows * ROW_BYTES + 1024 * (6 * (TOKEN_BYTES + shape.kv_bytes) + 4 * 84))
    cfg = TrainConfig()
    cfg.rollout.max_new_tokens, cfg.prompts_per_step = 32_768, 512
    with pytest.raises(ConfigError, match=r"^rollout.max_new_tokens=32768 is invalid: a step's draw \(4,096 samples of "
                                          r"up to 32,768 tokens\) holds at least 51\d\.\d GiB"):
        check_memory(cfg, 128, 64, free=8 * GIB)
    cfg = TrainConfig()
    cfg.task.difficulty, cfg.task.difficulty_samples = "pass_rate", 65_536
    with pytest.raises(ConfigError, match=r"^task.difficulty_samples=65536 is invalid: measuring pass rates of "
                                          r"task.difficulty_samples=65,536 x 192 prompts"):
        check_memory(cfg, 128, 64, free=4 * GIB)  # 12,582,912 rows kept: 5.4 GiB


def test_a_model_off_the_host_counts_only_the_host_rows():
    rows = 10**6
    assert sampling_bytes(rows, rows, 512, Shape(10**5, 10**5), False, rows) == rows * ROW_BYTES


@pytest.mark.skipif(available() is None, reason="no /proc/meminfo: nothing is checked")
def test_the_issue_cases_are_refused_on_this_machine():
    free = available()
    n = 65_536
    for tokens in (6, 64, 512, 4096):  # the first that cannot fit here (64 prompts: 4,194,304 rows a call)
        if sampling_bytes(64 * n, eval_rows_per_call(64, n), tokens, model_shape("tiny", None, None, "auto"), True,
                          64 * n) > 2 * free:
            break
    message = refusal(eval__n=n, rollout__max_new_tokens=tokens)
    assert message is not None and message.startswith(f"eval.n={n} is invalid: an evaluation of") and "GiB free" in \
        message, message


def test_the_count_is_a_floor_of_what_a_real_evaluation_holds():
    """The built-in model evaluates 8,192 rows in one call on the CPU: the process's peak memory grows by at least
    what the check counts (the check never refuses what fits). The check counts the worst case, every row running
    to max_new_tokens: here no row ends early (an end id the model never emits), or the KV cache reserved for the
    tokens of rows that ended is never touched and the peak depends on which answers the CPU's kernels drew. Memory is
    the process's anonymous pages, watched through the call: its peak RSS counts library pages too, which a loaded
    machine may drop and fault back (CI measured 144 MiB of growth where the check counts 199; 540 here alone)."""
    script = """
import os, sys, threading, time, torch
from grpo_lab.footprint import model_shape, sampling_bytes
from grpo_lab.model.load import load_policy
from grpo_lab.rollout.evaluation import evaluate
from grpo_lab.tasks.arithmetic import ArithmeticTask
torch.set_num_threads(1)
page = os.sysconf("SC_PAGE_SIZE")
def anon():  # resident pages not backed by a file: a library's pages, which the kernel may drop, never count
    resident, shared = map(int, open("/proc/self/statm").read().split()[1:3])
    return (resident - shared) * page
model, tok = load_policy("tiny", None, "cpu")
task = ArithmeticTask.build([1, 2, 3, 4], 4, 16)
evaluate(model, tok, task.held_out[:2], n=2, temperature=1.0, max_new_tokens=6, end_ids=[10**6],
         answer_kind="integer", seed=0, run_id="r", step=0)  # warm: every lazy allocation made
before, peak, done = anon(), [0], threading.Event()
def watch():
    while not done.is_set():
        peak[0] = max(peak[0], anon())
        time.sleep(0.001)
watcher = threading.Thread(target=watch)
watcher.start()
rows = evaluate(model, tok, task.held_out, n=128, temperature=1.0, max_new_tokens=6, end_ids=[10**6],
                answer_kind="integer", seed=0, run_id="r", step=0)
done.set()
watcher.join()
floor = sampling_bytes(len(rows), len(rows), 6, model_shape("tiny", None, None, "auto"), True, len(rows))
print(len(rows), peak[0] - before, floor)
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, text=True, capture_output=True, timeout=600,
                         env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    rows, grown, floor = map(int, out.stdout.split())
    assert rows == 64 * 128 and floor > 100 * 2**20  # a floor worth checking: over 100 MiB
    assert grown >= floor, f"peak grew {grown / 2**20:.0f} MiB, the check counts {floor / 2**20:.0f} MiB"
