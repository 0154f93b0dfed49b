"""rollout.engine=vllm at real sizes, on this CPU (issue 57): the engine sized to the run (a model with Qwen2.5-1.5B's
KV cache and 32,768 positions trains with default keys, where an engine sized for the whole context needed 1.75 GiB
of KV cache and refused to start), sleep mode's calls in TRL's and verl's order and once a step (recorded by
DrySleep: vLLM has no sleep mode on a CPU, so the calls are checked, not made), engines that shut down and give
their memory back, and the global random streams left as they were.

Run where vLLM is installed (docs/SCALING.md, "Rollouts through vLLM"): `.venv-vllm/bin/python -m pytest -m vllm
-n 0 tests/test_vllm_memory.py`; elsewhere skipped."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

from fixtures.models import build_long_context_model  # noqa: E402
from grpo_lab.config import TrainConfig  # noqa: E402
from grpo_lab.model.load import eos_ids, load_policy  # noqa: E402
from grpo_lab.rollout.vllm_engine import VLLMEngine  # noqa: E402
from grpo_lab.rollout.vllm_runtime import DrySleep  # noqa: E402
from grpo_lab.run.tables import read_table  # noqa: E402
from grpo_lab.tasks import ArithmeticTask  # noqa: E402

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent
ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
KV_GB = 0.25


@pytest.fixture(scope="module")
def long_model(tmp_path_factory) -> Path:
    return build_long_context_model(tmp_path_factory.mktemp("long") / "model")


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_policy("tiny", None, "cpu")
    return model, tok, eos_ids(model, tok)


def _train(run: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.train", f"hydra.run.dir={run}", "rollout.engine=vllm",
                           *overrides], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**ENV, "HOME": str(run.parent)})


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def prompts() -> list[str]:
    return [p.prompt for p in ArithmeticTask.build([1, 2, 3, 4], 8, 4).held_out]


def test_a_long_context_model_trains_with_default_keys_and_a_whole_context_is_refused_in_one_line(tmp_path,
                                                                                                   long_model):
    """Sized for the model's whole context (32,768 tokens) the engine needs 1.75 GiB of fp32 KV cache, past the
    default rollout.vllm.kv_cache_gb=1: asked for by rollout.vllm.max_model_len it is refused in one line before any
    model loads. By default the engine is sized to the run (the longest prompt + rollout.max_new_tokens): two steps
    train, the second drawn after the first's weights were pushed (rl_zvp: a random model's tied groups learn)."""
    whole = _train(tmp_path / "whole", "model=local", f"model.path={long_model}", "rollout.vllm.max_model_len=32768",
                   "max_steps=1")
    assert whole.returncode != 0
    assert ("rollout.vllm.kv_cache_gb=1.0 is invalid: one sequence of 32,768 tokens (rollout.vllm.max_model_len) "
            "needs 1.75 GiB of KV cache") in whole.stderr and "Traceback" not in whole.stderr, whole.stderr[-2000:]
    assert not (tmp_path / "whole").exists() or not any((tmp_path / "whole").iterdir())
    out = _train(tmp_path / "run", "model=local", f"model.path={long_model}", "max_steps=2", "eval.n=0",
                 "prompts_per_step=4", "sampler.group_size=4", "algo.advantage=rl_zvp")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "vllm engine: max_model_len 14 tokens (the longest prompt, 8, + rollout.max_new_tokens; the model's " \
           "context: 32,768)" in out.stdout, out.stdout[-3000:]
    steps = read_table(tmp_path / "run", "steps").to_pylist()
    assert [s["opt_steps"] for s in steps] == [1, 1]
    assert steps[1]["rollout_logp_diff_max"] < 1e-3  # the second step drew from the weights the first pushed


def test_sleep_mode_runs_once_a_step_in_trl_and_verls_order(tmp_path, monkeypatch):
    """resample_on_tie (up to four rounds a step) with an evaluation after every step: the engine sleeps once a
    step, before the update; the next draw, an evaluation's or the step's, finds PyTorch's cache emptied, the weights
    woken, pushed, then the KV cache woken; no draw comes while it sleeps, and every step's samples are the trainer's
    weights' (the push after each wake)."""
    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.trainer import Trainer

    monkeypatch.setattr(VLLMEngine, "sleep_type", DrySleep)
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), max_steps=3, prompts_per_step=6, checkpoint_every=100)
    cfg.rollout.engine, cfg.rollout.vllm.kv_cache_gb = "vllm", KV_GB
    cfg.sampler.name, cfg.sampler.group_size = "resample_on_tie", 4
    cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [1, 4], 8, 4
    cfg.eval.n, cfg.eval.every, cfg.algo.lr = 4, 1, 3e-3
    Path(cfg.out_dir).mkdir()
    trainer = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    try:
        assert trainer.engine.sleep_mode is not None
        trainer.run()
        calls = list(trainer.engine.calls)
    finally:
        trainer.scorer.close()
        trainer.engine.close()
    assert calls.count("sleep") == 3, calls  # once a step
    wake = ["empty_cache", "wake weights", "push", "wake kv_cache", "draw"]
    at = [i for i, c in enumerate(calls) if c == "sleep"]
    for i in at:  # the last step's sleep may end the run (its evaluation reused the rows of an unchanged model)
        assert calls[i + 1: i + 6] in (wake, []), calls
    woken = sum(1 for i in at if calls[i + 1:])
    assert calls[:2] == ["push", "draw"] and calls.count("push") == 1 + woken == calls.count("wake weights") + 1
    rounds = read_table(Path(cfg.out_dir), "groups").to_pandas()["round"]
    assert rounds.max() >= 1 and calls.count("draw") > 3 + woken  # several rounds a step, and evaluations: one wake
    steps = read_table(Path(cfg.out_dir), "steps").to_pylist()
    assert all(s["rollout_logp_diff_max"] < 1e-3 for s in steps if s["opt_steps"]), steps


