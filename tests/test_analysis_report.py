"""The report end to end on a small synthetic sweep, and the command line."""

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.load import SkippedWarning
from analysis.report import build_report
from analysis.synthetic import job_config, prompt_pool, write_sweep

TIE_COLUMNS = ["difficulty", "group_size", "sampler", "groups", "tie_frac", "all_correct_frac", "all_wrong_frac",
               "ci_low", "ci_high", "predicted_tie_frac"]


def small_sweep(root, eval_prompts=True):
    prompts = prompt_pool(per_level=6)
    configs = [job_config(sampler, seed=seed, max_steps=12, prompts_per_step=10)
               for sampler in ("fixed", "dynamic") for seed in (0, 1)]
    write_sweep(root, configs, prompts, overrides=["sampler=fixed,dynamic", "seed=0,1"],
                eval_prompts=prompts if eval_prompts else None, eval_n=8)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = small_sweep(tmp_path_factory.mktemp("report") / "sweep")
    shutil.copytree(root / "3", root / "4")
    (root / "4" / "run.json").write_text(json.dumps({"run_id": "run-4", "status": "failed", "error": "killed"}))
    with pytest.warns(SkippedWarning, match="skipped 4: failed"):
        return root, build_report(root)


def test_report_names_command_configs_budgets_and_skipped_jobs(built):
    root, report = built
    assert report == root / "report" / "REPORT.md"
    text = report.read_text()
    assert "`train -m sampler=fixed,dynamic seed=0,1`" in text
    assert "- `sampler`: dynamic, fixed" in text and "- `seed`: 0, 1" in text
    assert "- `4`: failed (killed)" in text
    for heading in ("## Budget of each arm", "## Ties by difficulty", "## Ties over training", "## At equal samples",
                    "## At equal tokens", "## pass@k and cons@k", "### Comparisons at equal k"):
        assert heading in text
    assert "Welch's t-test over seeds" in text


def test_report_writes_figures_and_tables(built):
    root, report = built
    figures = sorted(p.name for p in (report.parent / "figures").iterdir())
    assert figures == ["at_k.png", "budget_samples.png", "budget_tokens.png", "ties_by_difficulty.png",
                       "ties_over_steps.png"]
    assert all(f"(figures/{name})" in report.read_text() for name in figures)
    ties = pd.read_csv(report.parent / "tables" / "ties_by_difficulty.csv")
    assert list(ties.columns[: len(TIE_COLUMNS)]) == TIE_COLUMNS
    spent = pd.read_csv(report.parent / "tables" / "budget_by_arm.csv")
    assert ties["groups"].sum() == spent["groups"].sum() == 4 * 12 * 10  # every group of the four jobs, once


def test_every_shown_number_comes_from_a_table(built):
    root, report = built
    spent = pd.read_csv(report.parent / "tables" / "budget_by_arm.csv").set_index("sampler")
    row = next(line for line in report.read_text().splitlines() if line.startswith("| fixed | 2 |"))
    assert row.split(" | ")[3] == str(spent.loc["fixed", "samples"])


def test_command_line_with_only_group_tables(tmp_path, capsys):
    root = small_sweep(tmp_path / "sweep", eval_prompts=False)
    assert main([str(root), "--out", str(tmp_path / "out"), "--command", "python train.py -m seed=0,1"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "out" / "REPORT.md")
    text = (tmp_path / "out" / "REPORT.md").read_text()
    assert "`python train.py -m seed=0,1`" in text and "No eval tables were found" in text
    assert not (tmp_path / "out" / "figures" / "at_k.png").exists()


def test_analysis_never_imports_torch_or_grpo_lab():
    check = ("import sys, analysis, analysis.report, analysis.synthetic; "
             "bad = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'grpo_lab'}); assert not bad, bad")
    subprocess.run([sys.executable, "-c", check], check=True)
