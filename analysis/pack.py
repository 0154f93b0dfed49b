"""`python -m analysis.pack SWEEP REPORT_DIR`: a report that ships its data.

Copies what the report is built from into `REPORT_DIR/data/`, itself a sweep folder: per job its run.json,
config.json, Hydra's records (`.hydra/*.yaml`) and each table (groups, steps, eval, completions) as one
zstd parquet part, rows and schema as the job wrote them; no checkpoints, no logs. Then builds the report
from that copy into REPORT_DIR. Anyone can rebuild it from the repository alone, with the plain command

    python -m analysis REPORT_DIR/data --out REPORT_DIR

and get the same report (the test suite rebuilds a committed one and compares).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.data.config import launch_command
from analysis.data.load import find_jobs
from analysis.report import build_report

TABLES = ("groups", "steps", "eval", "completions")
RECORDS = ("run.json", "status.json", "config.json", ".hydra/config.yaml", ".hydra/hydra.yaml",
           ".hydra/overrides.yaml")
SWEEP_RECORDS = ("multirun.yaml",)
ZSTD_LEVEL = 19  # packed once, read many times: the smallest files are worth the slow write
PART = "part-000000.parquet"


def pack(sweep: str | Path, data: str | Path) -> Path:
    """Copy `sweep`'s records and tables into `data` (a new folder), one parquet part per table per job, the
    parts concatenated in the order the analysis reads them. Returns `data`."""
    sweep, data = Path(sweep), Path(data)
    if data.exists():
        raise FileExistsError(f"{data}: already exists (pack writes a new folder; remove it first)")
    jobs = find_jobs(sweep)
    if not jobs:
        raise FileNotFoundError(f"{sweep}: no grpo-lab runs to pack")
    tmp = data.with_name(f".{data.name}.packing")
    shutil.rmtree(tmp, ignore_errors=True)
    for job in jobs:
        target = tmp / (job.relative_to(sweep) if job != sweep else Path(sweep.name))
        for name in RECORDS:
            if (job / name).is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(job / name, target / name)
        for table in TABLES:
            parts = sorted((job / table).glob("part-*.parquet"))
            if parts:
                (target / table).mkdir(parents=True, exist_ok=True)
                whole = pa.concat_tables([pq.read_table(p) for p in parts], promote_options="permissive")
                pq.write_table(whole, target / table / PART, compression="zstd", compression_level=ZSTD_LEVEL)
    for name in SWEEP_RECORDS:
        if (sweep / name).is_file():
            shutil.copyfile(sweep / name, tmp / name)
    tmp.rename(data)  # whole or not at all
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.pack", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="a run or sweep directory")
    parser.add_argument("report_dir", type=Path, help="the report's folder; its data goes to REPORT_DIR/data")
    args = parser.parse_args(argv)
    try:
        data = pack(args.sweep, args.report_dir / "data")
    except (FileExistsError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(build_report(data, args.report_dir, launch_command(args.sweep)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
