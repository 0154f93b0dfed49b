"""The report end to end on a small synthetic sweep, and the command line."""

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from PIL import Image
from reference import both_pages, in_words

from analysis.__main__ import main
from analysis.data.load import SkippedWarning
from analysis.data.records import experiment_name
from analysis.measures.at_k import saturated
from analysis.render.markdown import cell
from analysis.render.writer import write_report
from analysis.report import build_report
from fixtures.synthetic import job_config, prompt_pool, write_sweep

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
    (root / "4" / "run.json").write_text(json.dumps({"run_id": "run-4", "status": "failed",
                                                     "error": f"killed while writing {root}/4/x"}))
    with pytest.warns(SkippedWarning, match="skipped 4: failed"):
        return root, build_report(root)


def test_report_names_command_configs_budgets_and_skipped_jobs(built):
    root, report = built
    assert report == root / "report" / "REPORT.md"
    text = both_pages(report)
    assert "`train -m sampler=fixed,resample_on_tie seed=0,1`" in text
    assert "- `sampler`: fixed, resample_on_tie" in text and "- `seed`: 0, 1" in text
    assert "- `4`: failed (killed while writing ../4/x)" in text  # the sweep's path, relative to the report
    headings = ["## Findings", "## Held-out results at equal samples drawn", "### Arms compared at equal samples",
                "## pass@k and cons@k", "## What trained: informative and wasted samples",
                "## Ties", "### First-round ties by difficulty", "### Redraws (rounds after a tie), apart",
                "### Observed against predicted over training", "# Details: sweep", "## Config and provenance",
                "## Tests across seeds", "## At equal tokens", "## Jobs"]
    at = [text.index(h + "\n") for h in headings]
    assert at == sorted(at)  # findings first, then the held-out comparison, in this order
    assert "Welch" not in text
    assert "under `pool=all`, `algo.unit_weight=prompt`: a unit of several rounds weighs in the loss as one prompt" \
        in text


def test_report_writes_figures_and_tables(built):
    root, report = built
    figures = sorted(p.name for p in (report.parent / "figures").iterdir())
    assert figures == ["at_k.png", "budget_samples.png", "cost.png", "differences.png", "health.png", "heldout.png",
                       "ties_by_difficulty.png", "ties_over_samples.png"]
    assert all(f"(figures/{name})" in both_pages(report) for name in figures)
    for name in figures:  # sharp at GitHub's page width
        with Image.open(report.parent / "figures" / name) as image:
            assert image.info["dpi"][0] >= 150, name
    ties = pd.read_csv(report.parent / "tables" / "ties_by_difficulty.csv")
    assert list(ties.columns[: len(TIE_COLUMNS)]) == TIE_COLUMNS
    redraws = pd.read_csv(report.parent / "tables" / "ties_redraws.csv")
    spent = pd.read_csv(report.parent / "tables" / "budget_by_arm.csv")
    assert ties["groups"].sum() + redraws["groups"].sum() == spent["groups"].sum()  # every group, once
    assert set(redraws["sampler"]) == {"resample_on_tie"}


def test_findings_come_from_the_tests_table(built):
    root, report = built
    sentences = [f"- {line}" for line in in_words(report)]  # the long form, on the second page
    findings = "\n".join(sentences)
    assert 3 <= len(sentences) <= 9  # the budget warning, 6 comparisons, dynamics at equal steps, coverage, ties
    assert any(s.startswith("- Coverage after RL (trained − base pass@k") for s in sentences)
    tests = pd.read_csv(report.parent / "tables" / "tests.csv")
    held_out = {"held-out pass@1", "held-out pass@8", "held-out cons@8"}
    assert set(tests["metric"]) == held_out | {f"{m} (equal updates)" for m in held_out} | {  # 12 vs 10-11
        "wasted_frac", "tie_frac (first rounds)", "tie_frac (first rounds, equal updates)",
        "train reward (first rounds, equal updates)", "kl (equal updates)"}
    for _, row in tests.iterrows():
        line = next((s for s in sentences if s.startswith(f"- {row['metric']}:")), None)
        if line is None:
            continue
        assert f"difference {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}]" in line
        assert f"p = {cell(row['p_holm'], 3)}" in line and "Holm" not in line  # one test a family: plain p
        assert ("no detectable difference" in line) == (row["ci_low"] <= 0 <= row["ci_high"] or row["p_holm"] >= 0.05)
    # held-out first (after the budget line)
    assert findings.index("- held-out pass@1") < findings.index("- wasted_frac")
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
    # at equal samples no checkpoint is a bare step; at equal updates, the last count every job was evaluated at
    # (eval every 5 steps, an update every step: 10, where the jobs end at 12, 12, 10, 11)
    assert not table[table["alignment"] == "samples"]["checkpoint"].str.startswith("step").any()
    at_steps = table[table["alignment"] == "updates"]
    assert set(at_steps["checkpoint"]) == {"10 updates"} \
        and set(at_steps["steps_a"]) == set(at_steps["steps_b"]) == {"10, 10"}
    per_seed = pd.read_csv(report.parent / "tables" / "at_k_per_seed.csv")
    assert set(per_seed["seed_a"].dropna().astype(int)) == {0, 1}


