"""Binomial facts the analyses rest on: the exact (Clopper–Pearson) interval of a proportion, the
ratio of binomial coefficients behind pass@k and the tie prediction, and the chance that a group
of G samples at pass rate p ties."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import betaincinv, gammaln


def binom_ci(successes: ArrayLike, trials: ArrayLike, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson (exact) interval for a binomial proportion; NaN where there are no trials."""
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    tail = (1 - level) / 2
    with np.errstate(invalid="ignore", divide="ignore"):  # the quantiles of Beta(k, n-k+1) and Beta(k+1, n-k)
        low = np.where(k > 0, betaincinv(k, n - k + 1, tail), 0.0)
        high = np.where(k < n, betaincinv(k + 1, n - k, 1 - tail), 1.0)
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



def tie_probability(p: ArrayLike, group_size: ArrayLike) -> np.ndarray:
    """P_tie = p^G + (1-p)^G: the chance that G independent samples at pass rate p all agree."""
    p = np.asarray(p, dtype=float)
    return p**group_size + (1 - p) ** group_size


def expected_samples_to_nontie(p: ArrayLike, group_size: ArrayLike) -> np.ndarray:
    """G / (1 - P_tie): samples spent on a prompt, redrawing tied groups, until one is not tied
    (rounds are geometric); inf where p is 0 or 1."""
    with np.errstate(divide="ignore"):
        return np.asarray(group_size, dtype=float) / (1 - tie_probability(p, group_size))

