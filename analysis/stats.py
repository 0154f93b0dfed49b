"""Small statistical helpers shared by the analyses: exact binomial intervals, bootstrap means
(plain, clustered, and of differences over prompts and seeds), exact tests across seeds with
Holm's correction and the minimum detectable effect, and the ratio of binomial coefficients
behind pass@k and the tie prediction."""

from __future__ import annotations

import warnings
from itertools import combinations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import comb, gammaln
from scipy.stats import beta
from scipy.stats import t as student_t


def binom_ci(successes: ArrayLike, trials: ArrayLike, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson (exact) interval for a binomial proportion; NaN where there are no trials."""
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    tail = (1 - level) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, beta.ppf(tail, k, n - k + 1), 0.0)
        high = np.where(k < n, beta.ppf(1 - tail, k + 1, n - k), 1.0)
    empty = n <= 0
    return np.where(empty, np.nan, low), np.where(empty, np.nan, high)


def comb_ratio(a: ArrayLike, b: ArrayLike, k: ArrayLike) -> np.ndarray:
    """C(a, k) / C(b, k) for 0 <= a <= b and k <= b, elementwise; 0 where a < k.

    It is the chance that k draws without replacement from b items all land among a given a.
    Log-gamma keeps it finite where the coefficients themselves would overflow.
    """
    a, b, k = (np.asarray(x, dtype=float) for x in (a, b, k))
    safe_a = np.maximum(a, k)  # the a < k entries are replaced by 0 below; avoid gammaln(<=0)
    log_ratio = gammaln(safe_a + 1) - gammaln(safe_a - k + 1) - gammaln(b + 1) + gammaln(b - k + 1)
    # the ends exactly: a == b must give 1 (pass@k of a never-solved prompt is 0, not 1e-16)
    return np.where(a < k, 0.0, np.where(a == b, 1.0, np.exp(log_ratio)))


def bootstrap_mean_ci(
    values: ArrayLike, n_boot: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the column means of `values` (rows = units, e.g. prompts).

    Each resample is a row of counts (how often each unit was drawn), so all columns share the
    draws and the means are one matrix product.
    """
    x = np.asarray(values, dtype=float)
    x = x.reshape(len(x), -1)  # (units, columns)
    units = len(x)
    draws = np.random.default_rng(seed).integers(0, units, size=(n_boot, units))  # (n_boot, units)
    cells = (np.arange(n_boot)[:, None] * units + draws).ravel()
    counts = np.bincount(cells, minlength=n_boot * units).reshape(n_boot, units)
    means = counts @ x / units  # (n_boot, columns)
    tail = (1 - level) / 2
    return np.quantile(means, tail, axis=0), np.quantile(means, 1 - tail, axis=0)


def bootstrap_counts(units: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, units): how often each unit is drawn in each resample with replacement."""
    draws = rng.integers(0, units, size=(n_boot, units))
    cells = (np.arange(n_boot)[:, None] * units + draws).ravel()
    return np.bincount(cells, minlength=n_boot * units).reshape(n_boot, units)


def cluster_ratio_ci(cluster: ArrayLike, numerator: ArrayLike, denominator: ArrayLike, n_boot: int = 1000,
                     level: float = 0.95, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap intervals of sum(numerator) / sum(denominator) when rows come in clusters
    (e.g. every group of one prompt, in every job): whole clusters are resampled, so rows of a cluster
    move together and their correlation widens the interval as it should. `numerator` and
    `denominator` are (rows,) or (rows, ratios): several ratios share one set of resamples."""
    codes, inverse = np.unique(np.asarray(cluster), return_inverse=True)
    num, den = (np.asarray(x, dtype=float).reshape(len(inverse), -1) for x in (numerator, denominator))
    sums = np.zeros((len(codes), num.shape[1] * 2))  # (clusters, 2 * ratios)
    np.add.at(sums, inverse, np.hstack([num, den]))
    counts = bootstrap_counts(len(codes), n_boot, np.random.default_rng(seed))  # (n_boot, clusters)
    resampled = counts @ sums  # (n_boot, 2 * ratios)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = resampled[:, : num.shape[1]] / resampled[:, num.shape[1]:]
    tail = (1 - level) / 2
    with warnings.catch_warnings():  # a ratio with no denominator in any resample is NaN, as it should be
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(ratios, tail, axis=0), np.nanquantile(ratios, 1 - tail, axis=0)
    return (low, high) if np.ndim(numerator) > 1 else (low[0], high[0])


def bootstrap_difference_ci(a: ArrayLike, b: ArrayLike, paired: bool, n_boot: int = 2000, level: float = 0.95,
                            seed: int = 0) -> tuple[float, float]:
    """Interval of mean(b) - mean(a) for scores of (prompts, seeds) per arm, rows the same prompts:
    prompts are resampled (both arms together) and seeds within each arm as well, so the interval
    covers other prompts and other trained models. `paired`: column s of a and b share a seed
    (same init and prompt stream), and seeds are resampled as pairs."""
    a, b = (np.asarray(x, dtype=float).reshape(len(x), -1) for x in (a, b))  # (prompts, seeds)
    rng = np.random.default_rng(seed)
    prompts = bootstrap_counts(len(a), n_boot, rng)  # (n_boot, prompts)
    if paired:
        diffs = _grid_means(b - a, prompts, bootstrap_counts(a.shape[1], n_boot, rng))
    else:
        diffs = (_grid_means(b, prompts, bootstrap_counts(b.shape[1], n_boot, rng))
                 - _grid_means(a, prompts, bootstrap_counts(a.shape[1], n_boot, rng)))
    tail = (1 - level) / 2
    return float(np.quantile(diffs, tail)), float(np.quantile(diffs, 1 - tail))


def _grid_means(scores: np.ndarray, prompts: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """(n_boot,) means of (prompts, seeds) scores under resample counts of each: (n_boot, prompts), (n_boot, seeds)."""
    return ((prompts @ scores) * seeds).sum(1) / (scores.shape[0] * scores.shape[1])


def t_mean_ci(values: ArrayLike, level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of the mean of one value per unit (seeds): NaN below two."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float("nan"), float("nan")
    half = float(student_t.ppf((1 + level) / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return float(x.mean() - half), float(x.mean() + half)


def t_difference_ci(a: ArrayLike, b: ArrayLike, paired: bool, level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of mean(b) - mean(a) from one value per seed a side: of the per-seed
    differences when `paired`, else with unequal variances (Satterthwaite's degrees of freedom).
    Not a percentile bootstrap: from 8 seeds that sees (S−1)/S of their variance and undercovers
    (about 89% for a nominal 95%; simulated in tests/test_analysis_stats.py). NaN below two a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(len(a), len(b)) < 2:
        return float("nan"), float("nan")
    if paired:
        return t_mean_ci(b - a, level)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    centre, se = b.mean() - a.mean(), np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else 1.0
    half = float(student_t.ppf((1 + level) / 2, df) * se)
    return float(centre - half), float(centre + half)


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
    """The smallest p-value `seed_test` can return with these seed counts: below alpha or no effect,
    however large, can be detected."""
    return 2 / 2**seeds_a if paired else 2 / float(comb(seeds_a + seeds_b, seeds_b))


def min_detectable_effect(sd: float, seeds_a: int, seeds_b: int, paired: bool, alpha: float = 0.05,
                          power: float = 0.8) -> float:
    """The difference a test across seeds detects with `power` at level `alpha`, given the spread
    `sd` of per-seed differences (paired) or of per-seed values (unpaired), by the t approximation;
    inf where the exact test cannot reach alpha at all (too few seeds)."""
    if smallest_p(seeds_a, seeds_b, paired) > alpha or not np.isfinite(sd):
        return float("inf")
    df = seeds_a - 1 if paired else seeds_a + seeds_b - 2
    scale = sd / np.sqrt(seeds_a) if paired else sd * np.sqrt(1 / seeds_a + 1 / seeds_b)
    return float((student_t.ppf(1 - alpha / 2, df) + student_t.ppf(power, df)) * scale)


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