def test_every_shown_number_comes_from_a_table(built):
    root, report = built
    spent = pd.read_csv(report.parent / "tables" / "budget_by_arm.csv").set_index("sampler")
    text = report.read_text()
    trained = text[text.index("## What trained"):]  # other sections' tables start with an arm too
    row = next(line for line in trained.splitlines() if line.startswith("| fixed | 2 |"))
    assert row.split(" | ")[3] == str(spent.loc["fixed", "samples"])


def test_command_line_with_only_group_tables(tmp_path, capsys):
    root = small_sweep(tmp_path / "sweep", eval_prompts=False)
    assert main([str(root), "--out", str(tmp_path / "out"), "--command", "python train.py -m seed=0,1"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "out" / "REPORT.md")
    text = (tmp_path / "out" / "REPORT.md").read_text()
    assert "`python train.py -m seed=0,1`" in text and "No eval tables were found" in text
    assert not (tmp_path / "out" / "figures" / "at_k.png").exists()
    assert "## Coverage after RL" not in text  # no eval rows: no base and trained models to compare
    details = (tmp_path / "out" / "DETAILS.md").read_text()
    assert "## Tie persistence" in details and "## Training health" in details


def test_analysis_never_imports_torch_or_grpo_lab():
    check = ("import sys, analysis, analysis.report, fixtures.synthetic; "
             "bad = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'grpo_lab'}); assert not bad, bad")
    subprocess.run([sys.executable, "-c", check], check=True)


def test_report_flags_a_job_whose_final_checkpoint_is_not_the_end_of_its_budget(tmp_path):
    root = small_sweep(tmp_path / "sweep")
    (root / "2" / "eval" / "part-000010.parquet").unlink()  # job 2 trained 10 steps, its last eval lost
    text = build_report(root).read_text()
    assert "**Not at the end of its budget**: `2` (last eval at step 7, trained to step 10, status done)" in text
    table = pd.read_csv(root / "report" / "tables" / "at_k_comparisons.csv", dtype=str)
    assert set(table.loc[table["checkpoint"] == "final", "steps_b"]) == {"7, 11"}


def raw_groups(root):
    """Every job's groups, read part by part with pandas (not through analysis.load)."""
    frames = [pd.read_parquet(p).assign(job=p.parent.parent.name) for p in sorted(root.glob("*/groups/part-*.parquet"))]
    return pd.concat(frames, ignore_index=True)


def test_front_matter_names_the_experiment_and_holds_provenance_with_relative_paths_only(built, tmp_path):
    root, report = built
    text = report.read_text()
    assert text.startswith("# Report: sweep\n")  # no experiment= override: the folder's name
    assert text.index("## Findings") < text.index("<details>") < text.index("</details>") < text.index("## Held-out")
    block = text[text.index("<details>"):text.index("</details>")]
    assert "- Source: `..` (relative to this report)" in block
    assert "- Wall time per job and the resolved config: [DETAILS.md](DETAILS.md)" in block
    details = report.with_name("DETAILS.md").read_text()
    block = block + details[details.index("## Config and provenance"):]
    assert "- Packages: grpo-lab 0.1.0, torch none, transformers not recorded" in block
    assert "- Code: git not recorded" in block
    # started 00:00, finished 01:00 in every synthetic run.json, one start: its wall and running time
    assert block.count("| 1h00m00s | 1 | 1h00m00s |") == 4
    assert "- `sampler`: fixed, resample_on_tie" in block and "| max_steps | 100 |" in block
    assert "| sampler.name |" not in block  # shown once, as the varying `sampler`
    assert str(root.parent) not in text and str(tmp_path.parent) not in text  # no absolute paths anywhere
    # the title from the sweep's `experiment=` override
    hydra = yaml.safe_load((root / "multirun.yaml").read_text())
    hydra["hydra"]["overrides"]["task"].append("experiment=main")
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump(hydra))
    assert experiment_name(tmp_path, pd.DataFrame({"path": []})) == "main"


