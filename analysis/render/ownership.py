"""Which folder a report may be written into, and which of its files are a build's own.

A build writes only into a folder that is absent, empty, or a report this tool wrote, which it proves: the
marker every build writes beside its pages (`.grpo-lab-report`, JSON: what wrote it and every file it wrote),
or, for a report of a version before the marker, its shape (a REPORT.md titled as the report titles it, every
figure and CSV linked from its pages, at most a packed sweep beside them in `data/`). Anything else is refused
in one line (`ReportNotWritable`) before the build starts, and again just before the swap, with nothing
touched: a folder of other files, a file, a symbolic link, a folder it cannot write, and any folder that is,
is inside or holds a run (a run's record or its writer's lock anywhere under it: swapping that folder would cut
a running job's files out from under it), but a run's own `report/` folder (the default) and a packed sweep (`data/`:
records and one part per table, which no job writes). When a marked report is rebuilt, only the files its
marker lists are replaced; whatever else is in the folder is the user's and is kept (`render.writer`)."""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NoReturn

from analysis.folders import LOCK, RUN_SIGNS, holds_a_record, run_above, run_sign

REPORT = "REPORT.md"  # the page a reader opens: the findings, the figures that carry them, short tables
DETAILS = "DETAILS.md"  # the second page, linked from the first: provenance, every test, the longer sections
VIEWER = "viewer.html"  # every group on one page, where the build was asked for it (`--viewer`)
OWN = (REPORT, DETAILS, VIEWER, "figures/*.png", "tables/*.csv")  # what a build writes; nothing else is its own
MARKER = ".grpo-lab-report"
WRITTEN_BY = "python -m analysis"
TITLES = {REPORT: "# Report: ", DETAILS: "# Details: "}  # each page's first line, as a build writes it

# what `analysis.pack` writes: a sweep folder of each job's records and one part per table
PACKED_TABLES = ("groups", "steps", "eval", "completions")
PACKED_RECORDS = ("run.json", "status.json", "config.json", ".hydra/config.yaml", ".hydra/hydra.yaml",
                  ".hydra/overrides.yaml")
PACKED_SWEEP_RECORDS = ("multirun.yaml",)
PACKED_PART = "part-000000.parquet"
PACKED_DATA = "data"  # where a packed report keeps it


class ReportNotWritable(OSError):
    """The report's folder cannot be written, or is not this tool's to write; the message is one line that
    says how to choose another."""


def is_own_name(relative: str) -> bool:
    """Whether a path relative to the report's folder is one a build writes (`OWN`: exactly, no deeper)."""
    parts = relative.split("/")
    return any(len(parts) == len(p.split("/")) and all(map(fnmatchcase, parts, p.split("/"))) for p in OWN)


def is_marker(relative: str) -> bool:
    """The marker, or a temporary of it (`.grpo-lab-report.<pid>.tmp`, left by a build killed while settling it):
    never carried over as the user's."""
    return relative == MARKER or ("/" not in relative and relative.startswith(f"{MARKER}.") and
                                  relative.endswith(".tmp"))


def marker_text(files: Iterable[str], building: dict | None = None) -> str:
    """The marker's contents: what wrote the folder and the files it wrote, sorted (the same build, the same
    bytes: a committed report's marker changes only with its files); while a build is under way, `building`:
    its process ({"pid", "host"}), so that only a build of this host that is gone has its folder removed."""
    return json.dumps({"written_by": WRITTEN_BY, "files": sorted(files), **({"building": building} if building
                                                                            else {})}, indent=1) + "\n"


def left_by_a_gone_build(folder: Path) -> bool:
    """Whether a build folder's marker names a build of this host whose process is gone (a build of another
    host, on a shared filesystem, may be running: never removed from here)."""
    try:
        building = json.loads((folder / MARKER).read_text()).get("building") or {}
        pid, host = building.get("pid"), building.get("host")
    except (OSError, ValueError, AttributeError):
        return False
    if host != platform.node() or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):  # another user's process: alive
        return False
    return False


def marked_files(folder: Path) -> frozenset[str] | None:
    """The files the marker in `folder` lists, or None where it holds no marker (or one this tool did not
    write: not JSON, another writer, a file that is not one a build writes)."""
    try:
        data = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) and data.get("written_by") == WRITTEN_BY else None
    if not isinstance(files, list) or not all(isinstance(f, str) and is_own_name(f) for f in files):
        return None
    return frozenset(files)


def claim(out: Path) -> frozenset[str]:
    """The files of `out` a previous build wrote (none where `out` is absent or empty), or ReportNotWritable
    (one line) where `out` is not a folder a report may be written into, or cannot be read to tell."""
    try:
        return _claim(out)
    except ReportNotWritable:
        raise
    except OSError as err:
        _refuse(out, f"{err.filename or out} cannot be read ({err.strerror or err}), so it cannot be told to be "
                     "a report's: choose another folder with --out")


