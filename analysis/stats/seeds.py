"""Arms compared across seeds: one value per job (a seed), b minus a, paired by seed when both
arms ran the same seeds (same initialisation and prompt stream), with an exact test instead of a
normal approximation, Student's t interval of the same per-seed values (never a bootstrap over seeds:
`analysis.stats.intervals`), the minimum detectable effect where the test can reject at all, and Holm's
correction over a declared family of comparisons."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import arm_pairs
from analysis.stats.exact_tests import holm, holm_detectable_effect, min_detectable_effect, seed_test, smallest_p
from analysis.stats.intervals import t_difference_ci

SEED_TEST = ("exact sign-flip test over paired seeds (else exact permutation test over seeds); interval: "
             "Student's t over the same per-seed values (of the per-seed differences when paired, else with unequal "
             "variances), so interval and test answer one question: would new seeds differ? "
             "With one seed on a side there is neither (one seed shows nothing of how seeds vary)")
ALPHA = 0.05
COLUMNS = ("metric", "a", "b", "paired", "seeds_a", "seeds_b", "mean_a", "mean_b", "difference", "ci_low", "ci_high",
           "p_value", "smallest_p", "mde", "b_higher", "b_lower")


def seed_values(frame: pd.DataFrame, value: str) -> pd.Series:
    """One value per seed (index: the seed as text) from rows with `seed` (or `job`) and `value`."""
    key = "seed" if "seed" in frame else "job"
    return frame.groupby(frame[key].astype(str), observed=True)[value].mean()


def compare_values(a: pd.Series, b: pd.Series, level: float = 0.95) -> dict:
    """b minus a from one value per seed each (indexed by seed): the COLUMNS fields but names. The
    interval is Student's t of these values (`t_difference_ci`; NaN below two seeds a side), the test the
    exact one over them (`seed_test`), `mde` the t approximation's minimum detectable difference at ALPHA
    (inf where the exact test cannot reject at ALPHA with these seeds: `smallest_p` at or above it).
    `b_higher`, `b_lower`: the paired seeds where b's value is above, below a's (NaN when unpaired)."""
    a, b = a.dropna(), b.dropna()
    paired = sorted(a.index) == sorted(b.index) and len(a) > 0
    if paired:
        b = b[a.index]
    x, y = a.to_numpy(float), b.to_numpy(float)
    low, high = t_difference_ci(x, y, paired, level)
    spread = _spread(x, y, paired)
    both = min(len(x), len(y)) > 0
    return {"paired": paired, "seeds_a": len(x), "seeds_b": len(y), "mean_a": x.mean() if len(x) else np.nan,
            "mean_b": y.mean() if len(y) else np.nan, "difference": y.mean() - x.mean() if both else np.nan,
            "ci_low": low, "ci_high": high, "p_value": seed_test(x, y, paired),
            "smallest_p": smallest_p(len(x), len(y), paired) if both else np.nan,
            "mde": min_detectable_effect(spread, len(x), len(y), paired, ALPHA) if both else np.nan,
            "b_higher": int((y > x).sum()) if paired else np.nan, "b_lower": int((y < x).sum()) if paired else np.nan}


def _spread(x: np.ndarray, y: np.ndarray, paired: bool) -> float:
    """Standard deviation of the per-seed differences (paired), else the pooled one of the values."""
    if paired:
        return float(np.std(y - x, ddof=1)) if len(x) > 1 else np.nan
    if min(len(x), len(y)) < 2:
        return np.nan
    return float(np.sqrt((np.var(x, ddof=1) * (len(x) - 1) + np.var(y, ddof=1) * (len(y) - 1)) / (len(x) + len(y) - 2)))


def compare_arms_by_seed(per_job: pd.DataFrame, arm: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Every pair of arms for each metric (in a two-key grid, the pairs within each level of the second
    key: `arm_pairs`), from one row per job (`seed` or `job`, the arm keys, and a column per metric).
    A metric an arm has no value of (NaN in every job: the KL of an arm without a reference, algo.beta = 0)
    makes no comparison of that arm: no row, nothing counted. Columns: COLUMNS."""
    rows = []
    for (name_a, a), (name_b, b) in arm_pairs(per_job, arm):
        for metric in metrics:
            values_a, values_b = seed_values(a, metric).dropna(), seed_values(b, metric).dropna()
            if len(values_a) and len(values_b):
                rows.append({"metric": metric, "a": name_a, "b": name_b, **compare_values(values_a, values_b)})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def with_holm(table: pd.DataFrame) -> pd.DataFrame:
    """The table with `p_holm`, Holm's adjusted p, and `family`, the tests Holm adjusted over, after
    `p_value`. Each metric is one family (its comparisons answer one question: which arm scores higher
    on it; with two arms it holds one test, and p_holm is p); a table without `metric`, one. A row with a
    `by_construction` reason (a quantity an arm's rule fixes: `analysis.measures.construction`) is in no family:
    its p_holm is null and it is not counted. Where a family holds m > 1 tests, `mde` moves to Holm's first bar,
    ALPHA / m (`holm_detectable_effect`: inf where the exact test cannot go below it with these seeds), the
    bar a difference must clear before any of the family can be called detectable."""
    out = table.copy()
    p = out["p_value"].to_numpy(float)
    if "by_construction" in out:
        p = np.where(out["by_construction"].notna().to_numpy(), np.nan, p)
    adjusted, size = np.full(len(out), np.nan), np.zeros(len(out), np.int64)
    families = out.groupby("metric", sort=False).indices.values() if "metric" in out else [np.arange(len(out))]
    for rows in families:
        adjusted[rows] = holm(p[rows])
        size[rows] = int((~np.isnan(p[rows])).sum())
    if "mde" in out and size.max(initial=0) > 1:
        tested = ~np.isnan(p)
        out["mde"] = [holm_detectable_effect(row.mde, row.seeds_a, row.seeds_b, bool(row.paired), m, ALPHA)
                      if on and m > 1 else row.mde
                      for row, on, m in zip(out[["mde", "seeds_a", "seeds_b", "paired"]].itertuples(), tested, size)]
    at = out.columns.get_loc("p_value") + 1
    out.insert(at, "p_holm", adjusted)
    out.insert(at + 1, "family", size)
    return out


def detectable(row: pd.Series | dict) -> bool:
    """Whether a comparison (a row of a tests table with p_holm) is a detectable difference: its
    interval excludes zero and the test across seeds rejects after Holm's correction."""
    low, high, p = row["ci_low"], row["ci_high"], row.get("p_holm", np.nan)
    if pd.isna(low) or pd.isna(high) or low <= 0 <= high:
        return False
    return bool(pd.notna(p) and p < ALPHA)
