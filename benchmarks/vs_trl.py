"""Throughput of our GRPO trainer against TRL's GRPOTrainer, on one config, in one process.

    python benchmarks/vs_trl.py [--blocks 5] [--steps-per-block 5] [--threads 2]
    python benchmarks/vs_trl.py --smoke          # 1 block of 2 steps: checks that it runs
    python benchmarks/vs_trl.py --model smollm2 --threads 1   # SmolLM2-135M-Instruct (benchmarks/vs_trl_smollm2.py)

What is measured: samples/s = completions per second of wall time, over whole optimizer steps
(rollout + rewards + advantages + reference pass + policy update + optimizer step, and whatever
else each trainer does per step: our parquet table parts, TRL's metric bookkeeping, logging check
and data loading). Setup (model loading, building the trainers) is never timed.

The config, the same on both sides: the built-in tiny model (grpo_lab.model.tiny.tiny_weights(), loaded in
fp32 with eager attention on CPU), B = 16 prompts a step from the arithmetic task's training pool
(every level, the default pool), G = 8 samples a prompt (128
completions a step), at most 6 new tokens (generation stops at "<eos>"), temperature 1.0 (no top-k /
top-p), beta = 0.04 (k3 KL to a frozen reference), epsilon = 0.2 both sides, mu = 1 (TRL:
num_iterations = 1, one generation per optimizer step), AdamW (fused) at a constant lr 1e-4,
grad-norm clip 1.0, no weight decay, no gradient checkpointing, per-sequence token-mean loss (ours:
loss_agg="sequence"; TRL: loss_type="grpo"). Reward: grpo_lab.rewards.rules.score (integer accuracy,
format weight 0) on both sides.

One known difference in the objective, which costs nothing measurable: the advantage's std.
Ours uses the paper's population std and gives a tied group exactly 0 (algo.std="population");
TRL offers no population std, so it runs scale_rewards="group" (the closest it allows: per-group
Bessel-corrected std, advantage (r - mean) / (std + 1e-4), which is also 0 for a tied group).

How: both trainers live in this process and run interleaved in blocks of --steps-per-block
optimizer steps: ours (warm-up), TRL (warm-up), ours, TRL, ours, TRL, ... The warm-up blocks are
not timed. TRL runs as one ordinary `trainer.train()`; a TrainerCallback times each of its steps
(from the end of the previous step's on_step_end to this step's on_step_end) and, at the end of
each TRL block, runs our next block of `Trainer.step()` calls, which is not counted in TRL's time.
Each block gives one samples/s figure per trainer, in wall time and in this process's CPU time; the summary
prints the median and min/max over blocks and ends with each block's ratio, median (min-max), in both, beside
the machine's CPU, vector units and the highest load seen while timed (benchmarks/protocol.py).
--threads (default 2) sets torch's thread count
for both. Numbers are only comparable on an otherwise idle machine.

TRL is a benchmark-only dependency (pip install -e .[bench]); it is imported only here.
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

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.model.tiny import tiny_weights
from grpo_lab.model.tokenizer import CharTokenizer
from grpo_lab.rewards.rules import RewardWeights, score
from grpo_lab.run.record import RunRecord
from grpo_lab.tasks import build_task
from grpo_lab.train.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import Load, machine, spread  # noqa: E402 - benchmarks/ is a folder of scripts, not a package

B = 16  # prompts per optimizer step
G = 8  # samples per prompt
N = B * G  # completions per optimizer step
MAX_NEW_TOKENS = 6
BETA = 0.04
EPSILON = 0.2
MU = 1
LR = 1e-4
TEMPERATURE = 1.0


def our_config(out_dir: str, seed: int) -> TrainConfig:
    cfg = TrainConfig(out_dir=out_dir, seed=seed, max_steps=10**9, prompts_per_step=B, checkpoint_every=10**9)
    cfg.sampler.group_size = G
    cfg.rollout.max_new_tokens = MAX_NEW_TOKENS
    cfg.rollout.temperature = TEMPERATURE
    cfg.algo.beta = BETA
    cfg.algo.eps_low = cfg.algo.eps_high = EPSILON
    cfg.algo.mu = MU
    cfg.algo.lr = LR
    cfg.algo.std = "population"  # the paper's eq. 3 (the default)
    cfg.algo.loss_agg = "sequence"  # the paper's per-sequence token mean = TRL's loss_type="grpo"
    cfg.model.name = "tiny"
    cfg.model.dtype = "float32"
    cfg.model.device = "cpu"
    cfg.eval.n = 0
    cfg.task.eval_per_level = 0  # nothing is evaluated here; the training pool is the default one
    validate(cfg)
    return cfg


class RewardFn:
    """TRL reward function: grpo_lab's scorer, plus checks that every call is one full step of B groups of G."""

    def __init__(self, kind: str):
        self.kind, self.weights = kind, RewardWeights()
        self.step_tokens: list[int] = []  # per call: completion tokens, the end token included (as ours counts)
        self.__name__ = "accuracy"  # TRL names reward functions by __name__

    def __call__(self, prompts, completions, completion_ids, answer, **kwargs) -> list[float]:
        if len(completions) != N:
            raise AssertionError(f"TRL scored {len(completions)} completions in one call, expected {N}")
        groups = [prompts[i * G:(i + 1) * G] for i in range(B)]
        if any(len(set(g)) != 1 for g in groups) or len({g[0] for g in groups}) != B:
            raise AssertionError("TRL's batch is not B distinct prompts with G consecutive samples each")
        if any(len(ids) > MAX_NEW_TOKENS for ids in completion_ids):
            raise AssertionError("TRL generated more than max_completion_length tokens")
        self.step_tokens.append(sum(len(ids) for ids in completion_ids))
        return [score(c, True, a, self.kind, self.weights).reward for c, a in zip(completions, answer)]


