"""Strategies at equal budget: counts against a hand-made table, bands across seeds, what trained
counted by training unit (recorded, or recounted for old runs), on synthetic runs drawn by the
samplers' own rules."""

import numpy as np
import pandas as pd
import pytest

from analysis.data.load import load
from analysis.measures.spend import (
    RECORDED,
    RECOUNTED,
    across_seeds,
    budget_curves,
    per_job_spend,
    sample_counts,
    spend,
)
from fixtures.synthetic import job_config, prompt_pool, simulate_groups, write_sweep


def job_groups(job, sampler, ties, used=None, n_correct=None, group_size=4, tokens=10, rounds=None):
    """One job's groups in drawing order, one step each; running totals as the trainer writes them.
    No `n_informative` column: counted as in a run written before it existed."""
    ties = np.asarray(ties, bool)
    used = np.ones(len(ties), bool) if used is None else np.asarray(used, bool)
    n_correct = np.where(ties, group_size, 2) if n_correct is None else np.asarray(n_correct)
    return pd.DataFrame({"job": job, "sampler": sampler, "seed": int(job[-1]), "group_size": group_size, "tie": ties,
                         "used": used, "n_correct": n_correct, "tokens": tokens, "step": np.arange(len(ties)),
                         "prompt_id": "p", "difficulty": "1", "reward_mean": n_correct / group_size,
                         "round": 0 if rounds is None else np.asarray(rounds),
                         "samples_total": group_size * np.arange(1, len(ties) + 1),
                         "tokens_total": tokens * np.arange(1, len(ties) + 1)})


def table(*jobs):
    groups = pd.concat(jobs, ignore_index=True)
    return groups.assign(job=groups["job"].astype("category"), sampler=groups["sampler"].astype("category"))


def test_counts_at_equal_samples():
    groups = table(
        job_groups("f0", "fixed", ties=[1, 0, 0, 1, 0, 0, 0, 0]),  # 32 samples
        job_groups("r0", "resample", ties=[1, 1, 0, 1, 0, 0], used=[0, 0, 1, 0, 1, 1]),  # 24 samples: the common budget
    )
    curves = budget_curves(groups, ["sampler"], points=3).set_index(["job", "budget"])
    assert list(curves.loc["f0"].index) == [8.0, 16.0, 24.0]
    last = curves.loc[("f0", 24.0)]
    assert (last.samples, last.informative, last.wasted) == (24, 16, 8)  # 6 groups: 2 tied (used, but no signal)
    assert last.wasted_frac == pytest.approx(8 / 24)
    first = curves.loc[("r0", 8.0)]
    assert (first.informative, first.wasted, first.train_accuracy_round0) == (0, 8, 1.0)  # two tied all-correct
    assert curves.loc[("r0", 24.0)].informative == 12


def test_equal_tokens_axis_and_unknown_budget():
    groups = table(job_groups("a0", "fixed", ties=[0] * 4, tokens=10),
                   job_groups("b0", "other", ties=[0] * 4, tokens=5))
    curves = budget_curves(groups, ["sampler"], budget="tokens", points=2)
    assert curves["budget"].max() == 20  # job b0 drew 20 tokens in all
    assert curves.groupby("job", observed=True)["samples"].max().to_dict() == {"a0": 8, "b0": 16}
    with pytest.raises(ValueError, match="must be one of samples, tokens"):
        budget_curves(groups, ["sampler"], budget="steps")


def test_training_accuracy_counts_first_rounds_only():
    # a redraw (round 1) of an all-wrong prompt would pull the accuracy down; it is left out
    groups = table(job_groups("r0", "resample", ties=[0, 1, 0], n_correct=[2, 0, 3], rounds=[0, 0, 1]))
    curves = budget_curves(groups, ["sampler"], points=1)
    assert curves["train_accuracy_round0"].item() == pytest.approx(2 / 8)


def test_bands_across_seeds():
    rng = np.random.default_rng(3)
    groups = table(*[job_groups(f"{sampler[0]}{seed}", sampler, ties=rng.random(40) < rate)
                     for sampler, rate in (("fixed", 0.2), ("resample", 0.6)) for seed in range(3)])
    curves = budget_curves(groups, ["sampler"], points=4)
    bands = across_seeds(curves, ["sampler"])
    final = curves[curves["budget"] == curves["budget"].max()]
    for sampler, rows in final.groupby("sampler", observed=True):
        band = bands[(bands["sampler"] == sampler) & (bands["budget"] == final["budget"].max())].iloc[0]
        assert band.seeds == 3
        assert band.wasted_frac == pytest.approx(rows["wasted_frac"].mean())
        assert (band.wasted_frac_low, band.wasted_frac_high) == (rows["wasted_frac"].min(), rows["wasted_frac"].max())
    spent = spend(groups, ["sampler"]).set_index("sampler")
    assert spent.loc["fixed", "jobs"] == 3 and spent.loc["fixed", "samples"] == 3 * 40 * 4
    per_job = per_job_spend(groups, ["sampler"])
    assert sorted(per_job["seed"].astype(int)) == [0, 0, 1, 1, 2, 2]


def raw_groups(root):
    """Every groups part of a sweep with its rewards, read directly (not through analysis.load)."""
    frames = []
    for part in sorted(root.glob("*/groups/part-*.parquet")):
        frames.append(pd.read_parquet(part).assign(job=part.parent.parent.name))
    return pd.concat(frames, ignore_index=True)


