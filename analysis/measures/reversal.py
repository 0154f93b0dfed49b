"""Simpson's reversal: a pooled difference between two arms whose sign is the opposite within every difficulty.
An arm that spends its samples differently across difficulties (resample_on_tie redraws where groups tie: the
easiest and the hardest levels) can waste more samples pooled while wasting fewer at every level. A pooled
comparison that is broken down by difficulty is checked here, and the Findings say it in the same sentence."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.arms import short_label


@dataclass(frozen=True)
class Reversal:
    """Each difficulty's value for a and b, and each difficulty's share of a's and b's `weight` (the mix)."""

    a: str
    b: str
    value_a: pd.Series  # by difficulty
    value_b: pd.Series
    share_a: pd.Series
    share_b: pd.Series
    pooled_a: float  # over every difficulty, weighted by `weight`: the same table's own pooled value
    pooled_b: float

    def text(self, names: dict[str, str], what: str, weight: str) -> str:
        """In words: "b is lower than a at every difficulty (...), the opposite of the pooled difference, which
        therefore comes from how the arms spread their samples (share of samples drawn, a → b: ...)"."""
        within = self.value_b - self.value_a
        side = "lower" if within.lt(0).any() else "higher"
        moved = int(within.ne(0).sum())
        at = "at each level with data" if moved == len(within) else \
            f"at {moved} of the {len(within)} levels with data (equal at the rest)"
        a, b = short_label(self.a), short_label(self.b)
        levels = "; ".join(f"{names.get(d, d)} {self.value_a[d]:.3f} → {self.value_b[d]:.3f}"
                           for d in self.value_a.index)
        mix = "; ".join(f"{names.get(d, d)} {self.share_a[d]:.0%} → {self.share_b[d]:.0%}" for d in self.share_a.index)
        return (f"Reversed by difficulty (Simpson's paradox): pooled over the difficulties (summed over seeds) "
                f"{what} is {self.pooled_a:.3f} "
                f"for {a} and {self.pooled_b:.3f} for {b}, yet {b} is {side} {at} ({a} → {b}: {levels}); a pooled "
                f"difference against every level's comes from how the arms spread their {weight} over the "
                f"difficulties (share of {weight}, {a} → {b}: {mix}; point estimates).")


def reversal(by_difficulty: pd.DataFrame, a: str, b: str, value: str, weight: str) -> Reversal | None:
    """The reversal of the pooled difference b − a within every difficulty, or None. `by_difficulty`: rows of arm
    (label), difficulty, `value` and `weight` (what the value is a share of: samples drawn, groups), summed over
    seeds; the pooled value of each arm is the same table's (Σ value × weight / Σ weight). Reversed: no difficulty
    both arms have data at agrees in sign with the pooled difference, and one at least is strictly the other way
    (levels where the two are equal, both 0 say, neither agree nor disagree)."""
    rows = {arm: by_difficulty[by_difficulty["arm"] == arm].set_index("difficulty") for arm in (a, b)}
    if any(r.empty or r[weight].astype(float).sum() <= 0 for r in rows.values()):
        return None
    pooled = {arm: float((r[value].astype(float) * r[weight].astype(float)).sum() / r[weight].astype(float).sum())
              for arm, r in rows.items()}
    difference = pooled[b] - pooled[a]
    shared = [d for d in rows[a].index if d in rows[b].index
              and rows[a].loc[d, weight] > 0 and rows[b].loc[d, weight] > 0]
    if not np.isfinite(difference) or difference == 0 or len(shared) < 2:  # one level: nothing to reverse
        return None
    va, vb = rows[a].loc[shared, value].astype(float), rows[b].loc[shared, value].astype(float)
    within = np.sign((vb - va).to_numpy())
    if (within == np.sign(difference)).any() or not (within == -np.sign(difference)).any():
        return None
    share = {arm: rows[arm][weight].astype(float) / rows[arm][weight].astype(float).sum() for arm in (a, b)}
    return Reversal(a, b, va, vb, share[a].loc[shared], share[b].loc[shared], pooled[a], pooled[b])