def build_trl(folder: Path, cfg: TrainConfig, reward: RewardFn, out_dir: str, max_steps: int, callback):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                 trust_remote_code=False)
    tokenizer = CharTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token == "<eos>" and tokenizer.pad_token == "<pad>" and tokenizer.padding_side == "left"
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    task = build_task(cfg.task)
    data = Dataset.from_list([{"prompt": p.prompt, "answer": p.answer} for p in task.train])
    args = GRPOConfig(
        output_dir=out_dir,
        seed=cfg.seed,
        max_steps=max_steps,
        per_device_train_batch_size=N,  # completions per optimizer step
        num_generations=G,
        gradient_accumulation_steps=1,
        steps_per_generation=1,  # one generation per optimizer step
        max_completion_length=MAX_NEW_TOKENS,
        temperature=TEMPERATURE,
        top_p=1.0,
        top_k=0,
        beta=BETA,
        epsilon=EPSILON,
        num_iterations=MU,
        loss_type="grpo",
        scale_rewards="group",  # no population std in TRL; see the module docstring
        learning_rate=LR,
        lr_scheduler_type="constant",  # ours has no schedule (TRL's default is linear decay)
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch_fused",  # ours: torch.optim.AdamW(fused=True)
        gradient_checkpointing=False,  # TRL's default is True; transformers 5 renamed it
        activation_checkpointing=False,  # (set both, else the deprecated alias warns and TRL's True wins)
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        logging_steps=10**6,
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[callback])
    trainer.remove_callback(PrinterCallback)  # keeps end-of-train metric dicts off stdout
    trainer.remove_callback(ProgressCallback)
    if trainer.args.gradient_checkpointing or trainer.model.is_activation_checkpointing:
        raise AssertionError("TRL turned gradient checkpointing on")
    gen = trainer.generation_config
    expected = (MAX_NEW_TOKENS, True, TEMPERATURE, 0, 1.0)
    if (gen.max_new_tokens, gen.do_sample, gen.temperature, gen.top_k, gen.top_p) != expected:
        raise AssertionError(f"unexpected TRL generation config: {gen}")
    if tokenizer.eos_token_id not in trainer.eos_token_ids or gen.pad_token_id != tokenizer.pad_token_id:
        raise AssertionError("TRL generation would not stop at <eos> / pad with <pad>")
    return trainer


def run_ours(trainer: Trainer, steps: int) -> tuple[list[tuple[float, float]], int]:
    """`steps` optimizer steps; returns their (wall, CPU) times and the completion tokens they drew."""
    times, tokens_before = [], trainer.counters["tokens_total"]
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        row = trainer.step()
        times.append((time.perf_counter() - t0, time.process_time() - c0))
        if row["samples"] != N:
            raise AssertionError(f"our step drew {row['samples']} samples, expected {N}")
    return times, trainer.counters["tokens_total"] - tokens_before


