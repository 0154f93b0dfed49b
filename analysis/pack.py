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
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.data.config import launch_command
from analysis.data.load import NoRunsError, find_jobs
from analysis.data.select import SelectionError
from analysis.render.ownership import (
    PACKED_DATA,
    PACKED_PART,
    PACKED_RECORDS,
    PACKED_SWEEP_RECORDS,
    PACKED_TABLES,
    ReportNotWritable,
    claim,
)
from analysis.report import build_report

TABLES = PACKED_TABLES
RECORDS = PACKED_RECORDS
SWEEP_RECORDS = PACKED_SWEEP_RECORDS
ZSTD_LEVEL = 19  # packed once, read many times: the smallest files are worth the slow write
PART = PACKED_PART


class CannotPack(ValueError):
    """A part or record that cannot be packed (unreadable, truncated, of another schema); one line naming it."""


def pack(sweep: str | Path, data: str | Path) -> Path:
    """Copy `sweep`'s records and tables into `data` (a new folder), one parquet part per table per job, the
    parts concatenated in the order the analysis reads them. Returns `data`. Written in a folder beside `data`
    of this call's own and renamed into place whole: a pack that fails (CannotPack: a part that cannot be read,
    named in one line) or is killed leaves no `data` and, where it could run its cleanup, nothing else."""
    sweep, data = Path(sweep), Path(data)
    if os.path.lexists(data):
        raise FileExistsError(f"{data}: already exists (pack writes a new folder; remove it first)")
    jobs = find_jobs(sweep)
    if not jobs:
        raise FileNotFoundError(f"{sweep}: no grpo-lab runs to pack")
    data.parent.mkdir(parents=True, exist_ok=True)
    tmp = data.with_name(f".{data.name}.packing-{os.getpid()}")
    tmp.mkdir()
    try:
        for job in jobs:
            _pack_job(job, tmp / (job.relative_to(sweep) if job != sweep else Path(sweep.name)))
        for name in SWEEP_RECORDS:
            if (sweep / name).is_file():
                shutil.copyfile(sweep / name, tmp / name)
        tmp.rename(data)  # whole or not at all (a `data` made meanwhile is never replaced: it is not empty)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data


def _pack_job(job: Path, target: Path) -> None:
    """One job's records and tables into `target`; CannotPack naming the part that cannot be read."""
    for name in RECORDS:
        if (job / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(job / name, target / name)
    for table in TABLES:
        parts = sorted((job / table).glob("part-*.parquet"))
        if not parts:
            continue
        read = []
        for part in parts:
            try:
                read.append(pq.read_table(part))
            except (OSError, pa.ArrowException) as err:
                raise CannotPack(f"{part}: unreadable ({_first_line(err)}): pack ships whole tables only; move "
                                 "the part out of the run (the report skips it and says so) and pack again") from None
        try:
            whole = pa.concat_tables(read, promote_options="permissive")
        except pa.ArrowException as err:
            raise CannotPack(f"{job / table}: its parts do not join into one table ({_first_line(err)})") from None
        (target / table).mkdir(parents=True, exist_ok=True)
        pq.write_table(whole, target / table / PART, compression="zstd", compression_level=ZSTD_LEVEL)


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.pack", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="a run or sweep directory")
    parser.add_argument("report_dir", type=Path, help="the report's folder (new, empty, or a report built before "
                        "that has no data/ yet); its data goes to REPORT_DIR/data")
    args = parser.parse_args(argv)
    data = args.report_dir / PACKED_DATA
    made, packed = not os.path.lexists(args.report_dir), False
    try:
        if not args.sweep.is_dir():
            raise NoRunsError(f"{args.sweep}: no such directory")
        claim(args.report_dir)  # before anything is written: a folder the report may not be built in is refused
        pack(args.sweep, data)
        packed = True
        print(build_report(data, args.report_dir, launch_command(args.sweep)))
    except BaseException as e:
        if packed:  # packed by this call for this report: no half-made report left
            shutil.rmtree(data, ignore_errors=True)
        if made:
            try:
                args.report_dir.rmdir()  # made by this call too; left where anything else is in it now
            except OSError:
                pass
        if isinstance(e, (FileExistsError, FileNotFoundError, CannotPack, ReportNotWritable, SelectionError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
