"""The report's files: each section's CSVs (`tables/<name>.csv`) and figures (`figures/<name>.png`),
collected while the section writes its markdown (`Files`), then written under the report's folder
beside REPORT.md: built in a folder beside the old report and swapped in whole (`start_build`,
`finish_build`), only into a folder that is the report's to write (`render.ownership`)."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pandas as pd

from analysis import scheduler
from analysis.render import markdown
from analysis.render.ownership import (
    DETAILS,
    MARKER,
    REPORT,
    VIEWER,
    ReportNotWritable,
    claim,
    is_marker,
    is_own_name,
    left_by_a_gone_build,
    marked_files,
    marker_text,
)
from analysis.view.page import is_viewer_page

__all__ = ["DETAILS", "REPORT", "Files", "ReportNotWritable", "finish_build", "relative", "relative_paths",
           "start_build", "write_report"]
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

    def table(self, name: str, frame: pd.DataFrame, shown: Sequence[str] | None = None,
              figures: Sequence[str] = ()) -> str:
        """Record the CSV; return the frame (its `shown` columns) as markdown, with the link; one line in place of
        the table where every one of its `figures` is 0 (`markdown.table_unless_zero`)."""
        text = markdown.table_unless_zero(frame, figures, frame if shown is None else frame[list(shown)])
        return f"{text}\n\nAs CSV: {self.csv(name, frame)}"

    def figure(self, name: str, draw: Callable[..., Path], data: object, **options: object) -> str:
        """Record `figures/<name>.png`, drawn by `draw(data, path, **options)` (a module-level function:
        where the build has a second process, `analysis.scheduler`, it starts drawing there now); return the
        image link. `draw` must be `canvas.styled`: unstyled, it would draw in whatever fonts the process
        happens to have (matplotlib's defaults in the second process, another figure's mid-way in a thread)."""
        if not getattr(draw, "styled", False):
            raise TypeError(f"figure {name}: {getattr(draw, '__qualname__', draw)} is not @styled (render.canvas)")
        self.figures[name] = partial(draw, data, **options)
        second = scheduler.active()
        if second is not None:
            second.start(name, self.figures[name])
        return f"![{name}](figures/{name}.png)"


def start_build(out: Path, source: Path) -> Path:
    """A new folder beside `out` to build the report in (`.<name>.tmp-<pid>-<random>`, holding the build's
    marker from the start), after removing those that builds no longer running left (each proven a build's by
    its marker);
    ReportNotWritable (one line) where `out` is not a folder a report may be written into (`ownership.claim`)
    or the folder cannot be made. Nothing is touched before `out` is checked."""
    claim(out)
    try:
        if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):  # a folder made read-only: never replaced
            code = errno.EROFS if os.statvfs(out).f_flag & os.ST_RDONLY else errno.EACCES
            raise OSError(code, os.strerror(code))
        out.parent.mkdir(parents=True, exist_ok=True)
        prefix = f".{out.name}.tmp-"
        for left in out.parent.glob(f"{prefix}*"):
            if marked_files(left) is not None and left_by_a_gone_build(left):
                _remove(left)
        while True:  # a name of its own: two builds of one process (two threads) never share one
            building = out.parent / f"{prefix}{os.getpid()}-{secrets.token_hex(3)}"
            try:
                building.mkdir()
                break
            except FileExistsError:
                continue
        (building / MARKER).write_text(marker_text((), {"pid": os.getpid(), "host": platform.node()}))
    except OSError as err:
        raise ReportNotWritable(
            f"cannot write the report in {out} ({err.strerror or err}): choose a folder you can write with --out, "
            f"e.g. python -m analysis {source} --out /tmp/{source.resolve().name}-report") from None
    return building


def finish_build(building: Path, out: Path) -> None:
    """Put the report built in `building` in place of `out` whole. `out` is checked again (`ownership.claim`:
    ReportNotWritable, nothing touched, where it is no longer a folder a report may be written into); the
    marker is written listing the build's files; everything in `out` that its marker does not list as a
    build's (notes, data beside a report: the user's) is carried over (hard links; links as links, folders
    with their modes, `out`'s own mode too), then the two folders are swapped in one step (renameat2's
    RENAME_EXCHANGE where the system has it, else two renames a moment apart), so a build killed at any point
    leaves the old report or the new one, never a mix (without renameat2, not on Linux, a kill between the two
    renames leaves the old report whole in `.<name>.old-<pid>-...` and no `out`). Anything that appeared in
    `out` between the carrying and the swap is moved into the new folder before the old one is removed."""
    files = [f for f in sorted(p.relative_to(building).as_posix() for p in building.rglob("*") if p.is_file())
             if is_own_name(f)]
    # the build's process stays named until the swap: a build killed at the swap leaves a folder that the next
    # build can prove is a gone build's; in place, the marker lists the files alone (`_settle`)
    (building / MARKER).write_text(marker_text(files, {"pid": os.getpid(), "host": platform.node()}))
    for _ in range(5):  # another build may put its report in place between the check and the swap: check again
        own = claim(out)
        if not os.path.lexists(out):
            try:
                _put(building, out)
                _settle(out, files)
                return
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                continue
        modes = _carry(out, building, own)
        for path, mode in reversed(modes):  # deepest first, after every file is in: a folder may be read-only
            os.chmod(path, mode)
        if _exchange(building, out):
            old = building
        else:
            old = building.with_name(building.name.replace(".tmp-", ".old-", 1))
            out.rename(old)
            building.rename(out)
        _settle(out, files)
        _move_late(old, out, own | (marked_files(old) or frozenset()))
        _remove(old)
        return
    raise ReportNotWritable(f"cannot write the report in {out}: other builds kept replacing it; build it again")


def _settle(out: Path, files: list[str]) -> None:
    """The marker of a report in place: the files its build wrote, no process (the same build, the same bytes),
    replaced in one step."""
    tmp = out / f"{MARKER}.{os.getpid()}.tmp"
    tmp.write_text(marker_text(files))
    os.replace(tmp, out / MARKER)


def _carry(out: Path, building: Path, own: frozenset[str]) -> list[tuple[Path, int]]:
    """Put in `building` everything in `out` but the files `own` names (a build's, which the new build
    replaces) and its marker: files as hard links (the data a packed report ships beside it costs no copy;
    a copy where a link cannot be made), links as links, folders made; returns each folder's mode to set
    (`out`'s first). ReportNotWritable (one line, `out` untouched) where something cannot be read or carried,
    or is where the new build wrote a file of its own."""
    modes = [(building, stat.S_IMODE(os.lstat(out).st_mode))]
    for at, folders, files in os.walk(out, onerror=_unreadable(out)):  # a folder it cannot list: never dropped
        here = Path(at)
        for name in folders + files:
            source = here / name
            relative = source.relative_to(out).as_posix()
            try:
                info = os.lstat(source)
                if is_marker(relative) or (relative in own and stat.S_ISREG(info.st_mode)):
                    continue
                if relative == VIEWER and (building / VIEWER).exists() and is_viewer_page(source):
                    continue  # a page `python -m analysis.view` wrote here: a `--viewer` build writes it anew
                mode = _carry_one(source, building / relative, info)
            except FileExistsError:
                raise ReportNotWritable(f"cannot write the report in {out}: {relative} there is not the report's own "
                                        "file, and the new report writes one of that name; move it away and build "
                                        "again") from None
            except OSError as err:
                raise ReportNotWritable(f"cannot write the report in {out}: {relative} there cannot be carried over "
                                        f"({err.strerror or err}); a rebuild keeps everything beside the report: "
                                        "make it readable, or move it away") from None
            if mode is not None:
                modes.append(mode)
    return modes


def _carry_one(source: Path, target: Path, info: os.stat_result) -> tuple[Path, int] | None:
    """One entry of the old folder into the new one; a folder's (path, mode) to set once all is in."""
    if stat.S_ISDIR(info.st_mode):
        if not target.exists():
            target.mkdir()
        if target.is_dir() and not target.is_symlink():
            return target, stat.S_IMODE(info.st_mode)
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "the new report writes a file of that name", str(target))
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), target)
        return None
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        if not stat.S_ISREG(info.st_mode):
            raise
        shutil.copy2(source, target)
    return None


