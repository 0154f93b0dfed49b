"""Findings a reviewer accepts, each rule checked on a generated sweep whose truth is set,
every number recounted from the sweep's raw tables:

- a difference carried by two held-out prompts: the test across seeds and Student's t interval over the same
  per-seed values (both for new seeds on these prompts) agree, and the report says which population that is;
- arms that differ only in how many optimizer steps they took: a tie-fraction difference at equal
  samples that vanishes at equal steps is called training progress;
- p adjusted over the family the report declares (plain p where a family holds one test);
- the tie prediction per arm, never pooled; wasted samples by difficulty; each arm's samples per job.
"""

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from reference import both_pages, raw

from analysis.render.markdown import cell
from analysis.report import build_report
from analysis.sections.in_words import calibration_text
from analysis.stats.exact_tests import holm
from fixtures.synthetic import eval_table, job_config, prompt_pool, write_sweep

SEEDS = range(6)  # the exact sign-flip test's floor is 2/64 < 0.05


def build(root: Path) -> tuple[str, Path]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = build_report(root)
    return both_pages(report), report.parent


def findings(text: str) -> list[str]:
    """Each comparison in words (the second page's long form behind the Findings)."""
    section = text.split("## Each comparison in words", 1)[1].split("\n## ", 1)[0]
    return [line[2:] for line in section.splitlines() if line.startswith("- ")]


def line_of(lines: list[str], metric: str) -> str:
    return next(line for line in lines if line.startswith(f"{metric}:"))


@pytest.fixture(scope="module")
def prompt_effect(tmp_path_factory):
    """Two arms alike in everything but two held-out prompts: at its final checkpoint arm b answers
    them (pass rate 1, where a has 0). Every other held-out prompt is always or never solved, so each
    paired seed differs by exactly 2/48: the seeds agree every time, and a new draw of prompts may hold
    neither of the two."""
    root = tmp_path_factory.mktemp("prompt_effect") / "sweep"
    train = prompt_pool(levels=("1", "2"), per_level=8)
    held = prompt_pool(levels=("1", "2"), per_level=24, seed=5)
    held["p"] = (np.arange(len(held)) % 2).astype(float)  # solved or not, never by chance
    configs = [job_config("fixed", group_size=4, seed=seed, max_steps=6, prompts_per_step=4) for seed in SEEDS]
    configs += [job_config("fixed", group_size=4, seed=seed, max_steps=6, prompts_per_step=4) for seed in SEEDS]
    for cfg in configs[len(SEEDS):]:
        cfg["algo"]["beta"] = 0.0
    write_sweep(root, configs, train, eval_prompts=held, eval_n=8)
    learned = held.copy()
    learned.loc[[0, 2], "p"] = 1.0  # two unsolved prompts, solved by arm b at the end
    for i, cfg in enumerate(configs[len(SEEDS):], start=len(SEEDS)):
        part = sorted((root / str(i) / "eval").glob("*.parquet"))[-1]
        old = pq.read_table(part)
        step, drawn = int(old["step"][0].as_py()), old["samples_total"][0].as_py()
        pq.write_table(eval_table(learned, f"run-{i}", [step], 8, cfg["seed"], [drawn]), part)
    return (root, *build(root))


def test_a_difference_on_these_prompts_is_one_for_new_seeds_on_these_prompts(prompt_effect):
    """Every paired seed differs by exactly 2/48: for new seeds on these 48 prompts the difference is 2/48, and
    the interval (Student's t over the per-seed differences: no spread, no width) and the exact test (every seed
    agrees: its floor) both say so. Neither resamples prompts, and the words claim no other population."""
    root, text, out = prompt_effect
    tests = pd.read_csv(out / "tables" / "tests.csv").set_index("metric")
    row = tests.loc["held-out pass@1"]
    assert row["difference"] == pytest.approx(2 / 48) and row["b_higher"] == len(SEEDS) and row["b_lower"] == 0
    assert row["p_value"] == pytest.approx(2 / 2 ** len(SEEDS))  # every paired seed agrees: the exact floor
    assert row["interval"] == "seeds"
    assert row["ci_low"] == pytest.approx(2 / 48) and row["ci_high"] == pytest.approx(2 / 48)  # no spread over seeds
    line = line_of(findings(text), "held-out pass@1")
    assert f"p = {cell(row['p_value'], 3)}" in line and "Holm" not in line
    assert "95% interval over seeds" in line and "a detectable difference" in line, line
    assert "new draw of prompts" not in line
    pages = text + (out / "DETAILS.md").read_text()  # the held-out comparisons say what their interval covers
    assert "for new seeds on these held-out prompts" in pages


