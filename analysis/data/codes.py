"""Integer codes for group-bys over many rows: the ranks of values in sorted order (`dense_ranks`), ids in
any order (`group_ids`), the cells of several key columns (`cell_codes`), and values as text (`text_codes`).
A bincount over codes replaces a group-by's hashing and sorting of every row."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import value_text


def dense_ranks(values: np.ndarray, keys: bool = False):
    """Each value's rank among the distinct values (0..distinct-1, in sorted order), as
    `np.unique(values, return_inverse=True)[1]`; with `keys`, (ranks, the distinct values). Counted in a
    table where the values are small non-negative integers (codes); other integers are hashed, and only the
    distinct ones sorted."""
    values = values.reshape(-1)
    if _countable(values):
        present = np.bincount(values) > 0
        rank = np.cumsum(present) - 1
        return (rank[values], np.flatnonzero(present)) if keys else rank[values]
    if values.dtype.kind in "iub":  # hashed, then only the distinct values sorted: linear in the rows
        found, distinct = pd.factorize(values)
        order = np.argsort(distinct, kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        return (rank[found], distinct[order]) if keys else rank[found]
    distinct, rank = np.unique(values, return_inverse=True)
    return (rank.reshape(-1), distinct) if keys else rank.reshape(-1)


def group_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, distinct): each value's id among the distinct values (0..distinct-1) and those values, in no
    particular order, for a bincount that needs no sorted keys: counted where the values are small
    non-negative integers (then as `dense_ranks`), else hashed, and nothing sorted."""
    values = values.reshape(-1)
    return dense_ranks(values, keys=True) if _countable(values) else pd.factorize(values)


def _countable(values: np.ndarray) -> bool:
    """Whether `values` (1-d) are small non-negative integers: counted in a table no larger than a few rows each."""
    return values.dtype.kind in "iu" and len(values) > 0 and values.min() >= 0 and values.max() < 4 * len(values) + 1024


def text_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, labels): each row's value as the report names it (`value_text`: a missing one is
    "null", a label like any other), as a code into `labels`, the distinct texts in sorted order (so
    codes sort as the texts do). What a group-by on `column.map(value_text)` sees, without turning
    every row into a string."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes, values = column.cat.codes.to_numpy(), list(column.cat.categories)
    else:
        codes, values = pd.factorize(column)
        values = list(values)
    texts = [value_text(v) for v in [*values, *([None] if (codes < 0).any() else [])]]  # None: a missing value
    labels, inverse = np.unique(np.array(texts, dtype=object), return_inverse=True)
    return inverse.reshape(-1)[np.where(codes < 0, len(values), codes)], labels


def stable_order(codes: np.ndarray) -> np.ndarray:
    """`np.argsort(codes, kind="stable")` for non-negative integer codes, as a radix sort over 16-bit
    digits (numpy sorts 16-bit integers by radix): linear in the rows, where a comparison sort is not."""
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu" or (len(codes) and (codes.min() < 0 or codes.max() >= 2**48)):
        return np.argsort(codes, kind="stable")
    order = np.arange(len(codes))
    top = int(codes.max(initial=0))
    shift = 0
    while True:  # least significant digit first: each pass keeps the order of the ones before
        digit = ((codes[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
        if top >> shift == 0:
            return order


def cell_codes(frame: pd.DataFrame, keys: Sequence[str]) -> tuple[np.ndarray, list[tuple]]:
    """(cell, key values): each row's cell, the distinct combinations of `keys` among the rows (as a
    group-by with observed=True and dropna=False finds them; missing values form a cell of their
    own), numbered in the sorted order of their codes, and each cell's values of `keys`, read from its
    first row."""
    codes = [column_codes(frame[k]) for k in keys]
    combined = np.ravel_multi_index(codes, [int(c.max(initial=0)) + 1 for c in codes]) if keys else \
        np.zeros(len(frame), np.int64)
    cell, distinct = dense_ranks(combined, keys=True)
    first = np.empty(len(distinct), np.int64)
    first[cell[::-1]] = np.arange(len(cell))[::-1]  # each cell's first row
    values = [frame[k].iloc[first].tolist() for k in keys]
    return cell, list(zip(*values)) if keys else [()] * len(distinct)


def column_codes(column: pd.Series) -> np.ndarray:
    """Non-negative codes of a column's values (missing ones included): equal values, equal codes."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy().astype(np.int64) + 1  # -1 (missing) becomes 0
    values = column.to_numpy()
    if values.dtype.kind in "iu":
        return dense_ranks(values)
    return pd.factorize(column, use_na_sentinel=False)[0]
