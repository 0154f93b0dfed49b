"""Verdicts that name their cost: generated sweeps of known truth, where one resource alone decides the held-out
scores, end in reports whose resolved orderings are attributed to that resource, and whose resource-to-target rows
recount from the eval parts with separate code.

- "per update": the held-out model improves with each optimizer step, whatever it drew; arms draw 4 or 8 prompts a
  step to one sample budget. At equal samples the arm of 4 wins with twice the updates; at equal updates nothing
  separates them.
- "per sample": the held-out model improves with the samples drawn, whatever its updates; the same arms. At equal
  samples nothing separates them; at equal updates the arm of 8 wins with twice the samples.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from reference import both_pages, findings

from fixtures.synthetic import job_config, prompt_pool, write_sweep

SEEDS = 8  # paired seeds: the exact sign-flip test reaches 2/2^8, below Holm's bar for one pair


def _sweep(root, per_samples: int | None):
    configs = [job_config("fixed", group_size=8, seed=seed, max_steps=64, prompts_per_step=size,
                          eval_every_samples=1024) for size in (8, 4) for seed in range(SEEDS)]
    for cfg in configs:
        cfg["max_samples"] = 2048
    return write_sweep(root, configs, prompt_pool(levels=("1", "2"), per_level=16),
                       eval_prompts=prompt_pool(levels=("1", "2"), per_level=32, seed=3), eval_n=8, eval_every=8,
                       eval_learn=0.04 if per_samples is None else 0.06, learn_per_samples=per_samples,
                       stop_steps=[32] * SEEDS + [64] * SEEDS)


def _report(root):
    from analysis.report import build_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_report(root)


def _tests(report) -> pd.DataFrame:
    return pd.read_csv(report.parent / "tables" / "tests.csv")


@pytest.fixture(scope="module")
def per_update(tmp_path_factory):
    return _report(_sweep(tmp_path_factory.mktemp("per_update") / "sweep", None))


@pytest.fixture(scope="module")
def per_sample(tmp_path_factory):
    return _report(_sweep(tmp_path_factory.mktemp("per_sample") / "sweep", 64))


def _row(tests: pd.DataFrame, metric: str) -> pd.Series:
    rows = tests[tests["metric"] == metric]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_arms_identical_per_update_win_at_equal_samples_by_their_updates(per_update):
    tests = _tests(per_update)
    at_samples, at_updates = _row(tests, "held-out pass@1"), _row(tests, "held-out pass@1 (equal updates)")
    assert at_samples["winner"] == "prompts_per_step=4" and at_samples["winner_had_more"].startswith("updates ×2")
    assert "samples" not in at_samples["winner_had_more"]  # equal samples: the budget ended both
    assert at_samples["updates_a"] == 32 and at_samples["updates_b"] == 64
    assert pd.isna(at_updates["winner"])  # identical per update: nothing to resolve there
    assert at_updates["updates_a"] == at_updates["updates_b"] == 32
    assert at_updates["samples_a"] == 2 * at_updates["samples_b"]


def test_arms_identical_per_sample_win_at_equal_updates_by_their_samples(per_sample):
    tests = _tests(per_sample)
    at_samples, at_updates = _row(tests, "held-out pass@1"), _row(tests, "held-out pass@1 (equal updates)")
    assert pd.isna(at_samples["winner"])  # identical per sample: nothing to resolve at equal samples
    assert at_updates["winner"] == "prompts_per_step=8"
    assert at_updates["winner_had_more"].startswith("samples ×2")
    assert "updates" not in at_updates["winner_had_more"]
    assert "8 won with more samples ×2" in both_pages(per_sample)  # each comparison in words
    # and the first screen: the arm ahead at equal updates and what it had more of
    assert any(line.startswith("**Equal updates**") and "8 ahead of 4, with more samples ×2" in line
               for line in findings(per_sample))


def test_no_resolved_ordering_goes_unattributed(per_update, per_sample):
    for report in (per_update, per_sample):
        tests = _tests(report)
        resolved = tests[tests["winner"].notna()]
        assert len(resolved) and resolved["winner_had_more"].notna().all()


def test_an_ordering_resolved_both_ways_is_named_a_reversal():
    """Attribution's own rule on a made table: one pair resolved one way at equal samples and the other at equal
    updates is a reversal on both rows; an unresolved twin makes none."""
    from analysis.measures.attribution import attributed

    def row(metric, difference, p):
        return {"metric": metric, "a": "x", "b": "y", "difference": difference, "ci_low": difference - 0.01,
                "ci_high": difference + 0.01, "p_holm": p, **{f"{r}_{s}": 1.0 for r in ("updates", "samples",
                                                                                        "tokens", "flops")
                                                                 for s in "ab"}}
    table = attributed(pd.DataFrame([row("held-out pass@1", 0.05, 0.01),
                                     row("held-out pass@1 (equal updates)", -0.05, 0.01),
                                     row("held-out pass@64", 0.05, 0.01),
                                     row("held-out pass@64 (equal updates)", -0.05, 0.5)]))
    assert table["reversal"].tolist()[:2] == ["reversed at equal updates", "reversed at equal samples"]
    assert table["reversal"].iloc[2:].isna().all()
    assert table["winner_had_more"].iloc[0] == "none"


def _recount_to_target(root, target: float, resource: str) -> dict[int, list[float]]:
    """Each job's resource at its first checkpoint past the base with mean pass@1 over prompts >= target,
    straight from the parts: {prompts_per_step: [value per job that reached it]} and the jobs that did not."""
    out: dict[int, list[float]] = {}
    for job in sorted(p for p in root.iterdir() if (p / "run.json").exists()):
        cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        rows = pq.read_table(job / "eval").to_pandas()
        steps = pq.read_table(job / "steps").to_pandas().sort_values("step")
        means = rows[rows["step"] > 0].groupby(["step", "prompt_id"])["correct"].mean().groupby("step").mean()
        hit = means[means >= target]
        value = np.nan
        if len(hit):
            step = int(hit.index.min())
            if resource == "updates":  # the synthetic steps table measured a gradient at every step
                value = float((steps["step"] <= step).sum())
            else:
                value = float(rows.loc[rows["step"] == step, "samples_total"].iloc[0])
        out.setdefault(cfg["prompts_per_step"], []).append(value)
    return out


@pytest.mark.parametrize("resource", ["updates", "samples"])
def test_resource_to_target_recounts_from_the_parts(per_update, resource):
    root = per_update.parent.parent
    table = pd.read_csv(per_update.parent / "tables" / "resource_to_target.csv")
    column = {"updates": "updates", "samples": "samples"}[resource]
    assert len(table) and column in table
    for _, row in table.iterrows():
        recount = _recount_to_target(root, row["pass1"], resource)[int(str(row["arm"]).split("=")[-1])]
        cell = str(row[column])
        if all(np.isfinite(recount)):
            assert float(cell.split(" [")[0].replace(",", "")) == pytest.approx(np.mean(recount), rel=1e-3)
        else:
            assert cell == f"{int(np.isfinite(recount).sum())} of {len(recount)} reached"


def test_steps_without_an_update_are_counted_per_arm_by_either_record():
    """The Findings' line on steps that took no update, from a steps table of each kind: `opt_steps` recorded, or
    (a run made before it) a NaN grad_norm, mu updates where it is finite."""
    from analysis.sections.budgets import skipped_updates_line

    steps = pd.DataFrame({
        "job": ["0"] * 4 + ["1"] * 4, "step": [1, 2, 3, 4] * 2, "sampler": ["fixed"] * 4 + ["dynamic"] * 4,
        "grad_norm": [0.5, np.nan, 0.4, np.nan] + [0.3] * 4, "algo.mu": [2] * 8,
        "opt_steps": [np.nan] * 4 + [2, 2, 0, 2]})
    line = skipped_updates_line(steps, ["sampler"])
    assert line.startswith("**Steps without an update**: fixed 2 of 4; dynamic 1 of 4 loop steps")
    assert skipped_updates_line(steps.assign(grad_norm=0.5, opt_steps=2), ["sampler"]) is None
    from analysis.data.resources import step_updates
    assert step_updates(steps)["updates"].tolist() == [2, 2, 4, 4, 2, 4, 4, 6]


def test_a_job_without_updates_is_named_where_equal_updates_would_be(tmp_path):
    """The same sweep with one job's steps table gone: its checkpoints' updates are not known, so the study has no
    equal-updates point; the Findings name the job and say what that takes away, rather than drop it silently."""
    import shutil

    root = _sweep(tmp_path / "sweep", None)
    shutil.rmtree(root / "3" / "steps")
    report = _report(root)
    said = findings(report)
    line = next(b for b in said if b.startswith("**Updates not known**"))
    assert line.startswith("**Updates not known**: job 3 records no updates at its checkpoints") and \
        "no held-out comparison is made at equal updates, the training dynamics there leave it out" in line, line
    assert not any(b.startswith("**Equal updates** (") for b in said)  # no verdict at a point that does not exist
    tests = _tests(report)
    assert not tests["metric"].str.startswith("held-out").where(tests["metric"].str.contains("equal updates"),
                                                                 False).any()
    dynamics = tests[tests["metric"] == "kl (equal updates)"].iloc[0]
    assert dynamics["seeds_a"] + dynamics["seeds_b"] == 2 * SEEDS - 1  # job 3 left out, as the line says
    assert "Updates not known" not in "\n".join(findings(_report(_sweep(tmp_path / "whole", None))))


def test_resource_to_target_intervals_never_go_below_zero():
    """Two seeds far apart (20 and 900 updates to the target): Student's t's low end is -5,000; a resource spent is
    never negative, so the interval is cut at 0 (it still covers the positive mean wherever the uncut one did)."""
    from analysis.measures.cost import resource_to_target

    curves = pd.DataFrame({"job": ["0", "0", "1", "1", "2", "2", "3", "3"], "step": [0, 5] * 4,
                           "checkpoint": ["base", "final"] * 4, "pass1": [0.2, 0.6] * 4,
                           "arm": ["a"] * 4 + ["b"] * 4, "updates": [0, 20, 0, 900, 0, 400, 0, 410],
                           **{r: [0.0, 1.0] * 4 for r in ("samples", "tokens", "flops")}})
    table = resource_to_target(curves, ["arm"], {"half": 0.5}).set_index(["arm", "resource"])
    wide, narrow = table.loc[("arm=a", "updates")], table.loc[("arm=b", "updates")]
    assert wide["mean"] == 460 and wide["ci_low"] == 0 and wide["ci_high"] > 5000
    assert 0 < narrow["ci_low"] < 405 < narrow["ci_high"]  # an interval above 0 is left as Student's t gives it
