"""A study's job, side by side: whole optimizer steps (rollout and update apart) and held-out evaluations of one sweep
job, under several configs or code trees, interleaved in one run. A study's seeds are bought with this time.

    python benchmarks/study_job.py --side fp32 --side "bf16 model.dtype=autocast_bf16" [--baseline /tmp/base]
        [--job "experiment=gym_curricula arm=grpo"] [--blocks 3] [--steps 2] [--threads 1]

A side is a name and the overrides its job adds to `--job`; `--baseline DIR` adds a side named "baseline": the job
as it is, on the code in DIR (`git archive <commit> | tar -x -C DIR`), and `--baseline-side` more sides on that
code; `--tree NAME DIR` one more side on the code in another DIR. One worker process a side, each a Trainer on its
composed job (checkpoints and evaluations off while timed); the workers take turns, never at the same time, each
block `--steps` whole steps then one held-out evaluation (the job's own eval.n, prompts and token limit), after a
warm-up block each. Printed: each side's medians over blocks (min-max) of training samples/s (whole steps), rollout
and update seconds a sample, evaluation rows/s, the whole job's minutes at those rates (its sample budget and
`--evals` evaluations), the ratios to the first side, and the machine's CPU flags and load. A side's first step
samples the same prompts as every other side's (one seed): the steps' work differs only as the sides' draws diverge."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOWN = ("samples_s", "rollout_s", "update_s", "eval_rows_s", "job_min")


def worker(job: list[str], threads: int) -> None:
    """Read a step count per line from stdin; run that many steps, then one evaluation; print their timings."""
    import torch

    from experiments.common import compose_job, register_configs
    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.held_out import held_out_rows
    from grpo_lab.train.trainer import Trainer

    torch.set_num_threads(threads)
    register_configs()
    with tempfile.TemporaryDirectory() as out:
        cfg = compose_job("train", [*job, f"out_dir={out}", "checkpoint_every=1000000000"])
        budget = cfg.max_samples  # the job's own, for the whole-job estimate; the timed steps run past it
        cfg.max_samples, cfg.max_steps = None, 10**9
        trainer = Trainer(cfg, RunRecord(Path(out), cfg.seed))
        for line in sys.stdin:
            rows = [trainer.step() for _ in range(int(line))]
            t0 = time.perf_counter()
            evaluated, _ = held_out_rows(trainer, trainer.last_step)  # sampled anew: the policy moved
            t_eval = time.perf_counter() - t0
            samples = sum(r["samples"] for r in rows)
            print(json.dumps({"samples_s": samples / sum(r["t_total"] for r in rows),
                              "rollout_s": sum(r["t_rollout"] for r in rows) / samples,
                              "update_s": sum(r["t_update"] for r in rows) / samples,
                              "eval_rows_s": len(evaluated) / t_eval, "eval_rows": len(evaluated),
                              "budget": budget}), flush=True)
        trainer.scorer.close()


def start(tree: Path, job: list[str], threads: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    return subprocess.Popen([sys.executable, __file__, "--worker", "--threads", str(threads), "--job", shlex.join(job)],
                            env=env, text=True, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def block(proc: subprocess.Popen, steps: int) -> dict:
    proc.stdin.write(f"{steps}\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"a worker stopped (exit {proc.wait()}): its error is above")
    return json.loads(line)


def machine() -> str:
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    has = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return f"{os.cpu_count()} CPUs, flags {' '.join(has) or 'none of avx2/avx512'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", action="append", default=[], help='"NAME [OVERRIDE ...]", repeatable')
    parser.add_argument("--baseline", type=Path, help="a copy of the code to run the job on as it is")
    parser.add_argument("--baseline-side", action="append", default=[], help='"NAME [OVERRIDE ...]" on the baseline')
    parser.add_argument("--tree", nargs=2, action="append", default=[], metavar=("NAME", "DIR"),
                        help="one more side: the job as it is on the code in DIR (repeatable)")
    parser.add_argument("--job", default="experiment=gym_curricula arm=grpo seed=0", help="the job's overrides")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="whole steps a block, before its evaluation")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--evals", type=int, default=7, help="evaluations a job, for the whole-job estimate (7: "
                        "gym_curricula's fixed-stream jobs: base, end, every 20 updates, every 5,000 tokens)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    job = shlex.split(args.job)
    if args.worker:
        worker(job, args.threads)
        return
    sides = {}
    for tree, specs in ((args.baseline, ["baseline", *args.baseline_side]), (ROOT, args.side or ["'this tree'"])):
        for spec in specs if tree else []:
            name, *extra = shlex.split(spec)
            sides[name] = (tree.resolve(), [*job, *extra])
    sides.update({name: (Path(tree).resolve(), job) for name, tree in args.tree})
    procs = {name: start(tree, side_job, args.threads) for name, (tree, side_job) in sides.items()}
    results: dict[str, list[dict]] = {name: [] for name in procs}
    for proc in procs.values():  # warm-up blocks, not counted
        block(proc, args.steps)
    loads = []
    for _ in range(args.blocks):
        for name, proc in procs.items():
            r = block(proc, args.steps)  # the whole job: its sample budget at this rate, and its evaluations
            r["job_min"] = ((r["budget"] or 0) / r["samples_s"] + args.evals * r["eval_rows"] / r["eval_rows_s"]) / 60
            results[name].append(r)
            loads.append(os.getloadavg()[0])
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    print(f"job: {args.job}; {args.blocks} blocks of {args.steps} steps and one evaluation a side, {args.threads} "
          f"thread(s); {machine()}; highest 1-minute load while timed {max(loads):.2f}")
    first = next(iter(results))
    print("| side | overrides | samples/s (steps) | rollout s/sample | update s/sample | eval rows/s | job, min | "
          "x first: steps | x first: eval | x first: job |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in SHOWN}
        span = {k: f"{med[k]:.3g} ({min(r[k] for r in rs):.3g}-{max(r[k] for r in rs):.3g})" for k in SHOWN}
        ratio = {k: statistics.median(r[k] for r in rs) / statistics.median(r[k] for r in results[first])
                 for k in ("samples_s", "eval_rows_s")}
        ratio["job"] = statistics.median(r["job_min"] for r in results[first]) / med["job_min"]  # speed, not time
        extra = " ".join(sides[name][1][len(job):]) or "(none)"
        print(f"| {name} | {extra} | {span['samples_s']} | {span['rollout_s']} | {span['update_s']} | "
              f"{span['eval_rows_s']} | {span['job_min']} | {ratio['samples_s']:.2f} | {ratio['eval_rows_s']:.2f} | "
              f"{ratio['job']:.2f} |")


if __name__ == "__main__":
    main()