def _claim(out: Path) -> frozenset[str]:
    _not_in_a_run(out)
    if out.is_symlink():
        _refuse(out, f"a symbolic link (to {os.readlink(out)}): a report is written into a folder, never through a "
                     "link; give --out the folder itself, or a new one")
    if not out.exists():
        return frozenset()
    if not out.is_dir():
        _refuse(out, "a file, not a folder: --out names the report's folder (a new or empty one, or a report "
                     "built before)")
    if sign := run_sign(out):
        _refuse(out, f"a run folder (its {sign}): a report swaps its folder whole; a run's report goes in "
                     f"{out / 'report'} (the default)")
    entries = sorted(os.listdir(out))
    if runs := [name for name in entries if (out / name).is_dir() and not (out / name).is_symlink()
                and run_sign(out / name)]:
        _refuse(out, f"holds runs ({_names(runs)}): a report swaps its folder whole, which would cut their files "
                     f"out from under a job; a sweep's report goes in {out / 'report'} (the default)")
    if not entries:
        return frozenset()
    own = marked_files(out)
    if own is None:
        if (out / MARKER).exists():
            _refuse(out, f"its {MARKER} is not one this tool wrote (every build writes it, listing its files): "
                         "choose a new or empty folder with --out")
        own, foreign = _earlier_report(out, entries)
        if foreign:
            _refuse(out, f"holds files a report does not write ({_names(sorted(foreign), 5)}), and no {MARKER} "
                         "saying a report was built here: a report goes into a new or empty folder, or one a report "
                         "was built in; choose another with --out")
    if found := _run_below(out):
        _refuse(out, f"holds a run at {found}: a report swaps its folder whole, which would cut a job's files "
                     "out from under it; choose a folder that holds no run with --out")
    return own


def is_packed(folder: Path) -> bool:
    """Whether `folder` is a sweep `analysis.pack` wrote: its records (`multirun.yaml`) and, per job, the
    job's records and one part per table, nothing else (no lock, no checkpoint, no second part, no link):
    data at rest, which no job writes."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    job_files = {*PACKED_RECORDS, *(f"{t}/{PACKED_PART}" for t in PACKED_TABLES)}
    unread: list[OSError] = []
    for at, folders, files in os.walk(folder, onerror=unread.append):
        here = Path(at)
        for name in folders + files:
            path = here / name
            parts = path.relative_to(folder).parts
            if path.is_symlink():
                return False
            if name in files and not (parts[0] in PACKED_SWEEP_RECORDS if len(parts) == 1
                                      else "/".join(parts[1:]) in job_files):
                return False
    return not unread  # a folder it cannot list may hold anything


# the line every build ends REPORT.md with, linking the second page
BUILT_LINE = f"\nMore in [{DETAILS}]({DETAILS}): "


def _built(out: Path) -> bool:
    """Whether `out`'s pages are a build's: REPORT.md and DETAILS.md, each titled as a build titles it, and
    REPORT.md ending in the line a build writes to link the second page."""
    try:
        pages = {name: (out / name).read_text(errors="replace") for name in TITLES}
    except OSError:
        return False
    return all(text.startswith(TITLES[name]) for name, text in pages.items()) and BUILT_LINE in pages[REPORT]


def _earlier_report(out: Path, entries: list[str]) -> tuple[frozenset[str], list[str]]:
    """(own, foreign) for a folder without a marker: the files of a report built before the marker existed
    (its pages, each titled as a build titles it; its figures and CSVs, each linked from a page), and the
    entries that are not: anything else, but a packed sweep in `data/`."""
    own, foreign = set(), []
    pages = ""
    for name in entries:
        path = out / name
        if name in TITLES and path.is_file() and not path.is_symlink():
            text = path.read_text(errors="replace")
            if text.startswith(TITLES[name]):
                own.add(name)
                pages += text
                continue
        if name == PACKED_DATA and is_packed(path):
            continue
        if name not in ("figures", "tables") or path.is_symlink() or not path.is_dir():
            foreign.append(name)
    if own and not _built(out):  # a page titled as a report's is not enough: a person may title one so
        return frozenset(), sorted(own | set(foreign))
    linked = set(re.findall(r"\]\(([^)\s#]+)\)", pages))
    for folder in ("figures", "tables"):
        if folder in entries and folder not in foreign:
            for name in sorted(os.listdir(out / folder)):
                relative = f"{folder}/{name}"
                path = out / relative
                if relative in linked and is_own_name(relative) and path.is_file() and not path.is_symlink():
                    own.add(relative)
                else:
                    foreign.append(relative)
    return frozenset(own), foreign


def _not_in_a_run(out: Path) -> None:
    """Refuse a folder inside a run (a folder above it holds a run's record or lock), but that run's `report/`
    (the default where a run's report goes: beside its files, never over them)."""
    if found := run_above(out):
        above, sign = found
        if out.resolve() != above / "report":
            _refuse(out, f"inside the run folder {above} (its {sign}): a run's report goes in "
                         f"{above / 'report'} (the default), or in a folder outside the run")


def _run_below(out: Path) -> str | None:
    """The first folder under `out` holding a run's record or lock (a packed sweep in `data/` aside), as a
    path relative to `out`; None where there is none."""
    def unreadable(err: OSError) -> None:
        _refuse(out, f"{err.filename} cannot be read ({err.strerror or err}), so it cannot be told to hold no run")

    for at, folders, files in os.walk(out, onerror=unreadable):
        here = Path(at)
        if here == out and PACKED_DATA in folders and is_packed(out / PACKED_DATA):
            folders.remove(PACKED_DATA)
        if sign := next((s for s in RUN_SIGNS if s in files and (s != LOCK or holds_a_record(here / s))), None):
            return (here.relative_to(out) / sign).as_posix()
    return None


def _names(names: list[str], shown: int = 3) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _refuse(out: Path, why: str) -> NoReturn:
    raise ReportNotWritable(f"cannot write the report in {out}: {why}")
