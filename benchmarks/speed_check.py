"""The three speed goals in one command, at reduced size (7 min 30 s on 2 idle cores, 2026-12-04, with a saved
SmolLM2 folder): run it before you stop when your change touched a hot path (the rollout, the update, the tables,
the report build).

    python benchmarks/speed_check.py [--model-path DIR]   # DIR: SmolLM2 saved with save_pretrained (loads faster)

1. the tiny model against TRL's GRPOTrainer, samples/s (benchmarks/vs_trl.py), at 1 and at 2 threads;
2. SmolLM2-135M-Instruct against TRL, generated tokens/s, both prompt styles (benchmarks/vs_trl.py --model
   smollm2), at 2 threads;
3. the report build against a bare parquet read of the same sweep at size 4 (benchmarks/analysis_speed.py).
Each runs in its own process with its threads set, after a warm-up, in interleaved blocks (benchmarks/protocol.py);
the wall-time ratios (median over blocks, min-max) are printed against the goals of benchmarks/RESULTS.md, with
the machine's CPU and vector units. Exit status 1 where a goal is missed: the full benchmarks, with more blocks,
say by how much (a reduced run's spread is wider)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from protocol import machine  # noqa: E402 - benchmarks/ is a folder of scripts, not a package

# (name, the script's arguments, threads, the line's pattern, the goal: ratio at least / at most)
WALL = r"wall (\d+\.\d+) \((\d+\.\d+)-(\d+\.\d+)\)"


def checks(model_path: str | None) -> list[tuple[str, list[str], int, str, str, float]]:
    smollm2 = ["vs_trl.py", "--model", "smollm2", "--blocks", "2", "--steps-per-block", "2"]
    if model_path:
        smollm2 += ["--model-path", model_path]
    return [
        ("tiny vs TRL, samples/s, 1 thread", ["vs_trl.py", "--blocks", "3", "--steps-per-block", "3"], 1,
         r"ratio \(ours/TRL samples/s\): " + WALL, ">=", 2.5),
        ("tiny vs TRL, samples/s, 2 threads", ["vs_trl.py", "--blocks", "3", "--steps-per-block", "3"], 2,
         r"ratio \(ours/TRL samples/s\): " + WALL, ">=", 2.5),
        ("SmolLM2 vs TRL, tokens/s, short prompts, 2 threads", smollm2, 2,
         r"short: ratio ours/TRL generated tokens/s: " + WALL, ">=", 3.0),
        ("SmolLM2 vs TRL, tokens/s, two-shot prompts, 2 threads", smollm2, 2,
         r"two-shot: ratio ours/TRL generated tokens/s: " + WALL, ">=", 3.0),
        ("report / bare read at size 4", ["analysis_speed.py", "--sizes", "4", "--repeats", "2", "--goal", "1e9"], 2,
         r"^\s+4\s+[\d,]+\s+[\d,]+\s+\S+\s+\S+\s+(\d+\.\d+) \((\d+\.\d+)-(\d+\.\d+)\)", "<=", 3.0),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-path", help="SmolLM2 saved with save_pretrained (else the wheel's GGUF file)")
    args = parser.parse_args()
    print(machine(), flush=True)
    outputs: dict[tuple[str, ...], str] = {}  # one run of a script at a thread count serves every line it prints
    missed = 0
    for name, script, threads, pattern, sense, goal in checks(args.model_path):
        key = (*script, str(threads))
        if key not in outputs:
            start = time.perf_counter()
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            extra = ["--threads", str(threads)] if script[0] == "vs_trl.py" else []
            run = subprocess.run([sys.executable, str(HERE / script[0]), *script[1:], *extra], env=env, text=True,
                                 capture_output=True)
            outputs[key] = run.stdout
            if run.returncode not in (0, 1):  # analysis_speed exits 1 on its own goal; read its table anyway
                print(f"{name}: {script[0]} failed ({run.returncode}): {run.stderr.strip()[-500:]}")
            print(f"  ({' '.join(script)} at {threads} thread(s): {time.perf_counter() - start:.0f} s)", flush=True)
        found = re.search(pattern, outputs[key], re.MULTILINE)
        if found is None:
            print(f"{name}: no ratio in its output")
            missed += 1
            continue
        median, low, high = map(float, found.groups())
        ok = median >= goal if sense == ">=" else median <= goal
        missed += not ok
        print(f"{name}: {median:.2f} ({low:.2f}-{high:.2f}), goal {sense} {goal:g}: {'met' if ok else 'MISSED'}",
              flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
