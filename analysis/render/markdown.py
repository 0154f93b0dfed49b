"""DataFrames as GitHub-flavoured markdown tables (pandas' to_markdown needs the tabulate package)."""

from __future__ import annotations

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
