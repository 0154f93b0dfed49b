"""The report's files: each section's CSVs (`tables/<name>.csv`) and figures (`figures/<name>.png`),
collected while the section writes its markdown (`Files`), then written under the report's folder
beside REPORT.md."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.render import markdown

Draw = Callable[[Path], Path]  # draws one figure to the given path


@dataclass
class Files:
    """The CSVs and figures one section links to. Each method records its file and returns the
    markdown that shows or links it; nothing is written until `write_report`."""

    csvs: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Draw] = field(default_factory=dict)

    def csv(self, name: str, frame: pd.DataFrame) -> str:
        """Record `tables/<name>.csv`; return a link to it."""
        self.csvs[name] = frame
        return f"[tables/{name}.csv](tables/{name}.csv) ({len(frame)} rows)"

    def table(self, name: str, frame: pd.DataFrame, shown: Sequence[str] | None = None) -> str:
        """Record the CSV; return the frame (its `shown` columns) as markdown, with the link."""
        return f"{markdown.table(frame if shown is None else frame[list(shown)])}\n\nAs CSV: {self.csv(name, frame)}"

    def figure(self, name: str, draw: Draw) -> str:
        """Record `figures/<name>.png`, drawn by `draw(path)`; return the image link."""
        self.figures[name] = draw
        return f"![{name}](figures/{name}.png)"


def clear(out: Path) -> None:
    """Remove the figures and CSVs of an earlier build: one this build does not make would otherwise
    outlive its data."""
    for old in (*out.glob("figures/*.png"), *out.glob("tables/*.csv")):
        old.unlink()


def write_report(out: Path, texts: Sequence[str], files: Sequence[Files], root: Path) -> Path:
    """Write every CSV and figure of `files` and REPORT.md (the texts, in order, with `root`'s
    absolute path made relative to `out`); returns REPORT.md's path."""
    for found in files:
        for name, frame in found.csvs.items():
            path = out / "tables" / f"{name}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            frame.to_csv(path, index=False)
        for name, draw in found.figures.items():
            draw(out / "figures" / f"{name}.png")
    report = out / "REPORT.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(relative_paths("\n\n".join(texts) + "\n", root, out))
    return report


def relative(path: str | Path, report_dir: Path) -> str:
    """`path` as seen from the report's folder."""
    return Path(os.path.relpath(Path(path).resolve(), report_dir.resolve())).as_posix()


def relative_paths(text: str, root: Path, out: Path) -> str:
    """The report's text with the sweep's absolute path (as given and resolved) replaced by its path
    relative to the report, so no machine's folders are named (error messages quote them)."""
    for absolute in sorted({str(root.absolute()), str(root.resolve())}, key=len, reverse=True):
        # only where the path starts: a relative path that ends with it ("../../tmp/x") is left alone
        text = re.sub(r"(?<![\w./-])" + re.escape(absolute), lambda _: relative(root, out), text)
    return text
