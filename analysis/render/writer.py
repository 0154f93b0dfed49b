"""The report's files: each section's CSVs (`tables/<name>.csv`) and figures (`figures/<name>.png`),
collected while the section writes its markdown (`Files`), then written under the report's folder
beside REPORT.md."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pandas as pd

from analysis.render import helper, markdown

Draw = Callable[[Path], Path]  # draws one figure to the given path
REPORT = "REPORT.md"  # the page a reader opens: the findings, the figures that carry them, short tables
DETAILS = "DETAILS.md"  # the second page, linked from the first: provenance, every test, the longer sections


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

    def figure(self, name: str, draw: Callable[..., Path], data: object, **options: object) -> str:
        """Record `figures/<name>.png`, drawn by `draw(data, path, **options)` (a module-level function:
        where the build has a second process, `render.helper`, it starts drawing there now); return the
        image link. `draw` must be `canvas.styled`: unstyled, it would draw in whatever fonts the process
        happens to have (matplotlib's defaults in the second process, another figure's mid-way in a thread)."""
        if not getattr(draw, "styled", False):
            raise TypeError(f"figure {name}: {getattr(draw, '__qualname__', draw)} is not @styled (render.canvas)")
        self.figures[name] = partial(draw, data, **options)
        second = helper.active()
        if second is not None:
            second.start(name, self.figures[name])
        return f"![{name}](figures/{name}.png)"


class ReportNotWritable(OSError):
    """The report's folder cannot be written; the message is one line that says how to choose another."""


OWN = (REPORT, DETAILS, "figures/*.png", "tables/*.csv")  # what a build writes; anything else in the folder is kept


def start_build(out: Path, source: Path) -> Path:
    """A new empty folder beside `out` to build the report in (`.<name>.tmp-<pid>`), after removing
    those that builds no longer running left; ReportNotWritable when it cannot be made."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        for left in out.parent.glob(f".{out.name}.tmp-*"):
            if not _alive(left.name.rpartition("-")[2]):
                shutil.rmtree(left, ignore_errors=True)
        building = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
    except OSError as err:
        raise ReportNotWritable(
            f"cannot write the report in {out} ({err.strerror or err}): choose a folder you can write with --out, "
            f"e.g. python -m analysis {source} --out /tmp/{source.resolve().name}-report") from None
    return building


def finish_build(building: Path, out: Path) -> None:
    """Put the report built in `building` in place of `out` whole: the files of `out` that are not a
    build's own (`OWN`: notes beside a report) are carried over, then the two folders are swapped in
    one step (renameat2's RENAME_EXCHANGE where the system has it, else two renames a moment apart),
    so a build killed at any point leaves the old report or the new one, never a mix."""
    if out.is_dir():
        own = {p for pattern in OWN for p in out.glob(pattern)}
        for path in sorted(out.rglob("*")):
            target = building / path.relative_to(out)
            if path in own or target.exists():
                continue
            if path.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                try:  # a hard link: the data a packed report ships beside it costs no copy
                    os.link(path, target)
                except OSError:
                    shutil.copy2(path, target)
        if _exchange(building, out):
            shutil.rmtree(building)  # now the old report
            return
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
        building.rename(out)
        shutil.rmtree(old)
    else:
        building.rename(out)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 with RENAME_EXCHANGE); False where it is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd, exchange = -100, 2  # AT_FDCWD, RENAME_EXCHANGE
    done = renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), exchange) == 0
    return done


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def write_report(out: Path, texts: Sequence[str], files: Sequence[Files], root: Path, shown_at: Path | None = None,
                 details: Sequence[str] = ()) -> Path:
    """Write every CSV and figure of `files`, REPORT.md (the texts, in order) and, where there are `details`,
    DETAILS.md (the second page, linked from the first), with `root`'s absolute path made relative to
    `shown_at`, where the report will be read (`out` by default), under `out`; returns REPORT.md's path.
    Figures the build's second process has claimed (`render.helper`) are waited for, not drawn again."""
    second = helper.active()
    for found in files:
        for name, frame in found.csvs.items():
            path = out / "tables" / f"{name}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            frame.to_csv(path, index=False)
    figures = {name: draw for found in files for name, draw in found.figures.items()}
    if second is None:
        for name, draw in figures.items():
            draw(out / "figures" / f"{name}.png")
    else:
        second.finish(figures)
    out.mkdir(parents=True, exist_ok=True)
    pages = {REPORT: texts, **({DETAILS: details} if details else {})}
    for name, page in pages.items():
        (out / name).write_text(relative_paths("\n\n".join(page) + "\n", root, shown_at or out))
    return out / REPORT


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
