"""`python -m analysis <run_or_sweep_dir> [more ...] [--out DIR]`: build the report of one directory, or one
report over several, and print where it is."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis.data.load import NoRunsError
from analysis.data.select import SelectionError
from analysis.measures.published import PublishedUnreadable
from analysis.measures.transfer import ReferenceUnreadable
from analysis.render.writer import ReportNotWritable
from analysis.report import build_report


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    parser.add_argument("path", nargs="+", help="a run directory or a Hydra sweep (multirun) directory; several "
                        "give one report over all their jobs (a run found twice counts once)")
    parser.add_argument("--out", help="the report's folder (default: <path>/report; required with several): a new or "
                        "empty folder, or one a report was built in (its .grpo-lab-report lists the files a rebuild "
                        "replaces; anything else in it is kept); never a folder that is, is inside or holds a run")
    parser.add_argument("--command", help="the command that produced the runs, to quote in the report")
    parser.add_argument("--by", help="the config keys that tell arms apart, comma-separated (default: every key "
                        "that varies but the seed; never the seed: seeds are the replicates arms are compared across)")
    parser.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                        help="keep only the jobs with this value of a config key (repeat: values of one key are "
                        "alternatives, different keys must all hold: --where sampler=fixed --where sampler=band "
                        "--where seed=0 keeps both samplers' seed 0)")
    parser.add_argument("--baseline", metavar="KEY=VALUE", help="the arm every difference is taken against (a value "
                        "of an arm key)")
    parser.add_argument("--against", metavar="REPORT", help="a report folder (with tables/tests.csv) whose resolved "
                        "orderings of two arms are read in this study, pair by pair (default: the one the sweep's "
                        "experiment names in hydra.callbacks.report.against)")
    parser.add_argument("--published", metavar="FILE", help="a published table of arms (a YAML file, e.g. "
                        "analysis/published/marin_8765.yaml) read beside this study: each arm's difference from its "
                        "baseline there and here (default: the one the sweep's experiment names in "
                        "hydra.callbacks.report.published)")
    parser.add_argument("--viewer", action="store_true", help="also write every group on one page beside the report "
                        "(viewer.html, linked from REPORT.md: python -m analysis.view writes it alone)")
    args = parser.parse_args(argv)
    for path in map(Path, args.path):
        if not path.is_dir():
            print(f"error: {path}: no such directory", file=sys.stderr)
            return 2
    if len(args.path) > 1 and not args.out:
        print(f"error: {len(args.path)} sources: say where their report goes with --out DIR", file=sys.stderr)
        return 2
    try:
        by = [k.strip() for k in args.by.split(",") if k.strip()] if args.by else []
        print(build_report(args.path if len(args.path) > 1 else args.path[0], args.out, args.command, by,
                           args.where, args.baseline, args.against, args.viewer, args.published))
    # no runs, a folder not its own, a choice, a reference or published table that cannot be read: one line
    except (NoRunsError, ReportNotWritable, SelectionError, ReferenceUnreadable, PublishedUnreadable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
