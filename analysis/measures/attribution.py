"""What each resolved ordering owes its win to, and where it reverses.

No alignment alone answers "which arm trains better at a given cost": at equal samples the arm that took more
updates tends to win, at equal updates the arm that drew more samples. So every resolved ordering of the tests'
family carries both arms' resources at the compared point (`resources.RESOURCES`: updates, samples, generated
tokens, FLOPs; the held-out rows from their checkpoints, the rows measured at the end of each job's budget from
the same jobs' final checkpoints) and names, in `winner_had_more`, what the winner had more than 10% more of
("none": the win is at no surplus of any recorded resource). An ordering resolved in opposite directions at two
alignments (a held-out score at equal samples and at equal updates, say) is named as a reversal in `reversal`,
on both rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.data.resources import RESOURCES, had_more, more_text
from analysis.measures.informative import COMPARABLE_METRIC
from analysis.stats.seeds import detectable

ALIGNMENTS = (" (equal updates)", " (equal tokens)")  # a metric's name at the other alignments: "<base><suffix>"
LOWER_IS_BETTER = ("wasted_frac", COMPARABLE_METRIC)  # the winner of an ordering on these has the lower value
COLUMNS = tuple(f"{r}_{side}" for r in RESOURCES for side in "ab") + ("winner", "winner_had_more", "reversal")


def base_metric(metric: str) -> tuple[str, str]:
    """(the metric at equal samples, the alignment it is at: "samples", "updates" or "tokens")."""
    for suffix in ALIGNMENTS:
        if metric.endswith(suffix):
            return metric.removesuffix(suffix), suffix.strip(" ()").removeprefix("equal ")
    if metric.endswith(", equal updates)"):  # training dynamics over the first U updates
        return metric.replace(", equal updates)", ")"), "updates"
    return metric, "samples"


def winner(row: pd.Series) -> str | None:
    """The arm a resolved ordering favours (higher is better but for LOWER_IS_BETTER); None where unresolved or
    the metric has no better side (a training-dynamics measure: tie fraction, reward, KL)."""
    if not detectable(row):
        return None
    metric = str(row["metric"])
    if metric.startswith("held-out"):
        return row["b"] if row["difference"] > 0 else row["a"]
    if metric in LOWER_IS_BETTER:
        return row["a"] if row["difference"] > 0 else row["b"]
    return None


def attributed(tests: pd.DataFrame) -> pd.DataFrame:
    """The tests' family (with p_holm) with COLUMNS: each row's resources (filled from the pair's final held-out
    row where the row was measured at the end of the budget and carries none), the winner of a resolved ordering
    and what it had more of, and the reversal of an ordering resolved the other way at another alignment."""
    out = tests.copy()
    for column in COLUMNS:
        if column not in out:
            out[column] = np.nan if column not in ("winner", "winner_had_more", "reversal") else None
    resource_columns = [f"{r}_{side}" for r in RESOURCES for side in "ab"]
    final = out[out["metric"] == "held-out pass@1"].set_index(["a", "b"])[resource_columns] \
        if (out["metric"] == "held-out pass@1").any() else None
    for i, row in out.iterrows():
        measured_at_end = base_metric(str(row["metric"]))[1] == "samples" and not str(row["metric"]).startswith(
            "held-out")
        if final is not None and measured_at_end and (row["a"], row["b"]) in final.index:
            out.loc[i, resource_columns] = final.loc[(row["a"], row["b"])].to_numpy(float)
    for i, row in out.iterrows():
        won = winner(row)
        if won is None:
            continue
        spent = {side: {r: float(row[f"{r}_{side}"]) for r in RESOURCES} for side in "ab"}
        mine, other = ("b", "a") if won == row["b"] else ("a", "b")
        more = had_more(spent[other], spent[mine])
        out.at[i, "winner"] = won
        out.at[i, "winner_had_more"] = more_text(more, spent[other], spent[mine]) if any(
            np.isfinite(list(spent[mine].values()))) else "not recorded"
    out["reversal"] = _reversals(out)
    return out


def _reversals(tests: pd.DataFrame) -> list[str | None]:
    """Per row: where the same pair's ordering on the same measure is resolved the other way at another
    alignment, "reversed at equal <alignment>" (each alignment that disagrees); None elsewhere."""
    aligned = tests["alignment"] if "alignment" in tests else pd.Series([None] * len(tests), index=tests.index)
    keys = []
    for m, a, b, at in zip(tests["metric"], tests["a"], tests["b"], aligned):
        base, where = base_metric(str(m))
        # a final checkpoint is at what ended the jobs: equal samples, or updates, steps or tokens (the row says)
        keys.append((base, at if where == "samples" and isinstance(at, str) else where, a, b))
    won = {}
    for (base, at, a, b), w in zip(keys, tests["winner"]):
        if isinstance(w, str):
            won.setdefault((base, a, b), {})[at] = w
    out = []
    for (base, at, a, b), w in zip(keys, tests["winner"]):
        others = won.get((base, a, b), {})
        flipped = [f"equal {other}" for other, w2 in others.items() if other != at and isinstance(w, str) and w2 != w]
        out.append(f"reversed at {', '.join(flipped)}" if flipped else None)
    return out
