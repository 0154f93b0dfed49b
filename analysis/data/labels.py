"""Natural order for labels: "2" before "10", numbers before text, missing last."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import pandas as pd


def natural_key(label: object) -> tuple[int, float, str]:
    """Sort key that puts numbers first in numeric order ("2" < "10"), then text, then missing."""
    if label is None or (isinstance(label, float) and math.isnan(label)):
        return (2, 0.0, "")
    try:
        return (0, float(label), "")
    except (TypeError, ValueError):
        text = str(label)
        # a list's JSON text: a shorter list first ("[1, 2]" before "[1, 2, 3]", which plain text reverses)
        return (1, 0.0, text.replace("]", " ") if text.startswith("[") else text)


def natural_sorted(labels: Iterable[object]) -> list[object]:
    """The labels in natural order."""
    return sorted(labels, key=natural_key)


def sort_naturally(frame: pd.DataFrame, keys: Sequence[str],
                   order: Mapping[str, Callable[[object], object]] | None = None) -> pd.DataFrame:
    """Rows sorted by `keys` in natural order, index reset; `order` gives some columns a sort key
    of their own (as `{"checkpoint": checkpoint_rank}`)."""
    if not keys or frame.empty:
        return frame.reset_index(drop=True)
    order = order or {}
    # astype(object): categorical columns would otherwise keep their own category order
    ordered = frame.sort_values(list(keys), key=lambda col: col.astype(object).map(order.get(col.name, natural_key)))
    return ordered.reset_index(drop=True)
