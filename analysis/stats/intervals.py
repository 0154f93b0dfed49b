"""Intervals: percentile bootstraps as matrix products over resample counts (plain, clustered, and of
ratios) where the units resampled are many (prompts), and Student's t intervals over seeds.

Never a bootstrap over seeds: from S seeds a percentile bootstrap sees (S−1)/S of their variance and
takes its quantiles from a distribution of a few points: at 4 seeds the bootstrap over prompts and seeds
the held-out comparisons used covered about 88% of simulated truths where Student's t covers 95%
(tests/test_interval_coverage.py). An arm difference over seeds is Student's t of the per-seed values
(`t_difference_ci`; of score matrices, `seed_difference_ci`: each seed's mean over the prompts), the
quantity the exact test beside it tests.

Every bootstrap draws its resamples as `bootstrap_counts` does: `rng.integers(0, units, (n_boot,
units))`, one row per resample; the same generator and seed give the same resamples.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import stdtrit  # stdtrit(df, p): Student's t quantile

from analysis.data.codes import dense_ranks

COUNTED_AT_ONCE = 1 << 18  # draws a bincount takes at a time: its temporaries stay small, and are reused


def bootstrap_counts(units: int, n_boot: int, rng: np.random.Generator, dtype: type = np.int64) -> np.ndarray:
    """(n_boot, units): how often each unit is drawn in each resample with replacement, as `dtype`.
    Counted a block of resamples at a time (each block's draws offset into its own cells, in place), straight
    into the result: a large table (1000 x 2000 units: 16 MB) is not counted into a second one, then copied."""
    cells = rng.integers(0, units, size=(n_boot, units))
    counts = np.empty((n_boot, units), dtype)
    rows = max(1, COUNTED_AT_ONCE // max(units, 1))
    for start in range(0, n_boot, rows):
        block = cells[start:start + rows]
        block += np.arange(0, len(block) * units, units)[:, None]  # each resample's own range of cells
        counts[start:start + rows] = np.bincount(block.ravel(), minlength=block.size).reshape(block.shape)
    return counts


@lru_cache(maxsize=8)
def seeded_counts(units: int, n_boot: int, seed: int) -> np.ndarray:
    """`bootstrap_counts` from a fresh generator seeded `seed`, as floats (what a matrix product with
    float sums casts them to anyway): every cell of a table that resamples this many units draws the
    same resamples, so they are drawn once (read-only; the last few kept)."""
    counts = bootstrap_counts(units, n_boot, np.random.default_rng(seed), float)
    counts.flags.writeable = False
    return counts


def nan_percentiles(values: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The (1 - level) / 2 and (1 + level) / 2 quantiles of each column of (n_boot, columns) `values`,
    NaNs left out (an all-NaN column gives NaN): `np.nanquantile` column by column, with the columns
    that hold no NaN done in one call."""
    tail = (1 - level) / 2
    low, high = np.full(values.shape[1], np.nan), np.full(values.shape[1], np.nan)
    clean = ~np.isnan(values).any(axis=0)
    if clean.any():
        low[clean], high[clean] = np.quantile(values[:, clean], [tail, 1 - tail], axis=0)
    with warnings.catch_warnings():  # a ratio with no denominator in any resample is NaN, as it should be
        warnings.simplefilter("ignore", RuntimeWarning)
        for j in np.flatnonzero(~clean):
            low[j], high[j] = np.nanquantile(values[:, j], [tail, 1 - tail])
    return low, high


def bootstrap_mean_ci(
    values: ArrayLike, n_boot: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the column means of `values` (rows = units, e.g. prompts; never
    seeds: a few units are no distribution to take quantiles of, `t_mean_ci` is).

    Each resample is a row of counts (how often each unit was drawn), so all columns share the
    draws and the means are one matrix product.
    """
    x = np.asarray(values, dtype=float)
    x = x.reshape(len(x), -1)  # (units, columns)
    units = len(x)
    means = seeded_counts(units, n_boot, seed) @ x / units  # (n_boot, columns)
    tail = (1 - level) / 2
    return np.quantile(means, tail, axis=0), np.quantile(means, 1 - tail, axis=0)


def cluster_ratio_ci(cluster: ArrayLike, numerator: ArrayLike, denominator: ArrayLike, n_boot: int = 1000,
                     level: float = 0.95, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap intervals of sum(numerator) / sum(denominator) when rows come in clusters
    (e.g. every group of one prompt, in every job): whole clusters are resampled, so rows of a cluster
    move together and their correlation widens the interval as it should. `numerator` and
    `denominator` are (rows,) or (rows, ratios): several ratios share one set of resamples."""
    rank = dense_ranks(np.asarray(cluster))
    num, den = (np.asarray(x, dtype=float).reshape(len(rank), -1) for x in (numerator, denominator))
    low, high = cluster_ratio_cis(np.zeros(len(rank), np.int64), rank, list(num.T), list(den.T), n_boot, level, seed)
    return (low[0], high[0]) if np.ndim(numerator) > 1 else (low[0, 0], high[0, 0])


def cluster_ratio_cis(cell: np.ndarray, cluster: np.ndarray, numerators: Sequence[np.ndarray],
                      denominators: Sequence[np.ndarray | None], n_boot: int = 1000, level: float = 0.95,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`cluster_ratio_ci` of every cell at once: rows carry their cell (codes 0..cells-1) and cluster
    (non-negative codes, in the order the clusters are resampled in), one (rows,) array per ratio's
    numerator and denominator (None: every row counts 1); returns (cells, ratios) lows and highs.
    Each cell resamples its own clusters with a generator seeded `seed`, as if it were bootstrapped
    alone, so its interval does not depend on the other cells."""
    cell = np.asarray(cell, dtype=np.int64)
    cells = int(cell.max()) + 1 if len(cell) else 0
    width = int(cluster.max(initial=0)) + 1
    cluster_of, keys = dense_ranks(cell * width + cluster, keys=True)  # (cell, cluster) pairs, sorted
    sums_of: dict[int, np.ndarray] = {}  # each distinct column summed once: a cluster's rows added in row order

    def sums(column: np.ndarray | None) -> np.ndarray:
        if id(column) not in sums_of:
            sums_of[id(column)] = np.bincount(cluster_of, weights=column, minlength=len(keys)).astype(float)
        return sums_of[id(column)]

    ratios_n = len(numerators)
    table = np.column_stack([sums(c) for c in (*numerators, *denominators)])  # (clusters, 2 * ratios)
    bounds = np.searchsorted(keys // width, np.arange(cells + 1))
    ratios = np.empty((n_boot, cells * ratios_n))
    for c, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):  # one matrix product per cell
        resampled = seeded_counts(int(hi - lo), n_boot, seed) @ table[lo:hi]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios[:, c * ratios_n:(c + 1) * ratios_n] = resampled[:, :ratios_n] / resampled[:, ratios_n:]
    low, high = nan_percentiles(ratios, level)
    return low.reshape(cells, ratios_n), high.reshape(cells, ratios_n)


SHARE = (0.0, 1.0)  # the values a share's mean can take: t_mean_ci's bounds for one


def t_mean_ci(values: ArrayLike, level: float = 0.95, bounds: tuple[float, float] = (-np.inf, np.inf)
              ) -> tuple[float, float]:
    """Student's t interval of the mean of one value per unit (seeds): NaN below two. Cut to `bounds`, the values a
    mean can take (a share [0, 1], a resource [0, inf)): at a few scattered seeds t's interval leaves them, and cut
    it still covers every mean it did, since the mean lies within them."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float("nan"), float("nan")
    half = float(stdtrit(len(x) - 1, (1 + level) / 2) * x.std(ddof=1) / np.sqrt(len(x)))
    return max(float(x.mean() - half), bounds[0]), min(float(x.mean() + half), bounds[1])


def t_difference_ci(a: ArrayLike, b: ArrayLike, paired: bool, level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of mean(b) - mean(a) from one value per seed a side: of the per-seed
    differences when `paired`, else Welch's (unequal variances, Satterthwaite's degrees of freedom).
    It covers at its level from 3 seeds on where the per-seed values are about normal; a percentile
    bootstrap of the same seeds does not (module docstring). NaN below two seeds a side: one seed shows
    nothing of how seeds vary."""
    low, high = t_difference_cis(a, b, paired, level)
    return float(low), float(high)


def t_difference_cis(a: ArrayLike, b: ArrayLike, paired: bool, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """`t_difference_ci` of every column at once: `a` (seeds_a, ...) and `b` (seeds_b, ...), one row per
    seed (row s of both the same seed when `paired`), e.g. (seeds, K) for pass@k at k = 1..K; returns the
    lows and highs, shaped as a row. NaN below two seeds a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    shape = np.broadcast_shapes(a.shape[1:], b.shape[1:])
    if min(len(a), len(b)) < 2:
        return np.full(shape, np.nan), np.full(shape, np.nan)
    quantile = (1 + level) / 2
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired seeds must match: {len(a)} vs {len(b)}")
        d = b - a
        centre = d.mean(axis=0)
        half = stdtrit(len(d) - 1, quantile) * d.std(axis=0, ddof=1) / np.sqrt(len(d))
    else:
        va, vb = a.var(axis=0, ddof=1) / len(a), b.var(axis=0, ddof=1) / len(b)
        centre, se = b.mean(axis=0) - a.mean(axis=0), np.sqrt(va + vb)
        with np.errstate(invalid="ignore", divide="ignore"):  # no spread on either side: no width, df moot
            df = np.where(se > 0, (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)), 1.0)
        half = stdtrit(df, quantile) * se
    return np.asarray(centre - half, dtype=float), np.asarray(centre + half, dtype=float)


def seed_difference_ci(a: ArrayLike, b: ArrayLike, paired: bool,
                       level: float = 0.95) -> tuple[float, float] | tuple[np.ndarray, np.ndarray]:
    """Student's t interval of mean(b) - mean(a) for scores of (prompts, seeds) per arm (or (prompts, seeds,
    K): one interval per column), rows the same prompts: each seed's value is its mean over the prompts, and
    the interval is `t_difference_ci` of those (paired: column s of a and b share a seed). What it covers: new
    seeds (trained models) scored on these prompts, the question the exact test across seeds answers; the
    prompts are held fixed, not resampled. Floats for (prompts, seeds), arrays of K for (prompts, seeds, K);
    NaN below two seeds a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    low, high = t_difference_cis(a.mean(axis=0), b.mean(axis=0), paired, level)  # (seeds, ...) each
    return (float(low), float(high)) if low.ndim == 0 else (low, high)
