"""The notebook API's example (docs/examples/notebook.py) runs, and the numbers it computes from the loaded
frames are the report's: its wasted_frac and first-round tie fraction comparisons equal the report's tests
table, and its tie fractions by difficulty the Ties section's CSV."""

import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import build_report
from fixtures.synthetic import job_config, prompt_pool, write_sweep

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "notebook.py"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    configs = [job_config(s, group_size=4, seed=seed, max_steps=8, prompts_per_step=6)
               for s in ("fixed", "resample_on_tie") for seed in range(3)]
    root = write_sweep(tmp_path_factory.mktemp("notebook") / "sweep", configs, prompt_pool(("1", "2"), 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = build_report(root)
    return root, report.parent


def test_the_example_reproduces_the_reports_numbers(sweep):
    root, out = sweep
    frames = runpy.run_path(str(EXAMPLE))["reproduce"](str(root))
    tests = pd.read_csv(out / "tables" / "tests.csv").set_index("metric")
    for name, metric in (("wasted_frac", "wasted_frac"), ("tie_frac", "tie_frac (first rounds)")):
        mine = frames[name].iloc[0]
        row = tests.loc[metric]
        for column in ("mean_a", "mean_b", "difference", "ci_low", "ci_high", "p_value"):
            assert mine[column] == pytest.approx(row[column], rel=1e-12), (name, column)
    ties = pd.read_csv(out / "tables" / "ties_by_difficulty.csv", dtype={"difficulty": str})
    mine = frames["ties_by_difficulty"].astype({"difficulty": str})
    merged = ties.merge(mine, on=["difficulty", "sampler"], suffixes=("", "_api"))
    assert len(merged) == len(ties) > 0
    for column in ("tie_frac", "ci_low", "ci_high"):
        assert merged[column].to_numpy() == pytest.approx(merged[f"{column}_api"].to_numpy(), rel=1e-12), column


def test_the_example_runs_as_a_script(sweep):
    root, _ = sweep
    out = subprocess.run([sys.executable, str(EXAMPLE), str(root)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "wasted_frac" in out.stdout and "resample_on_tie" in out.stdout