def _unreadable(out: Path) -> Callable[[OSError], None]:
    def refuse(err: OSError) -> None:
        raise ReportNotWritable(f"cannot write the report in {out}: {err.filename} cannot be read "
                                f"({err.strerror or err}); a rebuild keeps everything beside the report: make it "
                                "readable, or move it away")
    return refuse


def _move_late(old: Path, out: Path, own: frozenset[str]) -> None:
    """Move into `out` whatever `old` (the folder swapped out) holds that is neither a build's own nor already
    in `out`: a file written into the old folder after the carrying began. Where one cannot be moved, `old` is
    kept, its marker taken out (no later build takes it for a build's leftover): ReportNotWritable naming it."""
    try:
        for at, folders, files in os.walk(old, onerror=_unreadable(old)):
            here = Path(at)
            for name in [*folders, *files]:
                source = here / name
                relative = source.relative_to(old).as_posix()
                if is_marker(relative) or relative in own or os.path.lexists(out / relative):
                    continue
                os.rename(source, out / relative)
                if name in folders:
                    folders.remove(name)
    except OSError as err:
        (old / MARKER).unlink(missing_ok=True)
        raise ReportNotWritable(f"the report is in {out}, but what was written beside the old one while it was "
                                f"swapped could not be moved into it ({err.strerror or err}): it is kept in "
                                f"{old}") from None


def _put(building: Path, out: Path) -> None:
    """Rename `building` to `out`, which must not exist (renameat2's RENAME_NOREPLACE where the system has it:
    another build's report that appeared meanwhile is never replaced unseen)."""
    if not _rename2(building, out, 1):  # RENAME_NOREPLACE
        if os.path.lexists(out):
            raise FileExistsError(errno.EEXIST, "exists", str(out))
        building.rename(out)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 with RENAME_EXCHANGE); False where it is not available."""
    return _rename2(a, b, 2)


def _rename2(a: Path, b: Path, flags: int) -> bool:
    """renameat2(a, b, flags): True when done, False where the system lacks it; OSError for any other failure."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd = -100  # AT_FDCWD
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _remove(folder: Path) -> None:
    """Remove a folder of this tool's (a build's, or the report it swapped out), read-only folders in it too."""
    def writable(function: Callable, path: str, _: object) -> None:
        parent = os.path.dirname(path)
        try:
            os.chmod(parent, stat.S_IMODE(os.lstat(parent).st_mode) | stat.S_IWUSR | stat.S_IXUSR)
            function(path)
        except FileNotFoundError:  # gone already
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=writable)
    else:
        shutil.rmtree(folder, onerror=writable)


def write_report(out: Path, texts: Sequence[str], files: Sequence[Files], root: Path, shown_at: Path | None = None,
                 details: Sequence[str] = ()) -> Path:
    """Write every CSV and figure of `files`, REPORT.md (the texts, in order) and, where there are `details`,
    DETAILS.md (the second page, linked from the first), with `root`'s absolute path made relative to
    `shown_at`, where the report will be read (`out` by default), under `out`; returns REPORT.md's path.
    Figures the build's second process has claimed (`analysis.scheduler`) are waited for, not drawn again."""
    second = scheduler.active()
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
