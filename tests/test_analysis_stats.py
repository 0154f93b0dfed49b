"""Tests across seeds and clustered intervals, against brute force and textbook examples."""

import itertools

import numpy as np
import pandas as pd
import pytest

from analysis.stats.exact_tests import holm, holm_detectable_effect, min_detectable_effect, seed_test, smallest_p
from analysis.stats.intervals import (
    bootstrap_counts,
    cluster_ratio_ci,
    cluster_ratio_cis,
    nan_percentiles,
    seed_difference_ci,
    seeded_counts,
    t_difference_ci,
    t_difference_cis,
)
from analysis.stats.seeds import compare_arms_by_seed, compare_values, with_holm


def test_sign_flip_test_equals_enumeration_by_hand():
    d = np.array([0.3, -0.1, 0.2, 0.25])
    stats = [abs(sum(s * x for s, x in zip(signs, d))) for signs in itertools.product([1, -1], repeat=4)]
    expected = np.mean([s >= abs(d.sum()) - 1e-12 for s in stats])
    assert seed_test(np.zeros(4), d, paired=True) == pytest.approx(expected)
    assert seed_test(np.zeros(3), np.ones(3), paired=True) == 0.25 == smallest_p(3, 3, True)  # 2 of 8 patterns


def test_permutation_test_equals_enumeration_by_hand():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 6.0])
    pooled = np.r_[a, b]
    diffs = [abs(pooled[list(s)].mean() - np.delete(pooled, list(s)).mean())
             for s in itertools.combinations(range(5), 2)]
    assert seed_test(a, b, paired=False) == pytest.approx(np.mean([x >= abs(b.mean() - a.mean()) - 1e-12
                                                                   for x in diffs]))
    assert smallest_p(3, 2, False) == pytest.approx(2 / 10)
    assert np.isnan(seed_test(a[:1], b, paired=False))


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04 times 3, 2, 1 = 0.03, 0.04, 0.04 (monotone), in the original order
    assert holm([0.04, 0.01, np.nan, 0.02]).tolist()[:2] == pytest.approx([0.04, 0.03])
    assert np.isnan(holm([0.04, 0.01, np.nan, 0.02])[2]) and holm([0.5, 0.9]).tolist() == [1.0, 1.0]


def test_minimum_detectable_effect_shrinks_with_seeds_and_is_inf_below_the_exact_tests_floor():
    assert min_detectable_effect(0.02, 3, 3, paired=True) == np.inf  # 2/8 > 0.05: nothing is detectable
    assert min_detectable_effect(0.02, 5, 5, paired=True) == np.inf  # 2/32 > 0.05 still
    six, ten = min_detectable_effect(0.02, 6, 6, True), min_detectable_effect(0.02, 10, 10, True)
    assert 0 < ten < six < np.inf
    assert ten == pytest.approx(0.02 / np.sqrt(10) * (2.262 + 0.883), rel=0.01)  # t(0.975, 9) + t(0.8, 9)