def test_three_engines_open_and_close_in_one_process_and_give_their_memory_back(tiny):
    """Each engine's close shuts its engine core down: its KV cache is freed and vLLM's distributed state is gone,
    even where something else still refers to the engine's LLM (a benchmark's variable, a CUDA graph's pool): with
    the reference alone dropped, each engine kept its 0.25 GiB and the next one started beside it."""
    from vllm.distributed import parallel_state

    model, tok, ends = tiny
    cfg = TrainConfig()
    cfg.rollout.vllm.kv_cache_gb = KV_GB
    kept, after = [], []
    for _ in range(3):
        engine = VLLMEngine.build(model, tok, cfg, torch.device("cpu"), prompts())
        kept.append(engine.llm)
        engine.sample(prompts(), 4, max_new_tokens=6, temperature=1.0, end_ids=ends,
                      generator=torch.Generator().manual_seed(0))
        before = _rss()
        engine.close()
        engine.close()  # a second close does nothing
        after.append(_rss())
        assert before - after[-1] > 0.75 * KV_GB * 2**30, (before, after)
        assert parallel_state._WORLD is None and not torch.distributed.is_initialized()
        assert not engine.folder.exists()
    assert after[-1] - after[0] < 64 * 2**20, after  # nothing of an engine stays behind it


def test_the_engine_is_sized_to_the_run_and_leaves_the_global_random_streams_alone(tiny):
    """Its context is the longest prompt + rollout.max_new_tokens; vLLM seeds Python's, numpy's and torch's global
    generators when it starts and its CPU sampler draws from torch's every step: both leave them as they were."""
    model, tok, ends = tiny
    cfg = TrainConfig()
    cfg.rollout.vllm.kv_cache_gb = KV_GB
    torch.manual_seed(11)
    random.seed(11)
    np.random.seed(11)
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    engine = VLLMEngine.build(model, tok, cfg, torch.device("cpu"), prompts())
    try:
        longest = max(len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts())
        assert engine.max_model_len == longest + cfg.rollout.max_new_tokens
        engine.sample(prompts(), 4, max_new_tokens=cfg.rollout.max_new_tokens, temperature=1.0, end_ids=ends,
                      generator=torch.Generator().manual_seed(0))
        assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
        assert np.array_equal(np.random.get_state()[1], states[2])
        from grpo_lab.errors import ConfigError

        with pytest.raises(ConfigError, match=r"rollout.vllm.max_model_len=\d+ is invalid: a prompt of \d+ tokens"):
            engine.sample(prompts(), 2, max_new_tokens=engine.max_model_len, temperature=1.0, end_ids=ends,
                          generator=torch.Generator().manual_seed(0))
    finally:
        engine.close()


def test_the_gpu_check_runs_end_to_end_dry_on_this_cpu(tmp_path):
    """benchmarks/gpu_check.py --dry: both engines on SmolLM2 (where its wheel is installed) and on the 1.5B shape's
    attention and context, vllm with sleep mode on (its calls recorded: in order, once a step) and off; every run
    measured, none failed, and the engine's log-probs after each push are the trainer's (fp32)."""
    import json

    out = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry", "--out", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=900, env={**ENV, "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    runs = json.loads((tmp_path / "gpu_check.json").read_text())["runs"]
    models = {r["model"] for r in runs}
    assert len(runs) == 3 * len(models) and not any("error" in r for r in runs), runs
    for r in runs:
        assert r["samples_per_s"] > 0 and r["peak_in_use_gib"] > 0 and r["logp_diff_max"] < 1e-3, r
        if r["engine"] == "vllm":
            assert r["pushes"] == 2 and r["push_max_s"] > 0, r  # the first draw's, the timed step's
        if r["sleep"] == "on":
            assert r["sleep_calls"] == "2 sleeps, order ok", r  # the warm-up step's and the timed step's
    assert (tmp_path / "gpu_check.md").read_text().count("\n| ") == 1 + len(runs)  # the header row, a row a run