def mixed_unit_recount(raw):
    """Informative samples per job, counted from scratch: the used groups of a prompt at a step are
    its unit under pool=all; a unit whose pooled rewards are not all equal trains every sample."""
    used = raw[raw["used"]]
    rewards = used.groupby(["job", "step", "prompt_id"])["rewards"].agg(lambda r: np.concatenate(list(r)))
    mixed = rewards.map(lambda r: r.min() != r.max())
    return (rewards.map(len) * mixed).groupby(level="job").sum()


@pytest.mark.parametrize("sampler", ["fixed", "resample_on_tie", "dynamic", "band"])
def test_synthetic_runs_follow_the_samplers_rules(sampler):
    prompts = prompt_pool(levels=("1", "2", "3", "4"), per_level=8)
    cfg = job_config(sampler, max_steps=12, prompts_per_step=6, max_rounds=3, band_lo=0.1, band_hi=0.9)
    g = simulate_groups(prompts, cfg, "r").to_pandas()
    trained = g[g["used"]]
    assert trained.groupby("step")["unit"].nunique().le(6).all()  # at most B units a step
    assert g["unit"].isna().eq(~g["used"]).all()  # a unit exactly where the group trained
    assert g["round"].max() <= (2 if sampler == "resample_on_tie" else 0)  # max_rounds = 3 rounds in all
    assert g["samples_total"].tolist() == g["group_size"].cumsum().tolist()
    pooled = trained.groupby(["step", "unit"])["correct"].agg(lambda c: np.concatenate(list(c)))
    mixed = pooled.map(lambda c: 0 < c.sum() < len(c))
    informative = trained.groupby(["step", "unit"])["n_informative"].sum()
    assert (informative == pooled.map(len) * mixed).all()  # eq. 3: every sample of a mixed unit, none of a tied one
    if sampler == "resample_on_tie":  # pool=all: a prompt's rounds are one unit, all used
        assert (trained.groupby(["step", "unit"])["prompt_id"].nunique() == 1).all()
        assert g["used"].all()
        redrawn = g[g["round"] > 0]
        before = g.set_index(["step", "prompt_id", "round"])["tie"]
        assert all(before[(s, p, r - 1)] for s, p, r in zip(redrawn["step"], redrawn["prompt_id"], redrawn["round"]))
    if sampler == "dynamic":
        assert not trained["tie"].any() and (trained.groupby("step").size() == 6).all()


def test_wasted_counts_what_trained_and_fails_on_per_round_ties(tmp_path):
    prompts = prompt_pool(levels=("1", "2", "3", "4"), per_level=8)
    configs = [job_config(s, seed=0, max_steps=20, prompts_per_step=8, max_rounds=3) for s in ("fixed",
                                                                                            "resample_on_tie")]
    root = write_sweep(tmp_path / "sweep", configs, prompts)
    groups = load(root, tables=("groups",)).groups
    counts, how = sample_counts(groups)
    assert how == RECORDED
    per_job = counts.groupby(groups["job"].astype(str)).sum()
    truth = mixed_unit_recount(raw_groups(root))
    assert per_job["informative"].to_dict() == truth.to_dict()
    spent = spend(groups, ["sampler"]).set_index("sampler")
    assert spent.loc["resample_on_tie", "wasted_frac"] == pytest.approx(
        1 - truth["1"] / groups[groups["job"] == "1"]["group_size"].sum())
    # counting each round's own tie, as the report did before, charges pooled tied rounds as wasted
    old = (~groups["tie"] & groups["used"]) * groups["group_size"]
    assert old.groupby(groups["job"].astype(str), observed=True).sum()["1"] < truth["1"]
    # runs written before the column existed: the recount from used, tie and reward_mean agrees
    recounted, how = sample_counts(groups.drop(columns="n_informative"))
    assert how == RECOUNTED and (recounted["informative"] == counts["informative"]).all()


def test_the_training_accuracy_at_the_common_budget_is_named_by_its_window_and_recounted(tmp_path):
    """Beside `wasted_frac` over the whole budget, the training accuracy there is of the last window alone (a
    learning run's 0.281 against 0.517 over the run): its column and sentence say so, and it equals a recount of the
    first-round samples of that window; the run-wide accuracy is another number."""
    from analysis.report import build_report

    configs = [job_config("fixed", group_size=4, seed=s, max_steps=20, prompts_per_step=4) for s in (0, 1)]
    sweep = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=8), learn=0.2)
    text = (build_report(sweep, tmp_path / "report").parent / "DETAILS.md").read_text()
    shown = pd.read_csv(tmp_path / "report" / "tables" / "common_budget_tokens.csv")
    assert "train_accuracy_round0" not in shown.columns and "train_accuracy_round0_last_window" in shown.columns
    groups = [pd.read_parquet(sweep / str(j) / "groups") for j in (0, 1)]
    end = min(int(g["tokens_total"].max()) for g in groups)  # the common budget: the most every job drew
    lo = end * 19 / 20
    last = [g[(g["tokens_total"] > lo) & (g["tokens_total"] <= end) & (g["round"] == 0)] for g in groups]
    recount = np.mean([w["n_correct"].sum() / w["group_size"].sum() for w in last])
    assert shown["train_accuracy_round0_last_window"].item() == pytest.approx(recount)
    whole = np.mean([g.loc[g["tokens_total"] <= end, "n_correct"].sum()
                     / g.loc[g["tokens_total"] <= end, "group_size"].sum() for g in groups])
    assert abs(whole - recount) > 0.05  # learning: the last window is not the whole run
    assert (f"At {end:,} tokens: `wasted_frac` is over every sample each job drew up to it; "
            f"`train_accuracy_round0_last_window` over the first-round samples of the last window alone (from "
            f"{lo:,.0f} to {end:,} tokens), not the whole run.") in text  # as the report prints it
