"""A report writes only where it can prove the folder is its own (analysis/render/ownership.py): a folder that
is absent, empty, a report it built (its marker, `.grpo-lab-report`) or a report of a version before the
marker (the committed reports' shape). Anything else, or any folder that is, is inside or holds a run, is
refused in one line before the build starts, nothing touched; a rebuild replaces only the files the marker
lists and keeps the rest (files, links, modes); two builds into one folder both finish; `analysis.pack` on a
part it cannot read is one line and leaves nothing."""

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from analysis.__main__ import main
from analysis.render.ownership import MARKER, ReportNotWritable, claim, is_packed
from analysis.report import build_report
from fixtures.synthetic import two_sampler_sweep
from grpo_lab.run.lock import RunLock

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
COMMITTED = ROOT / "reports" / "main"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return two_sampler_sweep(tmp_path_factory.mktemp("own") / "sweep")


def analysis(*args: str | Path, module: str = "analysis") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=ENV, text=True,
                          capture_output=True, timeout=600)


def build(source: Path, out: Path | None = None) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_report(source, out)


def state(folder: Path) -> dict[str, tuple]:
    """Every entry under `folder` (hidden ones, links as links): its kind, mode and contents or target."""
    out = {".": ("dir", stat.S_IMODE(os.lstat(folder).st_mode))}
    for at, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(at) / name
            info = os.lstat(path)
            key = path.relative_to(folder).as_posix()
            if stat.S_ISLNK(info.st_mode):
                out[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                out[key] = ("dir", stat.S_IMODE(info.st_mode))
            else:
                out[key] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return out


def refused(out: subprocess.CompletedProcess, *words: str) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("error: cannot write the report in ") and all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in out.stderr
    return lines[0]


def a_users_folder(folder: Path, elsewhere: Path) -> Path:
    """The issue's folder: the user's own REPORT.md, tables/mydata.csv, figures/photo.png, a link to a
    directory, mode 700."""
    (folder / "tables").mkdir(parents=True)
    (folder / "figures").mkdir()
    (folder / "REPORT.md").write_text("# my own notes\n")
    (folder / "tables" / "mydata.csv").write_text("a,b\n1,2\n")
    (folder / "figures" / "photo.png").write_bytes(b"\x89PNG not really")
    elsewhere.mkdir(exist_ok=True)
    (elsewhere / "kept.txt").write_text("kept")
    (folder / "linked").symlink_to(elsewhere, target_is_directory=True)
    folder.chmod(0o700)
    return folder


def test_a_folder_of_other_files_is_refused_in_one_line_and_left_as_it_was(sweep, tmp_path):
    folder = a_users_folder(tmp_path / "mine", tmp_path / "elsewhere")
    before, parent = state(folder), sorted(os.listdir(tmp_path))
    refused(analysis(sweep, "--out", folder), "(REPORT.md, figures/photo.png, linked, tables/mydata.csv)", MARKER)
    assert state(folder) == before and sorted(os.listdir(tmp_path)) == parent  # not even a folder beside it


def said(capsys, *args: str | Path) -> str:
    """`python -m analysis ARGS` in this process (no imports to wait for): its one-line refusal."""
    assert main([str(a) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write the report in "), err
    return err[0]


def test_an_existing_file_is_refused_in_one_line_before_the_build(sweep, tmp_path):
    """The issue's `--out existing_file.txt`: a NotADirectoryError after the whole build, now one line at once."""
    out = tmp_path / "existing_file.txt"
    out.write_text("mine")
    assert "a file, not a folder" in refused(analysis(sweep, "--out", out))
    assert out.read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["existing_file.txt"]


@pytest.mark.parametrize("what", ["link", "sweep", "run", "in_run", "parent_of_reports", "locked"])
def test_what_is_not_a_report_folder_is_refused_before_the_build(sweep, tmp_path, capsys, what):
    """Each refused in one line, before any work (nothing made beside it), nothing touched: a link to a folder,
    the sweep itself (`L --out L`), one of its runs, a folder inside a run, a folder of reports (`--out
    reports` by mistake), a folder holding a folder whose lock a live writer holds (no run.json yet)."""
    if what == "link":
        (tmp_path / "real").mkdir()
        out = tmp_path / "link"
        out.symlink_to(tmp_path / "real", target_is_directory=True)
        words = ("a symbolic link",)
    elif what == "sweep":
        out, words = sweep, ("holds runs (0, 1, 2 and 1 more)",)
    elif what == "run":
        out, words = sweep / "1", ("a run folder (its run.json)",)
    elif what == "in_run":
        out, words = sweep / "1" / "eval", (f"inside the run folder {sweep / '1'}",)
    elif what == "parent_of_reports":
        out = tmp_path / "reports"
        out.mkdir()
        shutil.copy(ROOT / "reports" / "README.md", out)
        shutil.copytree(COMMITTED, out / "main", ignore=shutil.ignore_patterns("data"))
        words = ("(README.md, main)",)
    else:
        out, words = tmp_path / "work", ("holds runs (job)",)
        (out / "job").mkdir(parents=True)
        (out / "notes.txt").write_text("mine")
    watched = sweep if what == "sweep" else out.parent
    before, beside = state(watched), sorted(os.listdir(out.parent))
    if what == "locked":
        with RunLock(out / "job"):
            line = said(capsys, sweep, "--out", out)
        assert not (out / "job" / ".lock").exists()  # released: its file goes with it
    else:
        line = said(capsys, sweep, "--out", out)
    assert all(w in line for w in (str(out), *words)), line
    assert state(watched) == before and sorted(os.listdir(out.parent)) == beside


def test_a_run_s_own_report_folder_is_allowed_and_a_marked_report_keeps_the_user_s_files(sweep, tmp_path):
    """The default place (`<run>/report`) is taken; a rebuild into a marked report replaces the files its marker
    lists only (a figure no build makes any more goes), keeps every other file, link and folder, and the modes."""
    run = tmp_path / "run"
    shutil.copytree(sweep / "0", run)
    report = build(run).parent
    assert report == run / "report" and (report / MARKER).is_file()
    listed = json.loads((report / MARKER).read_text())["files"]
    assert {"DETAILS.md", "REPORT.md"} <= set(listed)
    assert all(f.startswith(("figures/", "tables/")) for f in set(listed) - {"DETAILS.md", "REPORT.md"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (report / "NOTES.md").write_text("kept")
    (report / "tables" / "mydata.csv").write_text("mine")
    (report / "figures" / "old.png").write_bytes(b"a figure an earlier build made")
    (report / "linked").symlink_to(elsewhere, target_is_directory=True)
    (report / "private").mkdir(mode=0o700)
    (report / "private" / "x.txt").write_text("x")
    (report / "sealed").mkdir()
    (report / "sealed" / "y.txt").write_text("y")
    (report / "sealed").chmod(0o555)
    (report / MARKER).write_text(json.dumps({**json.loads((report / MARKER).read_text()),
                                             "files": listed + ["figures/old.png"]}))
    (report / f"{MARKER}.99999.tmp").write_text("a build killed while settling its marker left this")
    report.chmod(0o700)
    kept = {k: v for k, v in state(report).items() if k in (".", "NOTES.md", "tables/mydata.csv", "linked", "private",
                                                              "private/x.txt", "sealed", "sealed/y.txt")}
    build(run)
    after = state(report)
    assert {k: after[k] for k in kept} == kept and "figures/old.png" not in after
    assert os.readlink(report / "linked") == str(elsewhere)  # a link still, never an empty folder
    assert json.loads((report / MARKER).read_text())["files"] == listed  # the user's files are never listed
    assert "building" not in json.loads((report / MARKER).read_text())  # in place: the files alone
    assert f"{MARKER}.99999.tmp" not in after  # a marker's temporary is the build's, never carried as the user's
    assert not [p for p in run.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_an_empty_folder_keeps_its_mode_and_a_folder_holding_anything_else_of_a_run_is_refused(sweep, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    report = build(sweep, empty).parent
    assert stat.S_IMODE(report.stat().st_mode) == 0o700 and (report / "REPORT.md").is_file()
    shutil.copytree(sweep / "2", report / "copied" / "2")  # a run put beside a marked report: its swap would cross it
    with pytest.raises(ReportNotWritable, match=r"holds a run at copied/2/run.json"):
        claim(report)


def test_a_file_of_the_user_s_where_the_new_report_writes_one_is_refused_and_kept(sweep, tmp_path):
    """A file the marker does not list is the user's, even where a build would write one of that name: the
    rebuild stops before the swap, in one line, and the folder stays as it was."""
    report = build(sweep, tmp_path / "r").parent
    marker = json.loads((report / MARKER).read_text())
    listed = [f for f in marker["files"] if f != "tables/jobs.csv"]
    (report / MARKER).write_text(json.dumps({**marker, "files": listed}))
    (report / "tables" / "jobs.csv").write_text("my own table")
    before = state(report)
    with pytest.raises(ReportNotWritable, match=r"tables/jobs.csv there is not the report's own file"):
        build(sweep, report)
    assert state(report) == before and sorted(os.listdir(tmp_path)) == ["r"]


@pytest.mark.parametrize("marker", ['{"written_by": "python -m analysis", "files": ["../outside.txt"]}',
                                    '{"written_by": "python -m analysis", "files": ["data/0/run.json"]}',
                                    '{"written_by": "someone", "files": []}', "not json"])
def test_a_marker_this_tool_did_not_write_proves_nothing(tmp_path, marker):
    out = tmp_path / "r"
    out.mkdir()
    (out / "REPORT.md").write_text("# Report: x\n")
    (out / MARKER).write_text(marker)
    with pytest.raises(ReportNotWritable, match="is not one this tool wrote"):
        claim(out)


def test_a_report_of_the_version_before_the_marker_is_recognised_by_its_shape(tmp_path):
    """The committed reports (written before the marker): pages titled as a build titles them, every figure and
    CSV linked from them, a packed sweep in data/. Anything the shape cannot vouch for is refused."""
    copy = tmp_path / "main"
    shutil.copytree(COMMITTED, copy, ignore=shutil.ignore_patterns(MARKER))  # as the version before wrote it
    assert is_packed(copy / "data")
    own = claim(copy)
    assert own == {p.relative_to(copy).as_posix() for p in [copy / "REPORT.md", copy / "DETAILS.md",
                                                               *copy.glob("figures/*.png"), *copy.glob("tables/*.csv")]}
    (copy / "data" / "0" / ".lock").write_text("{}")  # a job writing there: no longer data at rest
    assert not is_packed(copy / "data")
    with pytest.raises(ReportNotWritable, match=r"holds files a report does not write \(data\)"):
        claim(copy)
    (copy / "data" / "0" / ".lock").unlink()
    (copy / "tables" / "mydata.csv").write_text("mine")  # linked from no page: not the report's
    with pytest.raises(ReportNotWritable, match=r"tables/mydata.csv"):
        claim(copy)
    (copy / "tables" / "mydata.csv").unlink()
    (copy / "REPORT.md").write_text("# my notes\n")  # not a page a build writes
    with pytest.raises(ReportNotWritable, match=r"REPORT.md"):
        claim(copy)
    data_only = tmp_path / "packed"  # what pack leaves before its first build, and the committed test's copy
    shutil.copytree(COMMITTED / "data", data_only / "data")
    assert claim(data_only) == frozenset()


def test_a_report_without_its_marker_is_rebuilt_and_marked(sweep, tmp_path):
    report = build(sweep, tmp_path / "r").parent
    (report / MARKER).unlink()  # as a build of the version before wrote it
    before = {p: p.read_bytes() for p in report.rglob("*") if p.is_file()}
    build(sweep, report)
    assert (report / MARKER).is_file() and {p: p.read_bytes() for p in before} == before


LATE = """
import sys
from pathlib import Path
import analysis.render.writer as writer
from analysis.report import build_report
out = Path(sys.argv[2])
exchange = writer._exchange
def late(a, b):
    (out / "late.txt").write_text("written while the build swapped")  # after the carrying, before the swap
    return exchange(a, b)
writer._exchange = late
build_report(sys.argv[1], out)
"""


@pytest.mark.heavy
def test_a_file_written_into_the_folder_during_the_swap_is_kept(sweep, tmp_path):
    out = build(sweep, tmp_path / "r").parent
    script = tmp_path / "late.py"
    script.write_text(textwrap.dedent(LATE))
    done = subprocess.run([sys.executable, str(script), str(sweep), str(out)], env=ENV, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "late.txt").read_text() == "written while the build swapped" and (out / "REPORT.md").is_file()


@pytest.mark.heavy
def test_two_builds_into_one_new_folder_at_once_both_finish_with_one_whole_report(sweep, tmp_path):
    """Two processes, then two threads of one (each its own building folder): both exit 0, the folder is one
    whole report with its marker, nothing left beside it."""
    out = tmp_path / "r"
    procs = [subprocess.Popen([sys.executable, "-m", "analysis", str(sweep), "--out", str(out)], cwd=ROOT, env=ENV,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    listed = json.loads((out / MARKER).read_text())["files"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != MARKER) == listed
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda _: build(sweep, out), range(2))) == [out / "REPORT.md"] * 2
    assert sorted(os.listdir(tmp_path)) == ["r"]


def test_a_killed_build_s_folder_is_cleared_but_a_look_alike_is_not(sweep, tmp_path):
    out = tmp_path / "r"
    import platform

    def marked(name: str, host: str) -> Path:  # a build that died: its folder holds the marker, naming its process
        folder = tmp_path / name
        folder.mkdir()
        (folder / MARKER).write_text(json.dumps({"written_by": "python -m analysis", "files": [],
                                                  "building": {"pid": 999_999_999, "host": host}}))
        return folder

    left = marked(".r.tmp-999999999-abcdef", platform.node())
    elsewhere = marked(".r.tmp-999999999-012345", "another-host")  # a build of another host may be running
    mine = tmp_path / ".r.tmp-999999998"  # a user's folder of that name: no marker, never removed
    mine.mkdir()
    (mine / "x.txt").write_text("mine")
    build(sweep, out)
    assert not left.exists() and (mine / "x.txt").read_text() == "mine" and elsewhere.exists()


def test_pack_refuses_a_part_it_cannot_read_in_one_line_and_leaves_nothing(sweep, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(sweep, broken, ignore=shutil.ignore_patterns("report"))
    part = sorted((broken / "2" / "groups").glob("part-*.parquet"))[1]
    part.write_bytes(part.read_bytes()[:40])  # truncated
    target = tmp_path / "shipped"
    out = analysis(broken, target, module="analysis.pack")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert lines[0].startswith(f"error: {part}: unreadable (")
    assert sorted(os.listdir(tmp_path)) == ["broken"]  # no target, no .data.packing


def test_pack_refuses_a_folder_a_report_may_not_be_written_into_before_packing(sweep, tmp_path):
    folder = a_users_folder(tmp_path / "mine", tmp_path / "elsewhere")
    before = state(folder)
    refused(analysis(sweep, folder, module="analysis.pack"), "tables/mydata.csv")
    assert state(folder) == before


@pytest.mark.heavy
def test_a_packed_report_rebuilds_into_its_own_folder(sweep, tmp_path):
    target = tmp_path / "shipped"
    packed = analysis(sweep, target, module="analysis.pack")
    assert packed.returncode == 0, packed.stderr[-3000:]
    (target / "NOTES.md").write_text("kept")
    first = {p.relative_to(target): p.read_bytes() for p in target.rglob("*") if p.is_file()}
    again = analysis(target / "data", "--out", target)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p.relative_to(target): p.read_bytes() for p in target.rglob("*") if p.is_file()} == first
    assert refused(analysis(target / "data", "--out", target / "data"), "holds runs")
