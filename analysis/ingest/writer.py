"""An ingested run on disk, in DESIGN.md's run layout (run.json, config.json, groups/ steps/ eval/ parts), written
only where it is the ingest's to write: a new or empty folder, or one an earlier ingest wrote (its marker,
`.grpo-lab-ingest`, lists every file it wrote; only those are replaced, anything else, a report built there for
one, is kept). Everything is written to a folder beside the target first, so a failed ingest leaves what was there."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.folders import run_above
from analysis.ingest.logs import IngestError

MARKER = ".grpo-lab-ingest"
WRITTEN_BY = "python -m analysis.ingest"


def owned_files(out: Path) -> list[str] | None:
    """The files an earlier ingest wrote into `out` (from its marker); [] for an absent or empty folder; None
    where `out` is anything else: not the ingest's to write."""
    if not out.exists() and not out.is_symlink():
        return []
    if out.is_symlink() or not out.is_dir():
        return None
    marker = out / MARKER
    if marker.is_file() and not marker.is_symlink():
        try:
            record = json.loads(marker.read_text())
        except (OSError, ValueError):
            return None
        files = record.get("files") if isinstance(record, dict) and record.get("written_by") == WRITTEN_BY else None
        if isinstance(files, list) and all(isinstance(f, str) and _inside(f) for f in files):
            return files
        return None
    return [] if not any(out.iterdir()) else None


def _inside(name: str) -> bool:
    """A relative path that stays in its folder (a marker naming ../x or /x owns nothing)."""
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


def check_writable(out: Path) -> list[str]:
    """The files of `out` the ingest may replace; IngestError (one line) where `out` is not its to write: a folder
    holding anything no ingest wrote, or one inside a run's folder (its files are the run's)."""
    if found := run_above(out):
        above, sign = found
        raise IngestError(f"--out {out}: inside the run folder {above} (its {sign}): an ingested run is a folder "
                          "of its own; give one outside any run")
    owned = owned_files(out)
    if owned is None:
        raise IngestError(f"--out {out}: exists and is not a folder an ingest wrote (no {MARKER} listing its "
                          "files): give a new or empty folder")
    return owned


@contextmanager
def _claimed(out: Path) -> Iterator[None]:
    """`out` held by this ingest alone (an flock on the folder itself, made here where absent and removed again if
    the ingest fails leaving it empty): two ingests into one folder never interleave their files."""
    check_writable(out)
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IngestError(f"--out {out}: another ingest is writing it now") from None
        check_writable(out)  # under the lock: what the folder holds now
        yield
    except BaseException:
        if made:
            try:
                out.rmdir()  # only while empty: what another writer put there stays
            except OSError:
                pass
        raise
    finally:
        os.close(fd)


def write(out: Path, record: dict, config: dict, tables: dict[str, pa.Table | None]) -> list[str]:
    """Write the run into `out`; returns the files written (relative to `out`)."""
    try:
        with _claimed(out):
            return _write(out, record, config, tables)
    except OSError as err:  # a folder it cannot write (read-only, full): one line, what was there left as it was
        raise IngestError(f"--out {out}: cannot write there ({err.strerror or err}): give a folder you can write"
                          ) from None


def _write(out: Path, record: dict, config: dict, tables: dict[str, pa.Table | None]) -> list[str]:
    owned = check_writable(out)  # under the claim: what the folder holds now
    staging = out.parent / f".{out.name}.ingest-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        files = ["run.json", "config.json"]
        (staging / "run.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
        (staging / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        for name, table in tables.items():
            if table is None or not table.num_rows:
                continue
            (staging / name).mkdir()
            steps = table.column("step").to_numpy()
            for step in sorted(set(steps.tolist())):
                part = f"{name}/part-{step:06d}.parquet"
                pq.write_table(table.filter(pc.equal(table.column("step"), step)), staging / part)
                files.append(part)
        owned = check_writable(out)  # again: the folder may have changed while this one was written
        if clash := next((f for f in files if f not in owned and os.path.lexists(out / f)), None):
            raise IngestError(f"--out {out}: {clash} there is not the ingest's (its {MARKER} does not list it), and "
                              "this ingest writes a file of that name: move it away")
        # the marker first, naming the old files and the new: at no moment does the folder hold a file no marker
        # lists (an ingest starting meanwhile reads it as an ingest's folder, and then finds it locked)
        _mark(out, [*owned, *(f for f in files if f not in owned)])
        emptied = set()
        for name in owned:  # an earlier ingest's files, by name: nothing else in the folder is touched
            if (out / name).is_file() or (out / name).is_symlink():
                (out / name).unlink()
                emptied.add(Path(name).parent)
        for folder in emptied - {Path(".")}:  # a table folder it emptied; a user's own folder stays
            if (out / folder).is_dir() and not any((out / folder).iterdir()):
                (out / folder).rmdir()
        for name in files:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, out / name)
        _mark(out, files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return files


def _mark(out: Path, files: list[str]) -> None:
    """The marker listing `files`, replaced whole (written beside it, then renamed over it)."""
    tmp = out / f"{MARKER}.{os.getpid()}"
    tmp.write_text(json.dumps({"written_by": WRITTEN_BY, "files": files}, indent=1) + "\n")
    os.replace(tmp, out / MARKER)
