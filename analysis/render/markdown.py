"""DataFrames as GitHub-flavoured markdown tables (pandas' to_markdown needs the tabulate package)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

MAX_LISTED = 6  # items a sentence names one by one (pairs, differences); more are counted, and the table has them


def cell(value: object, digits: int = 4) -> str:
    """A value as table text: whole numbers in full, other floats to `digits` significant digits (one
    decimal when larger), NaN as "–"."""
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return "–"
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.1f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"  # 38456.3, not 3.846e+04
    return str(value).replace("|", "\\|")


def p_value(p: object) -> str:
    """A test's p as the report prints it in words and in figures alike: `cell` to 3 significant digits
    (0.125, 0.00391), so a figure never rounds a p the Findings quote."""
    return cell(p, 3)


def table(frame: pd.DataFrame, digits: int = 4) -> str:
    """The frame (index dropped) as a markdown table."""
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ("| " + " | ".join(cell(v, digits) for v in row) + " |" for row in frame.itertuples(index=False, name=None))
    return "\n".join([header, rule, *rows])


def all_zero(frame: pd.DataFrame, figures: Sequence[str]) -> bool:
    """Whether every one of `frame`'s `figures` (columns) is 0 in every row: a table that says nothing a line cannot
    (a sweep in which nothing trained). A missing value is no figure; a frame without a figure is not all zero."""
    values = frame[[c for c in figures if c in frame]].apply(pd.to_numeric, errors="coerce").to_numpy(float)
    found = ~np.isnan(values)
    return bool(found.any()) and bool((values[found] == 0).all())


def table_unless_zero(frame: pd.DataFrame, figures: Sequence[str], shown: pd.DataFrame | None = None,
                      digits: int = 4) -> str:
    """`shown` (by default `frame`) as a markdown table, or where `all_zero(frame, figures)` one line saying so."""
    if all_zero(frame, figures):
        return f"Every figure here ({', '.join(f'`{c}`' for c in figures)}) is 0: the table is left out."
    return table(frame if shown is None else shown, digits)
