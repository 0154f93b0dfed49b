"""Every group of a run or sweep on one self-contained HTML page: its rewards, advantages and tie, and the prompt and
replies where the run kept them; filters, a tie-rate heatmap per arm, deep links.

    python -m analysis.view RUN_OR_SWEEP_OR_REPORT [--out FILE.html] [--max-groups N]

`data` gathers what the page shows (a deterministic sample of a sweep too large to embed whole, said on the page);
`page` writes it into one file that opens from disk with no server and no network.
"""

from __future__ import annotations

from pathlib import Path

from analysis.view.data import MAX_GROUPS, collect, locate
from analysis.view.page import ViewNotWritable, render, writable, write

__all__ = ["MAX_GROUPS", "ViewNotWritable", "build_view", "default_out"]


def default_out(path: Path) -> Path:
    """Where the page goes unless told: `viewer.html` in the report folder, or in the run or sweep folder."""
    source = locate(path)
    return (source.report or source.runs) / "viewer.html"


def build_view(path: str | Path, out: str | Path | None = None, max_groups: int = MAX_GROUPS) -> Path:
    """Write the viewer of the run, sweep or report at `path` to `out`; returns `out`."""
    path = Path(path)
    out = Path(out) if out is not None else default_out(path)
    writable(out)  # before reading a million groups: a path not the viewer's is one line at once
    return write(out, render(collect(path, max_groups)))
