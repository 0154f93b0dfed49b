"""Small statistical helpers shared by the analyses: exact binomial intervals, bootstrap means,
and the ratio of binomial coefficients behind pass@k and the tie prediction."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln
from scipy.stats import beta


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
