"""Tie persistence: of the prompts tied at one visit, how many were tied again at their next visit."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.data.arms import arm_name
from analysis.data.load import Tables
from analysis.measures.persistence import persistence
from analysis.render import markdown
from analysis.render.writer import Files
from analysis.sections.section import Context, Section

COLUMNS_READ = ("job", "prompt_id", "step", "group_size", "n_correct", "difficulty")  # of the groups, with the arm keys


def section(tables: Tables, ctx: Context) -> Section | None:
    """The persistence section; None when no prompt was visited twice in a job (or no group tables)."""
    groups, arm = tables.groups, list(ctx.arm)
    table = persistence(groups, arm) if not groups.empty else None
    if table is None or table.empty:
        return None
    files = Files()
    return Section(text=f"{describe(table, arm)}\n\nAs CSV: {files.csv('persistence', table)}", files=files)


def describe(table: pd.DataFrame, by: Sequence[str]) -> str:
    """The section's markdown from `persistence(groups, by)`."""
    tied = table[(table["kind"] != "mixed") & (table["difficulty"] == "all")]
    lines = ["## Tie persistence", "",
             "A visit is one prompt at one step (all its groups then, pooled); of the prompts tied at one visit, "
             "`tied_again_frac` were tied again at their next visit (either way; `same_kind_frac`: the same way) "
             "and `mixed_frac` became mixed. 95% intervals bootstrap over prompts. GRESO (Zheng et al. 2025) "
             "reports over 90% persistence on its data; skipping tied prompts pays only where it is high.", ""]
    for _, row in tied.iterrows():  # by key, never as attributes: a key may be "algo.lr"
        lines.append(f"- {arm_name(row, by)}: {row['kind']} visits were tied again at the next visit in "
                     f"{row['tied_again_frac']:.1%} of {row['pairs']} cases (95% CI {row['ci_low']:.1%}–"
                     f"{row['ci_high']:.1%}, {row['prompts']} prompts).")
    shown = [*by, "difficulty", "kind", "pairs", "prompts", "tied_again_frac", "ci_low", "ci_high", "same_kind_frac",
             "mixed_frac", "samples_per_visit"]
    return "\n".join(lines) + "\n\n" + markdown.table(table[shown])
