"""A report is replaced whole or not at all: a rebuild killed (SIGKILL, a real process) half-way through
its files or just before the swap leaves the old report whole, every link resolving; a read-only
sweep without --out is one line that says how to choose one."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from analysis.report import build_report
from fixtures.runs import can_mount, in_namespace
from fixtures.synthetic import job_config, prompt_pool, write_sweep

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
# kills the process that imports it at a chosen point of the build: the nth CSV written, or the swap
KILLER = """
import os, signal, sys
import pandas as pd
import analysis.render.writer as writer
from analysis.report import build_report
point, n = sys.argv[2], int(sys.argv[3])
calls = []
def kill_at(original):
    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)
    return wrapped
if point == "csv":
    pd.DataFrame.to_csv = kill_at(pd.DataFrame.to_csv)
else:
    writer._exchange = kill_at(writer._exchange)
build_report(sys.argv[1])
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    prompts = prompt_pool(levels=("1", "2"), per_level=4)
    configs = [job_config(s, group_size=4, seed=seed, max_steps=6, prompts_per_step=4)
               for s in ("fixed", "resample_on_tie") for seed in (0, 1)]
    return write_sweep(tmp_path_factory.mktemp("rebuild") / "sweep", configs, prompts, eval_prompts=prompts, eval_n=4)


def links(report: Path) -> list[str]:
    """Every relative link and image of a REPORT.md."""
    return [t for t in re.findall(r"\]\(([^)#]+)\)", report.read_text()) if "://" not in t]


def build(root: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_report(root)


@pytest.mark.parametrize("point, n", [("csv", 6), ("exchange", 1)])
def test_a_killed_rebuild_leaves_the_old_report_whole(sweep, tmp_path, point, n):
    report = build(sweep)
    (report.parent / "NOTES.md").write_text("kept")  # a file beside the report that a build does not make
    old = {p.relative_to(report.parent): p.read_bytes() for p in report.parent.rglob("*") if p.is_file()}
    assert len(links(report)) > 20
    script = tmp_path / "killer.py"
    script.write_text(textwrap.dedent(KILLER))
    out = subprocess.run([sys.executable, str(script), str(sweep), point, str(n)], env=ENV, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    left = list(sweep.glob(".report.tmp-*"))
    assert len(left) == 1 and any(left[0].rglob("*.csv"))  # it was killed with a new report half-written
    now = {p.relative_to(report.parent): p.read_bytes() for p in report.parent.rglob("*") if p.is_file()}
    assert now == old  # every file of the old report, byte for byte, and nothing else
    assert all((report.parent / link).is_file() for link in links(report))
    again = build(sweep)  # the next build finishes and clears what the killed one left
    assert not list(sweep.glob(".report.tmp-*")) and (again.parent / "NOTES.md").read_text() == "kept"
    assert all((again.parent / link).is_file() for link in links(again))


@pytest.mark.skipif(not can_mount(), reason="no private mount namespace here (unshare -rm)")
def test_a_read_only_sweep_without_out_is_one_line(sweep, tmp_path):
    mnt, elsewhere = tmp_path / "mnt", tmp_path / "elsewhere"
    mnt.mkdir()
    py = sys.executable
    script = f"""
mount -t tmpfs tmpfs {mnt} && cp -a {sweep} {mnt}/sweep && mount -o remount,ro {mnt} || exit 99
cd {ROOT}
{py} -m analysis {mnt}/sweep 2> {tmp_path}/err; echo $? > {tmp_path}/rc
{py} -m analysis {mnt}/sweep --out {elsewhere} > /dev/null 2>&1; echo $? > {tmp_path}/rc_out
"""
    assert in_namespace(script).returncode == 0
    lines = (tmp_path / "err").read_text().strip().splitlines()
    assert (tmp_path / "rc").read_text().strip() == "2" and len(lines) == 1, lines
    assert lines[0].startswith(f"error: cannot write the report in {mnt}/sweep/report (Read-only file system)")
    assert f"--out, e.g. python -m analysis {mnt}/sweep --out" in lines[0]
    assert (tmp_path / "rc_out").read_text().strip() == "0" and (elsewhere / "REPORT.md").is_file()