def test_the_detectable_difference_is_given_only_where_the_exact_test_can_reject():
    """At α: inf where the smallest p is at or above it (4 paired seeds: 0.125). Under Holm over a family of m
    tests: inf where 2/2^S >= α/m (the first bar), else the t approximation at α/m, recounted with scipy.stats."""
    from scipy import stats

    assert smallest_p(4, 4, True) == 0.125 and min_detectable_effect(0.067, 4, 4, True) == np.inf
    at_alpha = min_detectable_effect(0.02, 8, 8, True)
    assert at_alpha == pytest.approx((stats.t.ppf(0.975, 7) + stats.t.ppf(0.8, 7)) * 0.02 / np.sqrt(8))
    assert holm_detectable_effect(at_alpha, 8, 8, True, family=1) == at_alpha
    assert holm_detectable_effect(at_alpha, 8, 8, True, family=3) == pytest.approx(  # 2/256 < 0.05/3
        (stats.t.ppf(1 - 0.05 / 6, 7) + stats.t.ppf(0.8, 7)) * 0.02 / np.sqrt(8))
    assert holm_detectable_effect(at_alpha, 8, 8, True, family=7) == np.inf  # 2/256 = 0.0078 >= 0.05/7 = 0.0071
    assert holm_detectable_effect(np.inf, 12, 12, True, family=3) == np.inf
    a = pd.Series([0.1, 0.3, 0.2, 0.5, 0.4, 0.6, 0.3, 0.2])
    b = pd.Series([0.2, 0.5, 0.2, 0.6, 0.6, 0.7, 0.5, 0.3])
    alone = compare_values(a, b)
    sd = np.std(b - a, ddof=1)
    assert alone["mde"] == pytest.approx((stats.t.ppf(0.975, 7) + stats.t.ppf(0.8, 7)) * sd / np.sqrt(8))
    table = with_holm(pd.DataFrame([{**alone, "metric": "m"}] * 3 + [{**alone, "metric": "alone"}]))
    assert table["family"].tolist() == [3, 3, 3, 1]
    holm_bar = (stats.t.ppf(1 - 0.05 / 6, 7) + stats.t.ppf(0.8, 7)) * sd / np.sqrt(8)
    assert table["mde"].tolist() == pytest.approx([holm_bar] * 3 + [alone["mde"]])


def test_compare_values_pairs_seeds_by_name():
    a = {"0": 0.5, "1": 0.6, "2": 0.7, "3": 0.4, "4": 0.55, "5": 0.65}
    b = {k: v + 0.1 for k, v in a.items()}
    result = compare_values(pd.Series(a), pd.Series(dict(reversed(b.items()))))
    assert result["paired"] and result["difference"] == pytest.approx(0.1)
    assert result["p_value"] == pytest.approx(2 / 64)  # every seed moved the same way: the most extreme pattern
    assert result["ci_low"] == pytest.approx(0.1) and result["ci_high"] == pytest.approx(0.1)
    table = with_holm(pd.DataFrame([result, result]))
    assert table["p_holm"].tolist() == pytest.approx([4 / 64, 4 / 64])


def test_a_metric_an_arm_never_measured_makes_no_comparison_of_it():
    """algo.beta = 0 logs no KL (NaN): its pairs on kl are no comparison, not a row of empty cells counted
    among the report's tests; the other metrics and the arms that measured it are compared as ever."""
    jobs = pd.DataFrame([{"seed": s, "beta": beta, "sampler": sampler,
                          "reward": 0.5 + 0.1 * s + 0.05 * (sampler == "b"),
                          "kl": np.nan if beta == 0 else 0.01 + 0.001 * s + 0.002 * (sampler == "b")}
                         for s in range(4) for beta in (0.0, 0.04) for sampler in ("a", "b")])
    rows = compare_arms_by_seed(jobs, ["sampler", "beta"], ["reward", "kl"])
    assert sorted(rows["metric"]) == ["kl", "reward", "reward"]  # fixed sampler within each beta: 2 pairs
    kl = rows[rows["metric"] == "kl"].iloc[0]
    assert "0.04" in kl["a"] and kl["seeds_a"] == kl["seeds_b"] == 4 and kl["difference"] == pytest.approx(0.002)


def test_clustered_interval_is_wider_than_rows_as_independent():
    # 20 prompts x 10 groups; a prompt's groups all tie or all do not
    cluster = np.repeat(np.arange(20), 10)
    tie = np.repeat(np.arange(20) % 2 == 0, 10).astype(float)
    low, high = cluster_ratio_ci(cluster, tie, np.ones_like(tie), n_boot=2000)
    iid_low, iid_high = cluster_ratio_ci(np.arange(200), tie, np.ones_like(tie), n_boot=2000)
    assert high - low > 2.5 * (iid_high - iid_low)  # about sqrt(10) wider


