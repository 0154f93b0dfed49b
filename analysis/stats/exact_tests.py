"""Exact tests across seeds, without a normality assumption (sign-flip over paired seeds, permutation
otherwise), the smallest p they can reach, the minimum detectable effect, and Holm's correction."""

from __future__ import annotations

from itertools import combinations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import comb, stdtrit  # stdtrit(df, p): Student's t quantile


def seed_test(a: ArrayLike, b: ArrayLike, paired: bool) -> float:
    """Exact two-sided p-value for mean(b) != mean(a) over seeds, without a normality assumption.
    Paired: a sign-flip test on the per-seed differences (every one of the 2^S sign patterns);
    unpaired: a permutation test over every split of the pooled seeds. NaN below two seeds a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(len(a), len(b)) < 2:
        return float("nan")
    tol = 1e-12  # a pattern as extreme as the observed one, up to rounding
    if paired:
        d = b - a
        signs = 1 - 2 * ((np.arange(2 ** len(d))[:, None] >> np.arange(len(d))) & 1)  # (2^S, S)
        stats = np.abs(signs @ d)
        return float(np.mean(stats >= abs(d.sum()) - tol))
    pooled = np.r_[a, b]
    splits = np.array(list(combinations(range(len(pooled)), len(b))))  # (splits, len(b))
    total = pooled.sum()
    in_b = pooled[splits].sum(1)
    stats = np.abs(in_b / len(b) - (total - in_b) / len(a))
    return float(np.mean(stats >= abs(b.mean() - a.mean()) - tol))


def smallest_p(seeds_a: int, seeds_b: int, paired: bool) -> float:
    """The smallest p-value `seed_test` can return with these seed counts: at or above alpha no effect,
    however large, can be detected."""
    return 2 / 2**seeds_a if paired else 2 / float(comb(seeds_a + seeds_b, seeds_b))


def min_detectable_effect(sd: float, seeds_a: int, seeds_b: int, paired: bool, alpha: float = 0.05,
                          power: float = 0.8) -> float:
    """The difference a test across seeds detects with `power` at level `alpha`, given the spread
    `sd` of per-seed differences (paired) or of per-seed values (unpaired), by the t approximation;
    inf where the exact test cannot reject at `alpha` at all (its smallest p is at or above it: 4 paired
    seeds can give no p below 0.125, whatever the difference)."""
    if smallest_p(seeds_a, seeds_b, paired) >= alpha or not np.isfinite(sd):
        return float("inf")
    return float(_mde_factor(seeds_a, seeds_b, paired, alpha, power) * _mde_scale(sd, seeds_a, seeds_b, paired))


def holm_detectable_effect(mde: float, seeds_a: int, seeds_b: int, paired: bool, family: int,
                           alpha: float = 0.05, power: float = 0.8) -> float:
    """`min_detectable_effect` (`mde`, computed at `alpha`) moved to Holm's first bar over a family of
    `family` tests, alpha / family: no test of the family can reject unless the smallest p clears that
    bar, so a difference is detectable only where it can. inf where the exact test cannot go below the
    bar with these seeds (2 / 2^S >= alpha / family); `mde` itself where the family holds one test."""
    if family <= 1 or not np.isfinite(mde):
        return float(mde)
    bar = alpha / family
    if smallest_p(seeds_a, seeds_b, paired) >= bar:
        return float("inf")
    return float(mde * _mde_factor(seeds_a, seeds_b, paired, bar, power)
                 / _mde_factor(seeds_a, seeds_b, paired, alpha, power))


def _mde_factor(seeds_a: int, seeds_b: int, paired: bool, alpha: float, power: float) -> float:
    """t_{1-alpha/2} + t_{power} at the test's degrees of freedom."""
    df = seeds_a - 1 if paired else seeds_a + seeds_b - 2
    return float(stdtrit(df, 1 - alpha / 2) + stdtrit(df, power))


def _mde_scale(sd: float, seeds_a: int, seeds_b: int, paired: bool) -> float:
    """The standard error of the difference from the spread `sd`."""
    return sd / np.sqrt(seeds_a) if paired else sd * np.sqrt(1 / seeds_a + 1 / seeds_b)


def holm(p_values: ArrayLike) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (NaN stays NaN, and is not counted)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order]) if m else np.zeros(0)
    out[order] = np.minimum(adjusted, 1.0)
    return out

