"""What each sampler's own bookkeeping (choosing prompts, allocating samples, selecting what trains,
building the training batch) costs per step, against the whole step, measured side by side in one run.

    OMP_NUM_THREADS=1 python benchmarks/samplers.py [--steps 20] [--threads 1] [--smoke]

Each sampler trains the built-in tiny model (B = 16 prompts, G = 8, levels 1-4) in the same process,
after 3 warm-up steps. A step's sampler time is its draw minus the time spent inside the rollouts it
asked for (sampling and scoring), plus `training_units` and what it does after the update (`observe`: the
replay buffer's offers; `after_update`: SPO's log-prob passes); the ratio is that over the step's wall time.
A second table times the knapsack allocation alone at larger batches.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import grpo_lab.train.learn as learn_module
from grpo_lab.config import TrainConfig
from grpo_lab.run.record import RunRecord
from grpo_lab.samplers import SAMPLERS
from grpo_lab.samplers.knapsack import allocate
from grpo_lab.train.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import machine  # noqa: E402 - benchmarks/ is a folder of scripts, not a package


def config(sampler: str, out: Path, threads: int) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(out / sampler), max_steps=10_000, prompts_per_step=16, checkpoint_every=10_000,
                      threads=threads)
    cfg.sampler.name = sampler
    cfg.algo.advantage = "spo" if SAMPLERS[sampler].one_answer else "grpo"  # a group of one needs its tracker
    cfg.sampler.band.lo, cfg.sampler.band.hi, cfg.sampler.band.explore = 0.1, 0.9, 0.1  # as experiment=samplers
    cfg.sampler.dynamic.max_rounds = cfg.sampler.greso.max_rounds = 8  # never stop for want of untied groups
    cfg.algo.unit_weight = "sample"  # as experiment=tie_learning (dars's extra answers weigh)
    cfg.eval.n = 0
    return cfg


def time_sampler(sampler: str, out: Path, steps: int, warmup: int, threads: int) -> tuple[float, float]:
    """(median step ms, median sampler bookkeeping ms) over `steps` steps."""
    trainer = Trainer(config(sampler, out, threads), RunRecord(Path(out), 0))
    inner = {"rollout": 0.0, "batch": 0.0, "observe": 0.0}

    def timed(fn, key):
        """`fn`, adding its wall time to inner[key]."""
        def wrapped(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                inner[key] += time.perf_counter() - t0
        return wrapped

    trainer._draw_round = timed(trainer._draw_round, "rollout")
    trainer.sampler.observe = timed(trainer.sampler.observe, "observe")
    trainer.sampler.after_update = timed(trainer.sampler.after_update, "observe")  # SPO's trackers' passes
    batching = learn_module.training_units
    learn_module.training_units = timed(batching, "batch")
    step_ms, own_ms = [], []
    try:
        for i in range(warmup + steps):
            inner.update(rollout=0.0, batch=0.0, observe=0.0)
            row = trainer.step()
            if i >= warmup:
                step_ms.append(1000 * row["t_total"])
                own_ms.append(1000 * (row["t_rollout"] - inner["rollout"] + inner["batch"] + inner["observe"]))
    finally:
        learn_module.training_units = batching
    return float(np.median(step_ms)), float(np.median(own_ms))


def time_allocation(prompts: int, repeats: int = 20) -> float:
    """Median ms of one knapsack allocation of prompts x 8 samples, rates uniform, units of 2, 2..64 each."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        rates = [float(r) if r < 0.9 else None for r in rng.uniform(0, 1, prompts)]
        t0 = time.perf_counter()
        allocate(rates, prompts * 8, 2, 2, 64, 8)
        times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="one step each: checks the script runs")
    args = parser.parse_args()
    steps, warmup = (1, 0) if args.smoke else (args.steps, args.warmup)
    torch.set_num_threads(args.threads)
    print(f"{machine(args.threads)}; {steps} steps after {warmup} warm-up")
    print("| sampler | step ms | sampler ms | sampler / step |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for sampler in SAMPLERS:
            step, own = time_sampler(sampler, Path(tmp), steps, warmup, args.threads)
            print(f"| {sampler} | {step:.1f} | {own:.2f} | {own / step:.2%} |")
    print("\n| prompts a step | knapsack allocation ms |\n|---|---|")
    for prompts in (16, 256) if args.smoke else (16, 64, 256, 1024):
        print(f"| {prompts} | {time_allocation(prompts, 3 if args.smoke else 20):.2f} |")


if __name__ == "__main__":
    main()
