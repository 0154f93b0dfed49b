"""Coverage after RL (Yue et al. 2025): does the trained model's pass@1 gain hold at large k, or does
the base model catch up and pass it? The section, and its one line for the Findings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.arms import arm_name, short_label, value_text
from analysis.data.load import Tables
from analysis.measures.coverage import coverage
from analysis.render import markdown
from analysis.render.writer import Files
from analysis.sections.section import Context, Section


@dataclass(frozen=True, kw_only=True)
class Coverage(Section):
    """`sentence`: coverage after RL in one Findings line."""

    sentence: str


def section(tables: Tables, ctx: Context) -> Coverage | None:
    """The coverage section; None unless some job was evaluated at the base model and after training."""
    eval, arm = tables.eval, list(ctx.arm)
    if eval.empty or not base_and_trained(eval):
        return None
    files = Files()
    curves, crossings = coverage(eval, arm)
    text = (f"{describe(curves, crossings, arm)}\n\nAs CSV: "
            f"{files.csv('coverage_crossings', crossings)}, every k: {files.csv('coverage', curves)}")
    ks = int(curves["k"].max()) if len(curves) else 1
    return Coverage(text=text, files=files, sentence=sentence(curves, crossings, arm),
                    pointer=f"each arm's trained − base pass@k for k up to {ks} and where the base model catches "
                    "up: what RL adds to the base, not a verdict between arms")


def base_and_trained(eval: pd.DataFrame) -> bool:
    """Whether some job was evaluated both at the base model (step 0) and after training."""
    steps = eval.groupby("job", observed=True)["step"].agg(["min", "max"])
    return bool(((steps["min"] == 0) & (steps["max"] > 0)).any())


def describe(curves: pd.DataFrame, crossings: pd.DataFrame, by: Sequence[str],
             shown_ks: Sequence[int] = (1, 4, 16, 64)) -> str:
    """The section's markdown, findings in words, from `coverage(eval, by)`'s curves and crossings."""
    lines = ["## Coverage after RL", "",
             "pass@k of the base model (step 0) and the trained one (each job's last evaluation) on the held-out "
             "prompts, for k up to the eval's n (Yue et al. 2025 ask whether RL's pass@1 gain holds at large k). "
             "`gain` = trained - base with its 95% interval: Student's t over the per-seed gains (each job's "
             "trained − base, its mean over these prompts), for new seeds on these prompts, the held-out "
             "comparisons' own (at k = 1 it is the final-vs-base row of pass@1); where an arm has one seed there "
             "is no seed replicate, and the interval is a percentile bootstrap over prompts at that seed "
             "(`interval` says which). The curves cross at the smallest k where the base model is ahead; "
             "`cross_low` is the first k (after the first) whose gain interval reaches below zero, `cross_high` "
             "the first whose interval lies below zero (inf: none up to n).", ""]
    for _, row in crossings[crossings["difficulty"] == "all"].iterrows():  # by key: a key may be "algo.lr"
        lines.append(f"- {arm_name(row, by)}: {verdict(row, _arm_curve(curves, row, by))}.")
    shown = curves[curves["k"].isin([k for k in shown_ks if k <= curves["k"].max()] + [int(curves["k"].max())])]
    return "\n\n".join(["\n".join(lines), markdown.table_unless_zero(crossings, ("gain_at_1",)),
                        markdown.table_unless_zero(shown, ("base", "trained", "gain", "gain_low", "gain_high"))])


def sentence(curves: pd.DataFrame, crossings: pd.DataFrame, by: Sequence[str]) -> str:
    """Coverage after RL in one Findings line, all held-out prompts pooled: per arm the trained model's
    gain over the base at k = 1 with its interval, and where (if anywhere up to n) the base overtakes it."""
    parts = []
    for _, row in crossings[crossings["difficulty"] == "all"].iterrows():
        parts.append(f"{short_label(arm_name(row, by))}: {verdict(row, _arm_curve(curves, row, by))}")
    n = int(crossings["n"].max())
    over = set(crossings.loc[crossings["difficulty"] == "all", "interval"]) if "interval" in crossings else set()
    what = ("over seeds, for new seeds on these prompts" if over <= {"seeds"} else
            "over prompts at the one seed" if over == {"prompts, one seed"} else
            "over seeds, for new seeds on these prompts; over prompts where an arm has one seed")
    return (f"Coverage after RL (trained − base pass@k on all held-out prompts, k up to {n}; 95% intervals "
            f"{what}): {'; '.join(parts)}.")


def _arm_curve(curves: pd.DataFrame, row: pd.Series, by: Sequence[str]) -> pd.DataFrame:
    """The arm of `row`'s gain curve on all prompts, by k."""
    rows = curves[curves["difficulty"] == "all"]
    match = (rows[list(by)].map(value_text) == [value_text(row[k]) for k in by]).all(axis=1)
    return rows[match].sort_values("k")


def _ahead(point: pd.Series) -> str:
    """The gain at one k in words: ahead or behind only where its interval excludes zero."""
    if point["gain_low"] > 0:
        return "ahead"
    if point["gain_high"] < 0:
        return "behind"
    return "no detectable difference"


def verdict(row: pd.Series, curve: pd.DataFrame) -> str:
    """Where the trained model stands against the base, from its gain curve (`curve`: the arm's rows on all
    prompts, by k) and its crossing (`row`): "ahead" or "behind" only where the interval at that k excludes
    zero, a crossing only where its interval is bounded (`cross_high` finite: some k's gain interval lies below
    zero, after an interval above zero at k = 1)."""
    first, last = curve.iloc[0], curve.iloc[-1]
    at = lambda point: (f"k = {int(point['k'])} (gain {point['gain']:+.3f} "  # noqa: E731
                        f"[{point['gain_low']:+.3f}, {point['gain_high']:+.3f}])")
    if _ahead(first) != "ahead":
        return ("behind the base" if _ahead(first) == "behind" else "no detectable gain over the base") + \
            f" at {at(first)}"
    start = f"ahead at {at(first)}"
    if np.isnan(row["cross_k"]):
        if _ahead(last) == "ahead":
            return f"{start}, still ahead at {at(last)}"
        return f"{start}; no detectable difference at {at(last)}, though the estimate never crosses below zero"
    reaches = f"the gain's 95% interval first reaches below zero at k = {_k(row['cross_low'])}"
    if np.isinf(row["cross_high"]):
        return (f"{start}; the estimate crosses below zero at k = {row['cross_k']:g}, but no crossing is established "
                f"({reaches} and lies below it at no k up to {int(last['k'])}); {_ahead(last)} at {at(last)}")
    return (f"{start}; overtaken by the base at k = {row['cross_k']:g} ({reaches} and lies below it from k = "
            f"{_k(row['cross_high'])})")


def _k(value: float) -> str:
    return "never" if np.isinf(value) else f"{value:g}"
