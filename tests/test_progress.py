"""Progress lines and tracker metrics, without a model: what the console says, when it says it, and
the metric dicts the backends receive, against counts made another way."""

import fcntl
import itertools
import logging
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from grpo_lab.config import TrainConfig
from grpo_lab.progress import Heartbeat, iterate
from grpo_lab.run.tracking import Console, eval_metrics, pass_at_k, step_metrics

ROOT = Path(__file__).resolve().parent.parent


def _row(step: int, samples_total: int) -> dict:
    return dict(step=step, loss=0.1, pg_loss=0.1, kl=0.01, clip_frac=0.0, grad_norm=1.0, lr=1e-4, reward_mean=0.5,
                accuracy=0.5, tie_frac=0.25, samples=16, samples_total=samples_total, tokens_total=3 * samples_total,
                t_rollout=0.1, t_update=0.1, t_total=0.2)


def _groups() -> list[dict]:
    kinds = [("1", True, "all_correct"), ("1", True, "all_correct"), ("1", False, None), ("3", True, "all_wrong")]
    return [dict(difficulty=d, tie=t, tie_kind=k) for d, t, k in kinds]


def test_step_metrics_are_namespaced_and_count_ties_by_difficulty_and_kind():
    m = step_metrics(_row(1, 16), _groups())
    assert m["losses/kl"] == 0.01 and m["charts/samples_total"] == 16 and m["charts/samples_per_s"] == 16 / 0.2
    assert m["ties/1"] == 2 / 3 and m["ties/3"] == 1.0
    assert m["ties/all_correct"] == 2 / 4 and m["ties/all_wrong"] == 1 / 4


def test_eval_pass_at_k_matches_brute_force_over_subsets():
    correct = {"a": [1, 0, 0, 1], "b": [0, 0, 0, 0], "c": [1, 1, 1, 1]}
    level = {"a": "1", "b": "1", "c": "2"}
    rows = [dict(prompt_id=p, difficulty=level[p], correct=bool(c)) for p, cs in correct.items() for c in cs]
    m = eval_metrics(rows)
    assert sorted(k for k in m if k.endswith("/all")) == ["eval/pass@1/all", "eval/pass@2/all", "eval/pass@4/all"]
    for k in (1, 2, 4):
        def brute(cs, k=k):  # the share of k-subsets of the samples holding a correct one
            subsets = list(itertools.combinations(cs, k))
            return sum(any(s) for s in subsets) / len(subsets)
        assert m[f"eval/pass@{k}/1"] == pytest.approx((brute(correct["a"]) + brute(correct["b"])) / 2)
        assert m[f"eval/pass@{k}/2"] == pytest.approx(brute(correct["c"]))
        assert m[f"eval/pass@{k}/all"] == pytest.approx(sum(brute(c) for c in correct.values()) / 3)
        assert pass_at_k(4, 2, k) == pytest.approx(brute([1, 1, 0, 0]))


def _step_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]


def test_console_first_step_then_by_time_and_every(caplog):
    caplog.set_level(logging.INFO, logger="grpo_lab")
    cfg = TrainConfig(max_steps=10, max_samples=160)
    cfg.logger.every_s, cfg.logger.every = 1e9, 3  # time never triggers: the first step and every 3rd
    console = Console(cfg, first_step=1)
    for step in range(1, 8):
        console.log(step_metrics(_row(step, 16 * step), _groups()), step)
    console.close()
    lines = _step_lines(caplog)
    assert [ln.split("/")[0] for ln in lines] == ["step 1", "step 3", "step 6"]
    assert "samples 16/160" in lines[0] and "ties 0.25 (all-correct 0.50, all-wrong 0.25)" in lines[0]
    assert "ETA" in lines[0] and "kl 0.01" in lines[0]
    caplog.clear()
    cfg.logger.every_s, cfg.logger.every = 0, 0  # a line every step
    console = Console(cfg, first_step=1)
    for step in range(1, 5):
        console.log(step_metrics(_row(step, 16 * step), _groups()), step)
    console.log(eval_metrics([dict(prompt_id="a", difficulty="1", correct=True)]), 4)
    console.close()
    assert len(_step_lines(caplog)) == 4
    assert any(r.getMessage().startswith("eval at step 4: accuracy 1.000") for r in caplog.records)