def test_one_test_a_family_gives_a_plain_p_and_the_tests_page_says_so(prompt_effect):
    root, text, out = prompt_effect
    tests = pd.read_csv(out / "tables" / "tests.csv")
    assert (tests["family"] == 1).all() and np.allclose(tests["p_holm"], tests["p_value"])
    assert not any("Holm p" in line for line in findings(text))
    details = (out / "DETAILS.md").read_text()
    assert "with two arms a family holds one test and `p_holm` equals `p_value`" in details


@pytest.fixture(scope="module")
def step_progress(tmp_path_factory):
    """fixed and resample_on_tie drawing from one model that learns with optimizer steps alone: fixed
    takes 24 steps, resample_on_tie 12 (as if its redraws spent the budget). First rounds are drawn
    alike at every step, so over steps 1-12 the arms' tie fractions are one distribution."""
    root = tmp_path_factory.mktemp("step_progress") / "sweep"
    train = prompt_pool(levels=("1", "2", "3"), per_level=8)
    configs = [job_config(s, group_size=4, seed=seed, max_steps=24, prompts_per_step=6)
               for s in ("fixed", "resample_on_tie") for seed in SEEDS]
    stops = [24] * len(SEEDS) + [12] * len(SEEDS)
    write_sweep(root, configs, train, stop_steps=stops, learn=0.15)
    return (root, *build(root))


def test_a_difference_of_training_progress_is_said_at_equal_updates(step_progress):
    root, text, out = step_progress
    groups = raw(root, "groups")
    first = groups[groups["round"] == 0]
    arm = {str(i): ("fixed" if i < len(SEEDS) else "resample_on_tie") for i in range(2 * len(SEEDS))}
    whole = first.groupby("job")["tie"].mean().groupby(arm).mean()
    early = first[first["step"] <= 12].groupby("job")["tie"].mean().groupby(arm).mean()
    tests = pd.read_csv(out / "tables" / "tests.csv").set_index("metric")
    at_samples, at_steps = tests.loc["tie_frac (first rounds)"], tests.loc["tie_frac (first rounds, equal updates)"]
    assert at_samples[["mean_a", "mean_b"]].tolist() == pytest.approx([whole["fixed"], whole["resample_on_tie"]])
    assert at_steps[["mean_a", "mean_b"]].tolist() == pytest.approx([early["fixed"], early["resample_on_tie"]])
    assert at_steps["interval"] == "seeds, the first 12 updates"  # an update every step: steps 1-12
    line = line_of(findings(text), "tie_frac (first rounds)")
    assert "a detectable difference" in line.split(" At equal samples")[0]  # learning fills all-correct ties
    assert "At equal samples fixed took 24 updates and resample_on_tie 12; at equal updates (the first 12 updates)" \
        in line
    assert line.endswith("no detectable difference, so the difference holds at equal samples, not at equal updates "
                         "(whose interval excludes it): it is one of training progress (the arms took different "
                         "updates), not of the arms at equal updates."), line
    dynamics = next(line for line in findings(text) if line.startswith("Training dynamics over the same"))
    steps = raw(root, "steps")
    kl = steps[steps["step"] <= 12].groupby("job")["kl"].mean().groupby(arm).mean()
    assert "train reward (first rounds)" in dynamics and f"kl {cell(kl['fixed'], 3)} vs" in dynamics


def test_equal_updates_are_not_compared_where_every_job_took_the_same_updates(prompt_effect):
    root, text, out = prompt_effect
    tests = pd.read_csv(out / "tables" / "tests.csv")
    assert not tests["metric"].str.contains("equal updates").any()
    assert not any("same updates" in line for line in findings(text))


def test_the_tie_prediction_is_per_arm_and_recounts(step_progress):
    root, text, out = step_progress
    groups = raw(root, "groups")
    first = groups[groups["round"] == 0]
    line = next(line for line in findings(text) if line.startswith("Tie prediction"))
    assert "each arm over its own groups" in line
    for name, jobs in (("fixed", {str(i) for i in SEEDS}), ("resample_on_tie", {str(i + len(SEEDS)) for i in SEEDS})):
        mine = first[first["job"].isin(jobs)]
        assert f"{name}: first-round tie fraction {cell(mine['tie'].mean(), 3)} [" in line
        assert f"of {len(mine):,} groups" in line


