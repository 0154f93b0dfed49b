"""How fast the report builds on a sweep of about 10 million sample rewards, against bare parquet
reads of the same files (the groups and eval parts the report reads).

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/analysis_speed.py [--dir DIR]

The sweep is synthetic (fixtures.synthetic): 4 samplers x 2 seeds, G = 8, one groups part per
step; eval at 2 checkpoints on 160 prompts with 32 samples each. It is written to a temporary
folder (or to --dir, kept and reused if already there), read once untimed so every timing
starts from a warm page cache, then each contender is timed once.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.report import build_report
from fixtures.synthetic import SAMPLERS, job_config, prompt_pool, write_sweep

STEPS = 200
PROMPTS_PER_STEP = 640  # with resample_on_tie's redraws: about 1.25M groups of 8, 10M rewards


def make_sweep(root: Path) -> None:
    prompts = prompt_pool(per_level=400)
    eval_prompts = prompt_pool(per_level=32, seed=1)
    configs = [job_config(sampler=s, seed=seed, max_steps=STEPS, prompts_per_step=PROMPTS_PER_STEP)
               for s in SAMPLERS for seed in (0, 1)]
    write_sweep(root, configs, prompts, overrides=[f"sampler={','.join(SAMPLERS)}", "seed=0,1"],
                eval_prompts=eval_prompts, eval_n=32)


def timed(label: str, fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    print(f"{label:<58} {seconds:6.2f} s")
    return seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="keep the sweep here (reused when it exists)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or Path(tmp) / "sweep"
        if not (root / "multirun.yaml").exists():
            timed("write the synthetic sweep", lambda: make_sweep(root))
        folders = sorted(p for p in root.glob("*/*") if p.name in ("groups", "eval"))
        files = sorted(f for folder in folders for f in folder.glob("part-*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files if f.parent.name == "groups"])  # warms the page cache
        rewards = sum(len(chunk.values) for chunk in table["rewards"].chunks)
        print(f"{len(files)} parts, {table.num_rows:,} groups, {rewards:,} sample rewards, "
              f"{sum(f.stat().st_size for f in files) / 1e6:.0f} MB; {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
        del table
        arrow, _ = timed("bare read: pq.read_table(folder) per table, to arrow",
                         lambda: [pq.read_table(f) for f in folders])
        frames, _ = timed("bare read: pd.read_parquet(folder) per table, to pandas",
                          lambda: [pd.read_parquet(f) for f in folders])
        fastest, _ = timed("bare read: each part, ParquetFile.read(use_threads=False)",
                           lambda: [pq.ParquetFile(f).read(use_threads=False) for f in files])
        report, path = timed("build_report (load, analyses, 5 figures, markdown, CSV)", lambda: build_report(root))
        print(f"report / arrow read   = {report / arrow:.2f}x")
        print(f"report / pandas read  = {report / frames:.2f}x")
        print(f"report / fastest read = {report / fastest:.2f}x")
        print(f"report at {path}" if args.dir else "")


if __name__ == "__main__":
    main()
