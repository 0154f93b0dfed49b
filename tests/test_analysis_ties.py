"""Tie fractions and their prediction, on group tables drawn from known pass rates."""

import inspect

import numpy as np
import pandas as pd
import pytest

from analysis.measures.group_size import advise_group_size
from analysis.measures.ties import MIN_PROMPTS, predict_ties, tie_fractions
from analysis.stats.binomial import binom_ci, expected_samples_to_nontie, tie_probability
from fixtures.synthetic import job_config, prompt_pool, simulate_groups


def synthetic_groups(sampler="fixed", group_size=8, steps=60, seed=0):
    """Groups of one job on 300 prompts of known pass rate, each drawn at 10 steps or so."""
    prompts = prompt_pool(per_level=60, seed=3)
    cfg = job_config(sampler=sampler, group_size=group_size, seed=seed, max_steps=steps, prompts_per_step=50)
    groups = simulate_groups(prompts, cfg, run_id="r").to_pandas()
    return groups.assign(job="0"), prompts.set_index("prompt_id")


def test_theory_helpers():
    assert tie_probability(0.5, 2) == 0.5
    np.testing.assert_allclose(tie_probability([0.0, 1.0, 0.9], 8), [1, 1, 0.9**8 + 0.1**8])
    assert expected_samples_to_nontie(0.5, 2) == 4.0  # a group of 2 breaks the tie half the time
    assert expected_samples_to_nontie(1.0, 8) == np.inf


def test_group_size_advice():
    rates = np.random.default_rng(0).beta(0.5, 0.5, 500)
    plain = advise_group_size(rates)
    assert plain.best == 2  # with no per-group cost, signal per sample only falls with G
    per_1k = plain.table["informative_per_1k_samples"]
    assert per_1k.iloc[0] == pytest.approx(per_1k.iloc[1])  # G = 3 gives exactly as much
    costly = advise_group_size(rates, overhead=16)
    assert costly.best > 4
    per_1k = costly.table.set_index("group_size")["informative_per_1k_samples"]
    assert per_1k[costly.best] == per_1k.max()


@pytest.mark.parametrize("sampler", ["fixed", "resample_on_tie"])
def test_observed_tie_fractions_agree_with_the_known_pass_rates(sampler):
    groups, prompts = synthetic_groups(sampler)
    table = tie_fractions(groups, by=["group_size"], predicted=predict_ties(groups)).set_index("difficulty")
    p = prompts.loc[groups["prompt_id"], "p"].to_numpy()
    truth = pd.Series(tie_probability(p, 8), index=groups.index).groupby(groups["difficulty"]).mean()
    assert len(table) == 5 and (table["predicted_groups"] == table["groups"]).all()
    for level, row in table.iterrows():
        assert row.ci_low <= truth[level] <= row.ci_high, level
        assert row.ci_low <= row.predicted_tie_frac <= row.ci_high, level
    assert (table["all_correct"] + table["all_wrong"] == table["ties"]).all()  # the reward is binary
    assert table.loc["1", "all_correct_frac"] > table.loc["5", "all_correct_frac"]
    assert table.loc["5", "all_wrong_frac"] > table.loc["1", "all_wrong_frac"]


def test_correlated_samples_tie_more_than_predicted():
    """The check can fail: samples that copy each other within a group tie far more often."""
    groups, _ = synthetic_groups()
    rng = np.random.default_rng(1)
    copied = rng.random(len(groups)) < 0.5
    same = np.where(rng.random(len(groups)) < 0.5, 8, 0)
    groups["n_correct"] = np.where(copied, same, groups["n_correct"])
    groups["tie"] = (groups["n_correct"] == 0) | (groups["n_correct"] == 8)
    groups["tie_kind"] = np.where(groups["tie"], np.where(groups["n_correct"] == 8, "all_correct", "all_wrong"), None)
    table = tie_fractions(groups, by=["group_size"], predicted=predict_ties(groups))
    assert (table["predicted_tie_frac"] < table["ci_low"]).all()


def group(step, n_correct, rnd=0, prompt="p"):
    kind = {8: "all_correct", 0: "all_wrong"}.get(n_correct)
    return {"job": "0", "step": step, "prompt_id": prompt, "difficulty": "1", "round": rnd, "group_size": 8,
            "n_correct": n_correct, "tie": kind is not None, "tie_kind": kind}


def test_prediction_leaves_out_the_group_and_redraws():
    groups = pd.DataFrame([group(0, 8), group(0, 0, rnd=1), group(1, 4), group(2, 3, prompt="alone")])
    predicted = predict_ties(groups)
    # step 0 sees only step 1's round-0 draw (4 of 8): no 8 of those 8 agree
    # step 1 sees only step 0's round-0 draw (8 of 8), not the redraw: certain tie
    assert predicted.tolist()[:3] == [0.0, 0.0, 1.0]
    assert np.isnan(predicted.iloc[3])  # a prompt drawn once has no estimate of its own


def test_prediction_reads_training_draws_only():
    # held-out prompts never train, so eval rows could never stand in for a training prompt: no such path
    assert "eval" not in inspect.signature(predict_ties).parameters


def test_tie_intervals_are_clustered_by_prompt():
    # every group of a prompt ties or none does (pass rate 0 or 1 by prompt): 60 groups but only 6 prompts,
    # so the interval must be about as wide as for 6 independent draws, far wider than Clopper-Pearson on 60
    groups = pd.DataFrame([group(step, 8 if prompt < 3 else 4, prompt=f"p{prompt}")
                           for prompt in range(6) for step in range(10)]).assign(sampler="fixed")
    table = tie_fractions(groups, by=["group_size"])
    low, high = binom_ci(30, 60)
    assert table["tie_frac"].item() == 0.5 and table["prompts"].item() == 6
    assert table["ci_high"].item() - table["ci_low"].item() > 1.5 * (high - low)
    # below MIN_PROMPTS prompts there is nothing to resample: no interval at all
    few = tie_fractions(groups[groups["prompt_id"].isin([f"p{i}" for i in range(MIN_PROMPTS - 1)])], by=["group_size"])
    assert few[["ci_low", "ci_high"]].isna().all().all() and few["tie_frac"].notna().all()


def test_tie_fractions_by_step_window():
    groups, _ = synthetic_groups(steps=40)
    by_step = tie_fractions(groups, by=["group_size"], window=10)
    assert sorted(by_step["step_window"].unique()) == [0, 10, 20, 30, 40]  # steps 1..40
    assert by_step["groups"].sum() == len(groups)
    assert by_step["predicted_tie_frac"].isna().all()  # no prediction was given


@pytest.mark.parametrize("window", [None, 3, 10])
def test_a_prediction_in_windows_is_the_same_whichever_way_its_step_ids_are_made(window, monkeypatch):
    """`_pair_ids` makes (cell, step in window) ids straight from the cell's id where that table is small, else
    counts them (`_group_ids`): the rows each id holds, and so every prediction, bit for bit the same."""
    import analysis.measures.ties as ties

    groups, _ = synthetic_groups(sampler="resample_on_tie")
    straight = predict_ties(groups, window=window)
    rng = np.random.default_rng(0)
    cell, offset = rng.integers(0, 50, 5000), rng.integers(0, 7, 5000)
    assert (pd.factorize(ties._pair_ids(cell, offset))[0] == pd.factorize(ties._group_ids(cell, offset))[0]).all()
    monkeypatch.setattr(ties, "_pair_ids", ties._group_ids)  # the counted ids only
    counted = predict_ties(groups, window=window)
    assert np.array_equal(straight.to_numpy(), counted.to_numpy(), equal_nan=True) and straight.notna().any()
