"""Whether another study's orderings hold in this one: for each pair of arms both studies compared on the same
measure, the reference study's verdict beside this study's (the tiny model's answer read on SmolLM2, say).

A study's verdict on a pair is the report's own rule (`stats.seeds.detectable`): its interval over seeds
excludes zero and the test across seeds rejects after Holm's correction. The reference's verdicts come from
its tests table (`tables/tests.csv` of a committed report), this study's from its tests' family. A pair the
reference ordered is then

- reproduced: ordered here the same way;
- reversed: ordered here the other way;
- unresolved: not ordered here; `leans` says which way this study's estimate points (with the paired seeds that
  agree), `interval_only` whether its interval alone excludes zero, and `smallest_p_holm` the smallest p the
  seeds' test could give the pair after Holm's correction (the exact test's floor times its family's size: at
  or above alpha no difference however large could order it; 4 paired seeds and 6 pairs: 6 x 0.125).

A pair the reference left unordered is `none there` (or `new here` where this study orders it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.stats.seeds import detectable

# the measures read across studies: the arms' held-out pass@1 at equal updates (each study's own equal-updates point)
# and at the end of the budget (equal samples)
MEASURES = ("held-out pass@1 (equal updates)", "held-out pass@1")
TESTS = Path("tables") / "tests.csv"
NEEDED = ("metric", "a", "b", "difference", "ci_low", "ci_high", "p_value", "p_holm", "b_higher", "b_lower")
COLUMNS = ("metric", "a", "b", "there", "there_difference", "there_p_holm", "here", "difference", "ci_low", "ci_high",
           "p_value", "p_holm", "b_higher", "b_lower", "verdict", "leans", "interval_only", "smallest_p_holm")


class ReferenceUnreadable(ValueError):
    """A reference that cannot be read (no tests table, a column missing); one line naming it."""


def read_reference(folder: Path) -> pd.DataFrame:
    """The tests table of the report in `folder` (a report folder, with tables/tests.csv)."""
    path = Path(folder) / TESTS
    if not path.is_file():
        raise ReferenceUnreadable(f"against={folder}: no {TESTS} there (name a report folder, e.g. "
                                  "reports/tie_learning)")
    table = pd.read_csv(path, keep_default_na=False, na_values={c: ["", "nan", "NaN"] for c in NEEDED[3:]})
    missing = [c for c in NEEDED if c not in table.columns]
    if missing:
        raise ReferenceUnreadable(f"{path}: no column {missing[0]!r} (a tests table of another kind)")
    # a report built before updates were counted named its equal-updates rows "(equal steps)": loop steps, which
    # were updates wherever no step skipped its update
    return table.assign(metric=table["metric"].astype(str).str.replace(" (equal steps)", " (equal updates)",
                                                                      regex=False))


def order(row: pd.Series | dict) -> str:
    """A tests row's verdict on its pair: "b > a", "a > b" (a detectable difference) or "none"."""
    if not detectable(row):
        return "none"
    return "b > a" if row["difference"] > 0 else "a > b"


def _oriented(row: pd.Series, a: str, b: str) -> dict:
    """`row` (a tests row on the pair {a, b}) as b − a, whichever way round it was taken."""
    out = row.to_dict()
    if (str(row["a"]), str(row["b"])) == (b, a):
        out.update(a=a, b=b, difference=-row["difference"], ci_low=-row["ci_high"], ci_high=-row["ci_low"],
                   b_higher=row["b_lower"], b_lower=row["b_higher"])
    return out


def orderings(there: pd.DataFrame, here: pd.DataFrame, measures: tuple[str, ...] = MEASURES) -> pd.DataFrame:
    """One row per measure and pair of arms both tests tables hold (arms matched by label), as b − a in the
    reference's orientation: each study's verdict (`order`), this study's difference, interval, p and paired seeds,
    and the `verdict` (see the module)."""
    rows = []
    for measure in measures:
        ours = {frozenset((str(r["a"]), str(r["b"]))): r for _, r in here[here["metric"] == measure].iterrows()}
        for _, ref in there[there["metric"] == measure].iterrows():
            a, b = str(ref["a"]), str(ref["b"])
            mine = ours.get(frozenset((a, b)))
            if mine is None:
                continue
            got = _oriented(mine, a, b)
            was, now = order(ref), order(got)
            diff = got["difference"]
            leans = "none" if pd.isna(diff) or diff == 0 else "b > a" if diff > 0 else "a > b"
            if was == "none":
                verdict = "none there" if now == "none" else "new here"
            else:
                verdict = "reproduced" if now == was else "reversed" if now != "none" else "unresolved"
            low, high = got["ci_low"], got["ci_high"]
            excludes = bool(np.isfinite(low) and np.isfinite(high) and (low > 0 or high < 0))
            # the smallest p Holm's correction can give this pair: the exact test's floor times its family's size
            floor = got.get("smallest_p", np.nan) * got.get("family", np.nan)
            rows.append({"metric": measure, "a": a, "b": b, "there": was, "there_difference": ref["difference"],
                         "there_p_holm": ref["p_holm"], "here": now, "difference": got["difference"],
                         "ci_low": got["ci_low"], "ci_high": got["ci_high"], "p_value": got["p_value"],
                         "p_holm": got["p_holm"], "b_higher": got["b_higher"], "b_lower": got["b_lower"],
                         "verdict": verdict, "leans": leans, "interval_only": excludes and now == "none",
                         "smallest_p_holm": min(float(floor), 1.0) if pd.notna(floor) else np.nan})
    return pd.DataFrame(rows, columns=list(COLUMNS))