def test_waste_is_said_by_difficulty_and_budgets_per_arm(step_progress):
    root, text, out = step_progress
    groups = raw(root, "groups")
    groups["arm"] = np.where(groups["job"].astype(int) < len(SEEDS), "fixed", "resample_on_tie")
    groups["wasted"] = groups["group_size"] - groups["n_informative"]
    sums = groups.groupby(["arm", "difficulty"])[["wasted", "group_size"]].sum()
    frac = sums["wasted"] / sums["group_size"]
    line = line_of(findings(text), "wasted_frac")
    for level in ("1", "2", "3"):
        assert f"{level} {cell(frac['fixed', level], 3)} → {cell(frac['resample_on_tie', level], 3)}" in line
    gaps = (frac["resample_on_tie"] - frac["fixed"])
    widest = gaps.abs().idxmax()
    assert f"the gap is widest at {widest} ({cell(gaps[widest], 3)})" in line
    drawn = groups.groupby(["arm", "job"])["group_size"].sum()
    intro = text[text.index("## Each comparison in words"):].splitlines()[2]
    assert f"fixed {drawn['fixed'].iloc[0]:,}" in intro and drawn["fixed"].nunique() == 1
    r = drawn["resample_on_tie"]
    assert f"resample_on_tie {r.mean():,.0f} on average ({r.min():,}–{r.max():,})" in intro


def test_three_arms_adjust_over_the_pairs_on_each_metric(tmp_path):
    train = prompt_pool(levels=("1", "2"), per_level=6)
    configs = [job_config(s, group_size=4, seed=seed, max_steps=6, prompts_per_step=4)
               for s in ("fixed", "resample_on_tie", "dynamic") for seed in range(3)]
    text, out = build(write_sweep(tmp_path / "sweep", configs, train))
    tests = pd.read_csv(out / "tables" / "tests.csv")
    for metric, rows in tests.groupby("metric"):
        assert (rows["family"] == 3).all(), metric
        assert np.allclose(rows["p_holm"], holm(rows["p_value"].to_numpy()))


def test_a_prediction_check_that_cannot_fail_is_not_called_passed():
    """Prompts seen at exactly two steps of a window predict each other: observed − predicted is 0 in every
    resample. That is no evidence of calibration, and the Findings must not word it as a check passed."""
    row = {"arm": "sampler=fixed", "groups": 1200, "prompts": 64, "tie_frac": 0.5, "ci_low": 0.4, "ci_high": 0.6,
           "predicted_tie_frac": 0.5, "predicted_groups": 240, "observed_minus_predicted": 0.0, "diff_ci_low": 0.0,
           "diff_ci_high": 0.0}
    text = calibration_text(pd.DataFrame([row]))
    assert "no detectable difference" not in text and "has no power here" in text
    moved = calibration_text(pd.DataFrame([{**row, "observed_minus_predicted": 0.01, "diff_ci_low": -0.002,
                                            "diff_ci_high": 0.02}]))
    assert "no detectable difference" in moved and "no power" not in moved


def test_the_arm_ahead_says_what_it_had_more_of_than_the_next():
    """Nothing resolved at equal updates, yet the arm with the highest mean drew 2.6x the samples of the next: its
    bullet says so (a verdict names its cost); an arm ahead with no more of anything says nothing more."""
    from analysis.measures.verdict import COLUMNS, Alignment
    from analysis.sections.findings import _alignment

    table = pd.DataFrame([["sampler=dynamic", 5, 0.489, 0.46, 0.52, "a", 20, 826, 9187],
                          ["sampler=fixed", 5, 0.472, 0.46, 0.48, "a", 20, 320, 3535],
                          ["sampler=spo", 5, 0.470, 0.46, 0.48, "a", 20, 900, 9900]], columns=list(COLUMNS))
    tests = pd.DataFrame(columns=["metric"])
    said = _alignment(Alignment("equal updates", "m", "20 updates", table, [], 3), tests)
    assert "dynamic has the highest mean (0.489 [0.46, 0.52]), with samples ×2.6, generated tokens ×2.6 the next " \
        "arm's (fixed); no ordering of the 3 pairs is resolved." in said
    said = _alignment(Alignment("equal updates", "m", "20 updates", table.iloc[[1, 0, 2]], [], 3), tests)
    assert "fixed has the highest mean (0.472 [0.46, 0.48]); no ordering" in said
