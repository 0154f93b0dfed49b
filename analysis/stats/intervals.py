"""Intervals: percentile bootstraps as matrix products over resample counts (plain, clustered,
of ratios, and of differences over prompts and seeds), and Student's t intervals over seeds.

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
    """Percentile bootstrap interval of the column means of `values` (rows = units, e.g. prompts).

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


def bootstrap_difference_ci(a: ArrayLike, b: ArrayLike, paired: bool, n_boot: int = 2000, level: float = 0.95,
                            seed: int = 0) -> tuple[float, float]:
    """Interval of mean(b) - mean(a) for scores of (prompts, seeds) per arm, rows the same prompts:
    prompts are resampled (both arms together) and seeds within each arm as well, so the interval
    covers other prompts and other trained models. `paired`: column s of a and b share a seed
    (same init and prompt stream), and seeds are resampled as pairs."""
    a, b = (np.asarray(x, dtype=float).reshape(len(x), -1) for x in (a, b))  # (prompts, seeds)
    diffs = bootstrap_differences(a[:, :, None], b[:, :, None], paired, n_boot, seed)[:, 0]
    tail = (1 - level) / 2
    return float(np.quantile(diffs, tail)), float(np.quantile(diffs, 1 - tail))


def bootstrap_differences(a: np.ndarray, b: np.ndarray, paired: bool, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """(n_boot, K) resampled mean(b) - mean(a) of (prompts, seeds, K) scores, every one of the K columns
    (e.g. pass@k for k = 1..K) under the same resamples of prompts and seeds, drawn as
    `bootstrap_difference_ci` draws them: its interval is this one's column."""
    if paired:
        prompts, seeds = _difference_counts(len(a), a.shape[1], None, n_boot, seed)
        return _grid_means(b - a, prompts, seeds)
    prompts, seeds_b, seeds_a = _difference_counts(len(a), b.shape[1], a.shape[1], n_boot, seed)
    return _grid_means(b, prompts, seeds_b) - _grid_means(a, prompts, seeds_a)


@lru_cache(maxsize=16)
def _difference_counts(prompts: int, seeds: int, other_seeds: int | None, n_boot: int,
                       seed: int) -> tuple[np.ndarray, ...]:
    """The resample counts of `bootstrap_differences`, in the order it draws them from one generator
    seeded `seed`: prompts, then seeds (b's when unpaired), then a's seeds (`other_seeds`, None when paired).
    A report compares many pairs of arms over the same prompts and seeds: each shape is drawn once
    (read-only)."""
    rng = np.random.default_rng(seed)
    counts = tuple(bootstrap_counts(units, n_boot, rng) for units in (prompts, seeds, other_seeds) if units is not None)
    for array in counts:
        array.flags.writeable = False
    return counts


def _grid_means(scores: np.ndarray, prompts: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """(n_boot, K) means of (prompts, seeds, K) scores under resample counts of each: (n_boot, prompts),
    (n_boot, seeds)."""
    units, width, k = scores.shape
    over_prompts = (prompts @ scores.reshape(units, width * k)).reshape(len(prompts), width, k)
    return np.einsum("bsk,bs->bk", over_prompts, seeds) / (units * width)


def t_mean_ci(values: ArrayLike, level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of the mean of one value per unit (seeds): NaN below two."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float("nan"), float("nan")
    half = float(stdtrit(len(x) - 1, (1 + level) / 2) * x.std(ddof=1) / np.sqrt(len(x)))
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
    half = float(stdtrit(df, (1 + level) / 2) * se)
    return float(centre - half), float(centre + half)
