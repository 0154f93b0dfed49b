"""Natural order for labels: "2" before "10", numbers before text, missing last; labels given an order of their
own (`label_order`: the difficulty order runs recorded, "easy, medium, hard") in that order, before other text."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import pandas as pd

# labels in an order of their own, each its rank (empty: natural order alone); set by `label_order`
_ORDER: ContextVar[Mapping[str, int] | None] = ContextVar("label_order", default=None)


@contextmanager
def label_order(labels: Sequence[str]) -> Iterator[None]:
    """Within the block (this thread), `labels` sort in the order given, before any other text label: the order
    a run recorded for its difficulties (`analysis.data.records.difficulty_order`), which natural order would make
    alphabetical. The report's second process gets it with each task (`analysis.scheduler`)."""
    token = _ORDER.set({str(label): rank for rank, label in enumerate(labels)} or None)
    try:
        yield
    finally:
        _ORDER.reset(token)


def current_order() -> tuple[str, ...]:
    """The labels `label_order` has ordered here, in their order (() where none)."""
    order = _ORDER.get() or {}
    return tuple(sorted(order, key=order.__getitem__))


def natural_key(label: object) -> tuple[int, float, str]:
    """Sort key that puts numbers first in numeric order ("2" < "10"), then text (labels `label_order` ranked
    first, in its order), then missing."""
    if label is None or (isinstance(label, float) and math.isnan(label)):
        return (2, 0.0, "")
    order = _ORDER.get()
    if order and (rank := order.get(str(label))) is not None:
        return (1, float(rank - len(order)), "")  # below 0: before every other text label
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