def test_sections_appear_when_their_data_exists(built):
    root, report = built
    text = both_pages(report)
    for heading in ("## Coverage after RL", "## Tie persistence", "## Group size", "## Training health"):
        assert heading + "\n" in text
    assert "## Example completions" not in text  # no job kept completions
    first = report.read_text()  # coverage is on the second page, the first links it with what is there
    assert first.index("## pass@k and cons@k") < first.index("## What trained") and "## Coverage after RL" not in first
    assert "- [Coverage after RL](DETAILS.md#coverage-after-rl): each arm's trained − base pass@k" in first
    assert "(figures/health.png)" in text and "(figures/differences.png)" in text
    persistence = pd.read_csv(report.parent / "tables" / "persistence.csv")
    for row in persistence[(persistence["difficulty"] == "all") & (persistence["kind"] != "mixed")].itertuples():
        assert f"- sampler={row.sampler}: {row.kind} visits were tied again at the next visit in " \
               f"{row.tied_again_frac:.1%} of {row.pairs} cases" in text  # the CSV holds what the section says


def test_ties_over_training_sit_at_the_samples_drawn_by_each_window(built):
    root, report = built
    by_step = pd.read_csv(report.parent / "tables" / "ties_by_step.csv")
    groups = raw_groups(root)
    first = groups[groups["round"] == 0]
    window = int(sorted(by_step["step_window"].unique())[1])
    sampler = {"0": "fixed", "1": "fixed", "2": "resample_on_tie", "3": "resample_on_tie"}
    for row in by_step.itertuples(index=False):
        drawn = []
        for job, name in sampler.items():
            mine = first[(first["job"] == job) & (first["step"] // window * window == row.step_window)]
            if name == row.sampler and len(mine):
                drawn.append(mine["samples_total"].max())
        assert row.samples_drawn == pytest.approx(sum(drawn) / len(drawn))


def test_no_tokens_figure_when_every_arm_draws_the_same_tokens_per_sample(built):
    root, report = built
    groups = raw_groups(root)
    per_job = groups.groupby("job")[["samples_total", "tokens_total"]].max()
    rates = [per_job.loc[jobs, "tokens_total"].sum() / per_job.loc[jobs, "samples_total"].sum()
             for jobs in (["0", "1"], ["2", "3"])]
    text = both_pages(report)
    same = max(rates) <= min(rates) * 1.05
    assert same == ("its curves against tokens repeat those against samples: no figure" in text)
    assert same == (not (report.parent / "figures" / "budget_tokens.png").exists())


def test_saturated_difficulties_are_those_at_an_edge_at_every_k():
    curves = pd.DataFrame({"difficulty": ["1", "1", "2", "2", "3", "3", "all", "all"],
                           "mean": [0.97, 1.0, 0.5, 0.99, 0.0, 0.04, 1.0, 1.0]})
    assert saturated(curves) == ["1", "3"]  # "2" moves, "all" is never left out


def test_forest_plot_keeps_to_pairs_with_the_first_arm_when_there_are_many(tmp_path):
    from itertools import combinations

    from analysis.sections.significance import FAMILY_COLUMNS, FOREST_PAIRS, section

    arms = [f"sampler=s{i}" for i in range(5)]  # 10 pairs
    rows = [dict.fromkeys(FAMILY_COLUMNS, 0.0) | {"metric": "wasted_frac", "a": a, "b": b, "ci_low": -0.1,
                                                  "ci_high": 0.1, "p_holm": 1.0, "seeds_a": 2, "seeds_b": 2}
            for a, b in combinations(arms, 2)]
    tests = section(pd.DataFrame(rows))
    write_report(tmp_path, [tests.text], [tests.files], tmp_path)
    text = tests.text
    assert len(rows) > FOREST_PAIRS
    assert "With 10 pairs of arms, the figure shows those with sampler=s0 only; the table has all." in text
    assert len(pd.read_csv(tmp_path / "tables" / "tests.csv")) == 10
    with Image.open(tmp_path / "figures" / "differences.png") as image:
        assert image.size[1] < 1000  # four rows (s0 against each other arm): about 610 px; ten would be 1400
