"""The report end to end on a small synthetic sweep, and the command line."""

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.load import SkippedWarning
from analysis.markdown import cell
from analysis.report import build_report
from analysis.synthetic import job_config, prompt_pool, write_sweep

TIE_COLUMNS = ["difficulty", "group_size", "sampler", "groups", "prompts", "tie_frac", "all_correct_frac",
               "all_wrong_frac", "ci_low", "ci_high", "predicted_tie_frac"]


STOP_STEPS = [12, 12, 10, 11]  # jobs stop at an equal budget after different numbers of steps


def small_sweep(root, eval_prompts=True):
    prompts = prompt_pool(per_level=6)
    configs = [job_config(sampler, seed=seed, max_steps=100, prompts_per_step=10, eval_every_samples=400)
               for sampler in ("fixed", "resample_on_tie") for seed in (0, 1)]
    write_sweep(root, configs, prompts, overrides=["sampler=fixed,resample_on_tie", "seed=0,1"],
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
    assert "`train -m sampler=fixed,resample_on_tie seed=0,1`" in text
    assert "- `sampler`: fixed, resample_on_tie" in text and "- `seed`: 0, 1" in text
    assert "- `4`: failed (killed)" in text
    headings = ["## Findings", "## Held-out results at equal samples drawn", "### Arms compared at equal samples",
                "## pass@k and cons@k", "## What trained: informative and wasted samples", "## Tests across seeds",
                "## Ties", "### First-round ties by difficulty", "### Redraws (rounds after a tie), apart",
                "### Observed against predicted over training", "## At equal tokens", "## Jobs"]
    at = [text.index(h + "\n") for h in headings]
    assert at == sorted(at)  # findings first, then the held-out comparison, in this order
    assert "Welch" not in text
    assert "under `pool=all`, `algo.unit_weight=prompt`: a unit of several rounds weighs in the loss as one prompt" in text


def test_report_writes_figures_and_tables(built):
    root, report = built
    figures = sorted(p.name for p in (report.parent / "figures").iterdir())
    assert figures == ["at_k.png", "budget_samples.png", "budget_tokens.png", "heldout.png", "ties_by_difficulty.png",
                       "ties_over_steps.png"]
    assert all(f"(figures/{name})" in report.read_text() for name in figures)
    ties = pd.read_csv(report.parent / "tables" / "ties_by_difficulty.csv")
    assert list(ties.columns[: len(TIE_COLUMNS)]) == TIE_COLUMNS
    redraws = pd.read_csv(report.parent / "tables" / "ties_redraws.csv")
    spent = pd.read_csv(report.parent / "tables" / "budget_by_arm.csv")
    assert ties["groups"].sum() + redraws["groups"].sum() == spent["groups"].sum()  # every group, once
    assert set(redraws["sampler"]) == {"resample_on_tie"}


def test_findings_come_from_the_tests_table(built):
    root, report = built
    text = report.read_text()
    findings = text[text.index("## Findings"):text.index("## Held-out")]
    sentences = [line for line in findings.splitlines() if line.startswith("- ")]
    assert 3 <= len(sentences) <= 6
    tests = pd.read_csv(report.parent / "tables" / "tests.csv")
    assert set(tests["metric"]) == {"held-out pass@1", "held-out pass@8", "held-out cons@8", "wasted_frac",
                                    "tie_frac (first rounds)"}
    for _, row in tests.iterrows():
        line = next((s for s in sentences if s.startswith(f"- {row['metric']}:")), None)
        if line is None:
            continue
        assert f"difference {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}]" in line
        assert f"Holm p = {cell(row['p_holm'], 3)}" in line
        assert ("no detectable difference" in line) == (row["ci_low"] <= 0 <= row["ci_high"] or row["p_holm"] >= 0.05)
    assert findings.index("held-out pass@1") < findings.index("wasted_frac")  # held-out first
    assert (tests["p_holm"] >= tests["p_value"]).all()


def test_held_out_checkpoints_are_aligned_by_samples_drawn(built):
    root, report = built
    text = report.read_text()
    jobs = pd.read_csv(report.parent / "tables" / "checkpoints.csv", dtype={"job": str}).set_index("job")
    assert jobs["final_step"].to_dict() == {"0": 12, "1": 12, "2": 10, "3": 11}
    assert (jobs.loc[["0", "1"], "samples_at_final"] == 12 * 10 * 8).all()  # fixed: 10 groups of 8 a step
    assert "Every job is done and its final checkpoint is its last training step." in text
    table = pd.read_csv(report.parent / "tables" / "at_k_comparisons.csv", dtype={"steps_a": str, "steps_b": str})
    final = table[table["checkpoint"] == "final"]
    assert set(final["a"]) == {"sampler=fixed @ final"} and set(final["b"]) == {"sampler=resample_on_tie @ final"}
    assert set(final["steps_a"]) == {"12, 12"} and set(final["steps_b"]) == {"10, 11"}
    assert final["refused"].isna().all() and final["paired"].all()
    # eval.every_samples=400: each job evaluated on crossing 400, 800, ... samples, whatever its step
    between = table[table["checkpoint"].str.endswith(" samples")]
    assert set(between["checkpoint"]) >= {"400 samples", "800 samples"}
    assert (between["samples_a"] >= between["checkpoint"].str.split().str[0].astype(float)).all()
    assert (between["samples_b"] - between["checkpoint"].str.split().str[0].astype(float) < 4 * 10 * 8).all()
    assert not table["checkpoint"].str.startswith("step").any()
    per_seed = pd.read_csv(report.parent / "tables" / "at_k_per_seed.csv")
    assert set(per_seed["seed_a"].dropna().astype(int)) == {0, 1}


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
    assert "**Not at the end of its budget**: `2` (last eval at step 7, trained to step 10, status done)" in text
    table = pd.read_csv(root / "report" / "tables" / "at_k_comparisons.csv", dtype=str)
    assert set(table.loc[table["checkpoint"] == "final", "steps_b"]) == {"7, 11"}