def summary(name: str, rates: list[float], tokens: int, steps: int) -> str:
    lo, hi = min(rates), max(rates)
    return (f"{name:<5} samples/s: median {statistics.median(rates):8.1f}   min {lo:8.1f}   max {hi:8.1f}"
            f"   ({len(rates)} blocks; {tokens / max(1, steps * N):.2f} tokens/completion)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps-per-block", type=int, default=5, help="optimizer steps per block (default 5)")
    p.add_argument("--blocks", type=int, default=5, help="timed blocks per trainer, after one warm-up block each")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="1 block of 2 steps: only checks that everything runs")
    p.add_argument("--model", choices=["tiny", "smollm2"], default="tiny",
                   help="tiny: the built-in model (this file's config); smollm2: benchmarks/vs_trl_smollm2.py's")
    p.add_argument("--model-path", help="smollm2: a save_pretrained folder of it (else the wheel's GGUF)")
    p.add_argument("--fast-math", action="store_true", help="smollm2: our side with model.fast_math=true")
    p.add_argument("--prompts", nargs="+", choices=["short", "two-shot"], default=["short", "two-shot"],
                   help="smollm2: the prompt styles, a row each (default both)")
    args = p.parse_args()
    if args.smoke:
        args.blocks, args.steps_per_block = 1, 2
    if args.blocks < 1 or args.steps_per_block < 1:
        p.error("--blocks and --steps-per-block must be >= 1")
    if args.model == "smollm2":
        from vs_trl_smollm2 import main as smollm2

        return smollm2(args)
    k, blocks = args.steps_per_block, args.blocks
    torch.set_num_threads(args.threads)

    from transformers import TrainerCallback

    folder = tiny_weights()  # the folder our Trainer's load_policy("tiny") loads too
    load = Load()

    ours_times: list[list[tuple[float, float]]] = []
    ours_tokens = 0

    with tempfile.TemporaryDirectory(prefix="vs_trl-") as tmp:
        cfg = our_config(str(Path(tmp) / "ours"), args.seed)
        Path(cfg.out_dir).mkdir(parents=True)
        ours = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
        if Path(ours.model.config._name_or_path).resolve() != folder.resolve():
            raise AssertionError(f"our Trainer loaded {ours.model.config._name_or_path}, TRL would load {folder}")

        class Interleave(TrainerCallback):
            """Times every TRL optimizer step; after each TRL block but the last, runs our next block."""

            def __init__(self):
                self.times: list[tuple[float, float]] = []
                self.mark = (0.0, 0.0)

            def on_train_begin(self, args_, state, control, **kw):
                self.mark = (time.perf_counter(), time.process_time())

            def on_step_end(self, args_, state, control, **kw):
                nonlocal ours_tokens
                self.times.append((time.perf_counter() - self.mark[0], time.process_time() - self.mark[1]))
                load.look()
                if state.global_step % k == 0 and state.global_step < (blocks + 1) * k:
                    t, tok = run_ours(ours, k)
                    ours_times.append(t)
                    ours_tokens += tok
                self.mark = (time.perf_counter(), time.process_time())

        cb = Interleave()
        reward = RewardFn(build_task(cfg.task).answer_kind)
        trl_trainer = build_trl(folder, cfg, reward, str(Path(tmp) / "trl"), (blocks + 1) * k, cb)

        with load:
            run_ours(ours, k)  # our warm-up block
            trl_trainer.train()  # TRL warm-up block, then ours / TRL alternating, via the callback

    if len(reward.step_tokens) != (blocks + 1) * k or len(cb.times) != (blocks + 1) * k:
        raise AssertionError(f"TRL ran {len(cb.times)} steps with {len(reward.step_tokens)} reward calls, "
                             f"expected {(blocks + 1) * k} of each")
    if len(ours_times) != blocks:
        raise AssertionError(f"ran {len(ours_times)} timed blocks of ours, expected {blocks}")
    trl_times = [cb.times[(b + 1) * k:(b + 2) * k] for b in range(blocks)]  # drop the warm-up block
    ours_rates = [N * k / sum(w for w, _ in t) for t in ours_times]
    trl_rates = [N * k / sum(w for w, _ in t) for t in trl_times]
    wall = [a / b for a, b in zip(ours_rates, trl_rates)]  # each block's ratio: a busy spell hits both sides
    cpu = [sum(c for _, c in t) / sum(c for _, c in o) for o, t in zip(ours_times, trl_times)]

    import transformers
    import trl

    print(f"config: tiny model {folder.name}, B={B} x G={G} = {N} completions/step, <= {MAX_NEW_TOKENS} new tokens, "
          f"beta={BETA}, eps={EPSILON}, mu={MU}, lr={LR}, fp32, cpu, temperature={TEMPERATURE}")
    print(f"run: {blocks} timed blocks x {k} steps per trainer after 1 warm-up block each, interleaved "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}); {load}")
    print(machine())
    print(f"versions: python {sys.version.split()[0]}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, trl {trl.__version__}")
    print("per-block samples/s (ours | TRL): " + ", ".join(f"{a:.1f} | {b:.1f}" for a, b in zip(ours_rates, trl_rates)))
    print(summary("ours", ours_rates, ours_tokens, blocks * k))
    print(summary("TRL", trl_rates, sum(reward.step_tokens[k:]), blocks * k))
    print(f"ratio (ours/TRL samples/s): wall {spread(wall)}, CPU time {spread(cpu)} (per block: median (min-max))")


if __name__ == "__main__":
    main()
