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

    def text(self, names: dict[str, str], what: str, weight: str) -> str:
        """In words: "b is lower at every difficulty (...), the opposite of the pooled difference: the samples
        went elsewhere (share of samples drawn, a → b: ...)"."""
        side = "lower" if (self.value_b - self.value_a).lt(0).any() else "higher"
        a, b = short_label(self.a), short_label(self.b)
        levels = "; ".join(f"{names.get(d, d)} {self.value_a[d]:.3f} → {self.value_b[d]:.3f}" for d in self.value_a.index)
        mix = "; ".join(f"{names.get(d, d)} {self.share_a[d]:.0%} → {self.share_b[d]:.0%}" for d in self.share_a.index)
        return (f"Reversed within every difficulty: {b} is {side} than {a} on {what} at each level with data ({a} → "
                f"{b}: {levels}), the opposite of the pooled difference, which therefore comes from how the arms "
                f"spread their {weight} over the difficulties (share of {weight}, {a} → {b}: {mix}).")


def reversal(pooled: float, by_difficulty: pd.DataFrame, a: str, b: str, value: str, weight: str) -> Reversal | None:
    """The reversal of a pooled difference b − a (`pooled`) within every difficulty, or None. `by_difficulty`:
    rows of arm (label), difficulty, `value` and `weight` (what the pooled value is a share of: samples drawn,
    groups). Reversed: no difficulty both arms have data at agrees in sign with `pooled`, and one at least is
    strictly the other way (levels where the two are equal, both 0 say, neither agree nor disagree)."""
    if not np.isfinite(pooled) or pooled == 0:
        return None
    rows = {arm: by_difficulty[by_difficulty["arm"] == arm].set_index("difficulty") for arm in (a, b)}
    shared = [d for d in rows[a].index if d in rows[b].index
              and rows[a].loc[d, weight] > 0 and rows[b].loc[d, weight] > 0]
    if len(shared) < 2:  # one level: the pooled difference is that level's, nothing to reverse
        return None
    va, vb = rows[a].loc[shared, value].astype(float), rows[b].loc[shared, value].astype(float)
    within = np.sign((vb - va).to_numpy())
    if (within == np.sign(pooled)).any() or not (within == -np.sign(pooled)).any():
        return None
    share = {arm: rows[arm][weight].astype(float) / rows[arm][weight].astype(float).sum() for arm in (a, b)}
    return Reversal(a, b, va, vb, share[a].loc[shared], share[b].loc[shared])
