"""Strategies at equal budget: counts against a hand-made table, bands and the test across seeds."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ttest_ind

from analysis.resampling import across_seeds, budget_curves, compare_at_budget, spend


def job_groups(job, sampler, ties, used=None, n_correct=None, group_size=4, tokens=10):
    """One job's groups in drawing order; running totals as the trainer writes them."""
    ties = np.asarray(ties, bool)
    used = np.ones(len(ties), bool) if used is None else np.asarray(used, bool)
    n_correct = np.where(ties, group_size, 2) if n_correct is None else np.asarray(n_correct)
    return pd.DataFrame({"job": job, "sampler": sampler, "seed": int(job[-1]), "group_size": group_size, "tie": ties,
                         "used": used, "n_correct": n_correct, "tokens": tokens,
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
    assert (last.samples, last.informative, last.wasted) == (24, 4, 8)  # 6 groups: 2 tied (used, but no signal)
    assert last.informative_per_1k == pytest.approx(1000 * 4 / 24) and last.wasted_frac == pytest.approx(8 / 24)
    first = curves.loc[("r0", 8.0)]
    assert (first.informative, first.wasted, first.accuracy) == (0, 8, 1.0)  # two tied all-correct groups
    assert curves.loc[("r0", 24.0)].informative == 3


def test_equal_tokens_axis_and_unknown_budget():
    groups = table(job_groups("a0", "fixed", ties=[0] * 4, tokens=10),
                   job_groups("b0", "other", ties=[0] * 4, tokens=5))
    curves = budget_curves(groups, ["sampler"], budget="tokens", points=2)
    assert curves["budget"].max() == 20  # job b0 drew 20 tokens in all
    assert curves.groupby("job", observed=True)["samples"].max().to_dict() == {"a0": 8, "b0": 16}
    with pytest.raises(ValueError, match="must be one of samples, tokens"):
        budget_curves(groups, ["sampler"], budget="steps")


def seeded_sweep():
    rng = np.random.default_rng(3)
    jobs = [job_groups(f"{sampler[0]}{seed}", sampler, ties=rng.random(40) < rate)
            for sampler, rate in (("fixed", 0.2), ("resample", 0.6)) for seed in range(3)]
    return table(*jobs)


def test_bands_across_seeds_and_welch_test_at_the_common_budget():
    groups = seeded_sweep()
    curves = budget_curves(groups, ["sampler"], points=4)
    bands = across_seeds(curves, ["sampler"])
    final = curves[curves["budget"] == curves["budget"].max()]
    for sampler, rows in final.groupby("sampler", observed=True):
        band = bands[(bands["sampler"] == sampler) & (bands["budget"] == final["budget"].max())].iloc[0]
        assert band.seeds == 3
        assert band.informative_per_1k == pytest.approx(rows["informative_per_1k"].mean())
        assert (band.informative_per_1k_low, band.informative_per_1k_high) == (rows["informative_per_1k"].min(),
                                                                               rows["informative_per_1k"].max())
    tests = compare_at_budget(curves, ["sampler"]).set_index("metric")
    fixed = final[final["sampler"] == "fixed"]["informative_per_1k"]
    resample = final[final["sampler"] == "resample"]["informative_per_1k"]
    welch = ttest_ind(fixed, resample, equal_var=False)
    assert tests.loc["informative_per_1k", "p_value"] == pytest.approx(welch.pvalue)
    assert tests.loc["informative_per_1k", "arm_a"] == "sampler=fixed"
    assert tests["test"].str.startswith("Welch").all()


def test_one_seed_gives_no_p_value_and_spend_sums_jobs():
    groups = seeded_sweep()
    one_seed = groups[groups["job"].isin(["f0", "r0"])]
    tests = compare_at_budget(budget_curves(one_seed, ["sampler"]), ["sampler"])
    assert tests["p_value"].isna().all() and (tests["seeds_a"] == 1).all()
    spent = spend(groups, ["sampler"]).set_index("sampler")
    assert spent.loc["fixed", "jobs"] == 3 and spent.loc["fixed", "samples"] == 3 * 40 * 4
    informative = (~groups["tie"] & groups["used"]).groupby(groups["sampler"], observed=True).sum()
    assert spent["informative"].to_dict() == informative.to_dict()
