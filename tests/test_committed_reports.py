"""The committed reports ship their data and rebuild from it: each reports/<name>/data (a sweep folder written
by analysis.pack) is copied elsewhere and its report built there with the documented command; the committed
report must come out the same (its pages word for word, its CSVs to float rounding, its figures). The main
job's report is rebuilt by every test run, the larger studies by the slow tests."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
SLOW = {"samplers", "tie_learning", "ties_in_loss"}  # 84-221 jobs each: minutes to rebuild
SHIPPED = sorted(p.parent.name for p in REPORTS.glob("*/data"))


# The Findings' line on a sweep of several commits reads `git diff` in this checkout: a shallow clone cannot
# tell what changed between them, and says so. That line is the only one that depends on the checkout.
VERSIONS = re.compile(rb"^- \*\*\d+ code versions in one sweep\*\*.*$", re.MULTILINE)


def report_files(folder: Path) -> dict[str, bytes]:
    files = {p.relative_to(folder).as_posix(): p.read_bytes()
             for p in [folder / "REPORT.md", folder / "DETAILS.md", *folder.glob("tables/*.csv"),
                       *folder.glob("figures/*.png")] if p.is_file()}
    files["REPORT.md"] = VERSIONS.sub(b"- (code versions)", files["REPORT.md"])
    return files


def test_the_main_report_ships_its_data():
    assert "main" in SHIPPED


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in SHIPPED])
def test_a_committed_report_rebuilds_from_its_data_the_same(name, tmp_path):
    """Both pages word for word; every CSV to 1e-9 relative (the last bits of a sum may differ on another CPU's
    vector units); every figure present, pixel for pixel."""
    committed = REPORTS / name
    copy = tmp_path / name
    shutil.copytree(committed / "data", copy / "data")
    out = subprocess.run([sys.executable, "-m", "analysis", str(copy / "data"), "--out", str(copy)], cwd=ROOT,
                         text=True, capture_output=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    want, got = report_files(committed), report_files(copy)
    assert sorted(got) == sorted(want)
    for page in ("REPORT.md", "DETAILS.md"):
        assert got[page] == want[page], page
    for table in (f for f in want if f.endswith(".csv")):
        pd.testing.assert_frame_equal(pd.read_csv(copy / table), pd.read_csv(committed / table), rtol=1e-9,
                                      obj=table)
    for figure in (f for f in want if f.endswith(".png")):
        with Image.open(copy / figure) as a, Image.open(committed / figure) as b:
            assert a.size == b.size and np.array_equal(np.asarray(a), np.asarray(b)), figure