def test_iterate_logs_plain_lines_when_not_on_a_terminal(caplog):
    caplog.set_level(logging.INFO, logger="grpo_lab")
    assert list(iterate(range(5), 5, "things", every_s=0)) == list(range(5))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "things: 0/5" and lines[-1].startswith("things: 5/5 in")
    assert len(lines) == 6  # the start, one per item but the last, the end


def test_iterate_draws_a_tqdm_bar_on_a_terminal():
    """A real pseudo-terminal with a width: the bar is tqdm's (a percentage and a bar)."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    code = "from grpo_lab.progress import iterate\nfor _ in iterate(range(50), 50, 'demo'): pass\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, stderr=child, stdout=subprocess.DEVNULL, timeout=120)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.returncode == 0
    assert b"demo:   0%|" in out and b"0/50" in out  # tqdm's bar, drawn at the start


def test_heartbeat_speaks_when_nothing_else_did(caplog):
    caplog.set_level(logging.INFO, logger="grpo_lab")
    beat = Heartbeat(every_s=0.05)
    beat.set("in step 7")
    try:
        for _ in range(200):  # waits for the line (up to 20 s on a loaded machine); asserts no timing
            if any("still in step 7" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.1)
    finally:
        beat.close()
    assert any("still in step 7" in r.getMessage() for r in caplog.records)


def test_a_step_with_every_group_tied_says_so_instead_of_grad_nan():
    from grpo_lab.run.tracking import _grad_text

    assert _grad_text(float("nan")) == "no update (every group tied)"
    assert _grad_text(0.8351) == "grad 0.835"


def test_the_heartbeat_names_the_evaluation_and_the_speed_leaves_it_out(caplog, monkeypatch):
    """Issue 56: the heartbeat said "still in step 1" while the base model was evaluated and "still in step 3" in the
    evaluation after step 3, and a step line's s/step held the evaluation's time. A fake clock: steps of 2 s,
    evaluations of 70 s; the heartbeat (its own thread, on the same clock) names each evaluation."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    caplog.set_level(logging.INFO, logger="grpo_lab")
    cfg = TrainConfig(max_steps=10)
    cfg.logger.every_s, cfg.logger.every = 0, 0  # a line every step

    def heard(text: str) -> bool:  # the heartbeat thread's line (it checks the clock about once a second)
        for _ in range(100):
            if any(r.getMessage().startswith(text) for r in caplog.records):
                return True
            time.sleep(0.05)
        return False

    def evaluation(step: int) -> None:
        console.evaluating(step)
        clock[0] += 30
        said = "still evaluating the base model" if step == 0 else f"still in the evaluation after step {step}"
        assert heard(f"{said} (30s so far)"), [r.getMessage() for r in caplog.records]
        clock[0] += 40
        console.log(eval_metrics([dict(prompt_id="a", difficulty="1", correct=True)]), step)

    console = Console(cfg, first_step=1)
    try:
        evaluation(0)
        assert console.heartbeat.doing == "in step 1"
        for step in range(1, 5):
            clock[0] += 2
            console.log(step_metrics(_row(step, 16 * step) | {"t_total": 2.0}, _groups()), step)
            if step % 2 == 0:
                evaluation(step)
        assert console.heartbeat.doing == "in step 5"
    finally:
        console.close()
    lines = _step_lines(caplog)
    assert len(lines) == 4 and all("2.00 s/step, 8 samples/s" in line for line in lines), lines
    assert [line.rsplit("ETA ", 1)[1] for line in lines] == ["18s", "16s", "14s", "12s"]  # at the steps' speed
    assert not any("still in step" in r.getMessage() for r in caplog.records)
