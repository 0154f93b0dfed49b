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


STOP_STEPS = [12, 12, 10, 11]  # jobs stop at an equal budget after different numbers of steps


def small_sweep(root, eval_prompts=True):
    prompts = prompt_pool(per_level=6)
    configs = [job_config(sampler, seed=seed, max_steps=100, prompts_per_step=10)
               for sampler in ("fixed", "dynamic") for seed in (0, 1)]
    write_sweep(root, configs, prompts, overrides=["sampler=fixed,dynamic", "seed=0,1"],
                eval_prompts=prompts if eval_prompts else None, eval_n=8, eval_every=5, stop_steps=STOP_STEPS)
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
                    "## At equal tokens", "## pass@k and cons@k", "### Checkpoints", "### Curves per difficulty",
                    "### Comparisons at equal k"):
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
    assert ties["groups"].sum() == spent["groups"].sum() == sum(STOP_STEPS) * 10  # every group of the four jobs, once


def test_pass_at_k_is_compared_at_each_jobs_final_step_and_the_report_says_so(built):
    root, report = built
    text = report.read_text()
    assert "**final** is each job's last evaluated step, which is the end of its sample budget" in text
    assert "Every job is done and its final checkpoint is its last training step." in text
    jobs = pd.read_csv(report.parent / "tables" / "checkpoints.csv", dtype={"job": str}).set_index("job")
    assert jobs["final_step"].to_dict() == {"0": 12, "1": 12, "2": 10, "3": 11}
    assert jobs.loc["3", "evaluated_steps"] == "0, 5, 10, 11"
    assert (jobs["samples_at_final"] == jobs["last_trained_step"].add(1) * 10 * 8).all()  # 10 groups of 8 a step
    assert "| 3 | dynamic | 1 | 0, 5, 10, 11 | 11 |" in text  # each job's steps, listed in the report
    table = pd.read_csv(report.parent / "tables" / "at_k_comparisons.csv", dtype=str)
    final = table[table["checkpoint"] == "final"]
    assert set(final["a"]) == {"sampler=fixed @ final"} and set(final["b"]) == {"sampler=dynamic @ final"}
    assert set(final["steps_a"]) == {"12, 12"} and set(final["steps_b"]) == {"10, 11"}
    assert final["refused"].isna().all()
    # every job evaluated steps 5 and 10 (job 2's final); the curves keep "10" for fixed only, as for
    # dynamic it is job 3's label alone (job 2's step 10 is its "final")
    assert set(table["checkpoint"]) == {"base", "final", "step 5", "step 10", "final vs base"}
    curves = pd.read_csv(report.parent / "tables" / "at_k.csv", dtype={"steps": str})
    assert set(curves.loc[curves["sampler"] == "dynamic", "checkpoint"]) == {"base", "5", "final"}
    assert set(curves.loc[curves["sampler"] == "fixed", "checkpoint"]) == {"base", "5", "10", "final"}
    assert set(curves.loc[curves["checkpoint"] == "final", "steps"]) == {"12, 12", "10, 11"}


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


def test_report_flags_a_job_whose_final_checkpoint_is_not_the_end_of_its_budget(tmp_path):
    root = small_sweep(tmp_path / "sweep")
    (root / "2" / "eval" / "part-000010.parquet").unlink()  # job 2 trained 10 steps, its last eval lost
    text = build_report(root).read_text()
    assert "**Not at the end of its budget**: `2` (last eval at step 5, trained to step 9, status done)" in text
    table = pd.read_csv(root / "report" / "tables" / "at_k_comparisons.csv", dtype=str)
    assert set(table.loc[table["checkpoint"] == "final", "steps_b"]) == {"5, 11"}