def test_difference_interval_is_students_t_over_each_seeds_mean_over_the_prompts():
    """(prompts, seeds) scores: each seed's mean over the prompts, then Student's t of the per-seed differences
    (paired) or Welch's (unpaired), recounted with scipy.stats; every column of (prompts, seeds, K) scores is
    the interval of that column alone; NaN from one seed a side."""
    from scipy import stats

    rng = np.random.default_rng(0)
    prompts = rng.random((40, 1))
    a = prompts + rng.normal(0, 0.05, (40, 4))  # (prompts, seeds)
    b = prompts + 0.02 + rng.normal(0, 0.05, (1, 4)) + rng.normal(0, 0.05, (40, 4))  # a shift per trained model
    d = b.mean(0) - a.mean(0)
    want = stats.t.interval(0.95, 3, d.mean(), stats.sem(d))
    assert seed_difference_ci(a, b, paired=True) == pytest.approx(want, rel=1e-12)
    x, y = a.mean(0), b[:, :3].mean(0)
    welch = stats.ttest_ind(y, x, equal_var=False).confidence_interval(0.95)
    assert seed_difference_ci(a, b[:, :3], paired=False) == pytest.approx((welch.low, welch.high), rel=1e-12)
    wide_a, wide_b = np.stack([a, a * 2, a + 1], axis=2), np.stack([b, b * 2, b - 1], axis=2)  # (40, 4, 3)
    low, high = seed_difference_ci(wide_a, wide_b, paired=True)
    for k in range(3):
        assert (low[k], high[k]) == pytest.approx(seed_difference_ci(wide_a[:, :, k], wide_b[:, :, k], True))
    assert np.isnan(seed_difference_ci(a[:, :1], b[:, :1], paired=True)).all()
    assert np.isnan(t_difference_cis(np.zeros((1, 3)), np.ones((4, 3)), paired=False)).all()


@pytest.mark.parametrize("paired", [True, False])
def test_seed_interval_covers_the_true_difference_at_its_level(paired):
    """8 seeds a side, a true difference of 0.02 with seed-level noise (shared by a pair when paired):
    Student's t covers about 95% (at 4 and 12 seeds of simulated held-out sweeps, and against the percentile
    bootstrap it replaced: tests/test_interval_coverage.py)."""
    rng = np.random.default_rng(1)
    hits = []
    for _ in range(400):
        shared = rng.normal(0, 0.03, 8)
        a = (shared if paired else rng.normal(0, 0.03, 8)) + rng.normal(0, 0.01, 8)
        b = (shared if paired else rng.normal(0, 0.03, 8)) + 0.02 + rng.normal(0, 0.01, 8)
        low, high = t_difference_ci(a, b, paired)
        hits.append(low <= 0.02 <= high)
    assert 0.92 <= np.mean(hits) <= 0.98
    assert t_difference_ci([1.0, 2.0], [3.0], paired=False) == (pytest.approx(np.nan, nan_ok=True),) * 2


def test_every_cells_interval_at_once_equals_each_cell_bootstrapped_alone():
    """cluster_ratio_cis draws each cell's resamples from its own generator: the same numbers, to the
    bit, as cluster_ratio_ci on that cell's rows alone, whatever the other cells hold."""
    rng = np.random.default_rng(5)
    rows = 3000
    cell = rng.integers(0, 7, rows)
    cluster = rng.integers(0, 60, rows)
    tie = rng.random(rows) < 0.4
    gap = np.where(rng.random(rows) < 0.8, tie - rng.random(rows), 0.0)  # floats: summation order matters
    has = rng.random(rows) < 0.8
    cell[cell == 6] = 5  # cell 6 empty would be no cell: codes stay dense
    low, high = cluster_ratio_cis(cell, cluster, [tie, gap], [None, has], n_boot=300)
    for c in range(6):
        mine = cell == c
        alone = cluster_ratio_ci(cluster[mine], np.column_stack([tie[mine], gap[mine]]),
                                 np.column_stack([np.ones(mine.sum()), has[mine]]), n_boot=300)
        np.testing.assert_array_equal(low[c], alone[0])
        np.testing.assert_array_equal(high[c], alone[1])
    # and cluster_ratio_ci itself against a plain loop over resamples (clusters drawn with replacement)
    draws = np.random.default_rng(0).integers(0, 60, size=(300, 60))
    sums = [np.bincount(cluster, weights=w, minlength=60) for w in (tie.astype(float), np.ones(rows))]
    ratios = [sum(sums[0][d]) / sum(sums[1][d]) for d in draws]
    plain = np.quantile(ratios, [0.025, 0.975])
    np.testing.assert_allclose(cluster_ratio_ci(cluster, tie, np.ones(rows), n_boot=300), plain, rtol=1e-12)


