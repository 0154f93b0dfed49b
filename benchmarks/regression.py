"""Our trainer's speed on the TRL benchmark's tiny config, this tree against another copy of the
code (an older commit), side by side in one run: is the hot path any slower?

    git archive <commit> | tar -x -C /tmp/base     # the code to compare against
    python benchmarks/regression.py --baseline /tmp/base [--blocks 6] [--steps-per-block 5] [--threads 1]

Two worker processes, one per tree (PYTHONPATH picks the tree), each a Trainer on the config of
benchmarks/vs_trl.py (B = 16 prompts x G = 8, 6 new tokens, beta 0.04, mu 1, fp32, CPU). They run
blocks of whole optimizer steps in turn, never at the same time, after a warm-up block each; the
summary prints each side's median samples/s over blocks and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(threads: int) -> None:
    """Read a step count per line from stdin; run that many steps; print {"seconds", "samples"}."""
    import torch

    from grpo_lab.config import TrainConfig
    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.trainer import Trainer

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(out_dir=out, seed=0, max_steps=10**9, prompts_per_step=16, checkpoint_every=10**9)
        cfg.sampler.group_size, cfg.rollout.max_new_tokens, cfg.eval.n = 8, 6, 0
        trainer = Trainer(cfg, RunRecord(Path(out), 0))
        for line in sys.stdin:
            t0 = time.perf_counter()
            samples = sum(trainer.step()["samples"] for _ in range(int(line)))
            print(json.dumps({"seconds": time.perf_counter() - t0, "samples": samples}), flush=True)


def start(tree: Path, threads: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    return subprocess.Popen([sys.executable, __file__, "--worker", "--threads", str(threads)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def block(proc: subprocess.Popen, steps: int) -> float:
    proc.stdin.write(f"{steps}\n")
    proc.stdin.flush()
    r = json.loads(proc.stdout.readline())
    return r["samples"] / r["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a copy of the code to compare against")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--steps-per-block", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads)
        return
    procs = {"baseline": start(args.baseline.resolve(), args.threads), "this tree": start(ROOT, args.threads)}
    rates: dict[str, list[float]] = {name: [] for name in procs}
    for proc in procs.values():  # warm-up blocks, not counted
        block(proc, args.steps_per_block)
    for _ in range(args.blocks):
        for name, proc in procs.items():
            rates[name].append(block(proc, args.steps_per_block))
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    for name, r in rates.items():
        print(f"{name}: {statistics.median(r):7.1f} samples/s median ({min(r):.1f}-{max(r):.1f}) over {len(r)} blocks")
    ratio = statistics.median(rates["this tree"]) / statistics.median(rates["baseline"])
    print(f"this tree / baseline: {ratio:.3f}")


if __name__ == "__main__":
    main()
