"""`python -m analysis.view RUN_OR_SWEEP_OR_REPORT [--out FILE.html] [--max-groups N]`: one HTML file of every group,
opened from disk (no server, no network)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis.data.load import NoRunsError
from analysis.view import MAX_GROUPS, ViewNotWritable, build_view


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.view", description=__doc__)
    parser.add_argument("path", help="a run directory, a Hydra sweep directory, or a report folder with its data/")
    parser.add_argument("--out", help="the HTML file to write (default: viewer.html in the report, run or sweep "
                        "folder); a new file, or a page this viewer wrote")
    parser.add_argument("--max-groups", type=int, default=MAX_GROUPS, metavar="N",
                        help=f"embed every group up to N (default {MAX_GROUPS:,}); above it, whole (step, prompt) "
                        "units by a fixed hash, the page says which")
    args = parser.parse_args(argv)
    if args.max_groups < 1:
        print(f"error: --max-groups {args.max_groups}: must be at least 1", file=sys.stderr)
        return 2
    if not Path(args.path).is_dir():
        print(f"error: {args.path}: no such directory", file=sys.stderr)
        return 2
    try:
        out = build_view(args.path, args.out, args.max_groups)
    except (NoRunsError, ViewNotWritable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"viewer: {out} (open it in a browser: file://{out.resolve()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
