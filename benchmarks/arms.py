"""What each arm of experiment=tie_learning costs, side by side in one process: an optimizer step, the samples it
draws, and so the training time of one job at the study's budget, against plain GRPO's; and one held-out
evaluation (eval.n = 64), the same for every arm.

    OMP_NUM_THREADS=1 python benchmarks/arms.py [--blocks 4] [--steps-per-block 3] [--threads 1] [--smoke]

One Trainer per arm on the study's config (B = 16 prompts, G = 8, levels 1-4, every arm's sampler block as
conf/experiment/tie_learning.yaml sets it), all in this process; after a warm-up step each, blocks of whole
steps run arm after arm in turn, so a load that comes and goes touches every arm alike. Per arm: the median over
blocks of ms per step and of ms per 1,000 samples drawn, samples drawn per step, and the ratio of its time per
sample drawn to grpo's: a job at a sample budget costs about that ratio of grpo's training time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpo_lab.config import TrainConfig
from grpo_lab.run.record import RunRecord
from grpo_lab.train.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import machine  # noqa: E402 - benchmarks/ is a folder of scripts, not a package

ARMS = {"grpo": ("grpo", "fixed"), "ngrpo": ("ngrpo", "fixed"), "rl_zvp": ("rl_zvp", "fixed"),
        "pods": ("grpo", "pods"), "replay": ("grpo", "replay"), "dynamic": ("grpo", "dynamic"),
        "dars": ("grpo", "dars"), "spo": ("spo", "spo"), "mopps": ("grpo", "mopps"), "speed": ("grpo", "speed"),
        "ar3po": ("grpo", "ar3po")}


def config(arm: str, out: Path, threads: int) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(out / arm), max_steps=10**6, prompts_per_step=16, checkpoint_every=10**6,
                      threads=threads)
    cfg.algo.advantage, cfg.sampler.name = ARMS[arm]
    cfg.algo.unit_weight = "sample"
    s = cfg.sampler
    s.group_size, s.pods.n, s.replay.size, s.dynamic.max_rounds, s.dars.max_per_prompt = 8, 16, 64, 8, 32
    cfg.eval.n = 64
    return cfg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--steps-per-block", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="one block of one step: checks the script runs")
    args = parser.parse_args()
    blocks, per_block = (1, 1) if args.smoke else (args.blocks, args.steps_per_block)
    torch.set_num_threads(args.threads)
    print(f"{machine(args.threads)}; {blocks} blocks of {per_block} steps per arm")
    with tempfile.TemporaryDirectory() as tmp:
        for arm in ARMS:
            (Path(tmp) / arm).mkdir()
        trainers = {arm: Trainer(config(arm, Path(tmp), args.threads), RunRecord(Path(tmp) / arm, 0)) for arm in ARMS}
        t0 = time.perf_counter()
        trainers["grpo"].evaluate(0)
        eval_ms = 1000 * (time.perf_counter() - t0)
        for trainer in trainers.values():
            trainer.step()  # warm-up
        step_ms: dict[str, list[float]] = {a: [] for a in ARMS}
        sample_ms: dict[str, list[float]] = {a: [] for a in ARMS}
        drawn: dict[str, list[int]] = {a: [] for a in ARMS}
        for _ in range(blocks):
            for arm, trainer in trainers.items():
                t0 = time.perf_counter()
                samples = sum(trainer.step()["samples"] for _ in range(per_block))
                ms = 1000 * (time.perf_counter() - t0)
                step_ms[arm].append(ms / per_block)
                sample_ms[arm].append(1000 * ms / samples)
                drawn[arm].append(samples)
        for trainer in trainers.values():
            trainer.scorer.close()
    base = statistics.median(sample_ms["grpo"])
    print("| arm | ms per step | samples drawn per step | ms per 1,000 samples drawn | / grpo |\n|---|---|---|---|---|")
    for arm in ARMS:
        per_sample = statistics.median(sample_ms[arm])
        print(f"| {arm} | {statistics.median(step_ms[arm]):.1f} | {sum(drawn[arm]) / (blocks * per_block):.0f} | "
              f"{per_sample:.1f} | {per_sample / base:.2f} |")
    print(f"\none held-out evaluation (64 prompts x 64 samples): {eval_ms:.0f} ms = "
          f"{eval_ms / statistics.median(step_ms['grpo']):.1f} grpo steps")


if __name__ == "__main__":
    main()
