"""The config check before any job starts (experiments.common.compose_jobs) against composing every job on its
own (compose_each_job, the plain way it is tested against), side by side, interleaved, in one process.

    python benchmarks/preflight.py [--reps 5]

Every command line of the README's main job waits for this check before its first line; so does each
preflight test. Prints each command's median seconds and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from experiments.common import compose_each_job, compose_jobs, register_configs

COMMANDS = {"main job": ["-m", "experiment=main", "launcher=joblib"], "one run": ["seed=1"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    register_configs()
    compose_jobs("train", ["seed=0"])  # imports and Hydra's plugin scan, outside the timings
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.reps} interleaved repetitions")
    print("| command | jobs checked | compose each (s) | compose_jobs (s) | ratio |")
    print("|---|---|---|---|---|")
    for name, command in COMMANDS.items():
        times: dict[str, list[float]] = {"each": [], "jobs": []}
        for _ in range(args.reps):
            for key, fn in (("each", compose_each_job), ("jobs", compose_jobs)):
                start = time.perf_counter()
                jobs = fn("train", list(command))
                times[key].append(time.perf_counter() - start)
        each, ours = statistics.median(times["each"]), statistics.median(times["jobs"])
        print(f"| {name} (`{' '.join(command)}`) | {len(jobs)} | {each:.2f} | {ours:.2f} | {ours / each:.2f} |")


if __name__ == "__main__":
    main()