def test_nan_percentiles_are_nanquantile_column_by_column():
    values = np.random.default_rng(2).random((400, 6))
    values[::3, 1] = np.nan
    values[:, 4] = np.nan
    low, high = nan_percentiles(values, 0.9)
    tail = (1 - 0.9) / 2  # as the intervals compute it (not quite 0.05)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):  # the all-NaN column
        np.testing.assert_array_equal(low, np.nanquantile(values, tail, axis=0))
        np.testing.assert_array_equal(high, np.nanquantile(values, 1 - tail, axis=0))


def test_seeded_counts_are_a_fresh_generators_resamples():
    counts = seeded_counts(37, 200, 4)
    np.testing.assert_array_equal(counts, bootstrap_counts(37, 200, np.random.default_rng(4)))
    assert (counts.sum(axis=1) == 37).all() and not counts.flags.writeable


def test_quantiles_from_scipy_special_are_scipy_stats_own():
    """The analysis takes its Beta and Student's t quantiles from scipy.special (scipy.stats costs a second
    to import, in the report's second process too): they must be scipy.stats' values exactly, every edge
    (no success, every success, no trial) included."""
    from scipy.stats import beta, t

    from analysis.stats.binomial import binom_ci
    from analysis.stats.intervals import t_mean_ci

    n = np.repeat(np.arange(0, 60), 61)
    k = np.tile(np.arange(0, 61), 60)
    k, n = k[k <= n], n[k <= n]
    for level in (0.95, 0.9, 0.99):
        low, high = binom_ci(k, n, level)
        tail = (1 - level) / 2
        with np.errstate(invalid="ignore", divide="ignore"):
            want_low = np.where(k > 0, beta.ppf(tail, k, n - k + 1), 0.0)
            want_high = np.where(k < n, beta.ppf(1 - tail, k + 1, n - k), 1.0)
        np.testing.assert_array_equal(low, np.where(n == 0, np.nan, want_low))
        np.testing.assert_array_equal(high, np.where(n == 0, np.nan, want_high))
    x = np.random.default_rng(0).random(7)
    half = t.ppf(0.975, 6) * x.std(ddof=1) / np.sqrt(7)
    assert t_mean_ci(x) == (float(x.mean() - half), float(x.mean() + half))
    assert min_detectable_effect(1.0, 6, 6, True) == float((t.ppf(0.975, 5) + t.ppf(0.8, 5)) / np.sqrt(6))


def test_a_mean_interval_is_cut_to_the_values_its_mean_can_take():
    """pass@1 of 0, 0 and 0.3 over three seeds: t's interval runs from -0.33 to 0.53; a share's is cut at 0 and 1,
    an unbounded mean's is t's own, and in 2,000 draws of 3 seeds near 0 the cut interval covers exactly as often."""
    from analysis.stats.intervals import SHARE, t_mean_ci

    low, high = t_mean_ci([0.0, 0.0, 0.3])
    assert low < -0.3 and t_mean_ci([0.0, 0.0, 0.3], bounds=SHARE) == (0.0, high)
    assert t_mean_ci([0.9, 1.0, 1.0], bounds=SHARE)[1] == 1.0
    rng = np.random.default_rng(0)
    draws = rng.binomial(20, 0.05, size=(2_000, 3)) / 20  # pass@1 of 20 prompts a seed, true mean 0.05
    cover = [[lo <= 0.05 <= hi for lo, hi in (t_mean_ci(d, bounds=b) for d in draws)]
             for b in ((-np.inf, np.inf), SHARE)]
    assert cover[0] == cover[1]
