"""The measures of what trained at equal budgets of another unit than samples: tokens generated."""

from __future__ import annotations

import pandas as pd

from analysis.data.imported import without_tokens
from analysis.data.load import Tables
from analysis.measures.spend import across_seeds, budget_curves, tokens_per_sample
from analysis.render import curves as figures
from analysis.render import markdown
from analysis.render.writer import Files
from analysis.sections.section import Context, Section
from analysis.sections.trained import BUDGET_POINTS

TOKENS_SAME = 0.05  # arms whose tokens per sample differ by less than this (relative) get no tokens figure
LAST_WINDOW = "train_accuracy_round0_last_window"  # at the common budget, the accuracy of its last window alone


def _last_window(column: str) -> str:
    """A column of the common budget's row, the training accuracy named by the window it covers."""
    return column.replace("train_accuracy_round0", LAST_WINDOW)


def section(tables: Tables, ctx: Context, counted: pd.DataFrame | None, budget: str = "tokens") -> Section | None:
    """The section at equal `budget` ("tokens" or "samples"), from the what-trained section's per-group
    counts (`flags`); None without group tables."""
    groups, arm = tables.groups, list(ctx.arm)
    if groups.empty:
        return None
    uncounted = without_tokens(groups) if budget == "tokens" else []
    if uncounted:  # an ingested run whose tool logged no token counts: no budget of tokens to align at
        named = ", ".join(f"`{job}`" for job in uncounted[:markdown.MAX_LISTED]) + (
            f" and {len(uncounted) - markdown.MAX_LISTED} more" if len(uncounted) > markdown.MAX_LISTED else "")
        return Section(text=f"## At equal {budget}\n\nNot measured: {named} record{'s' * (len(uncounted) == 1)} no "
                       "token counts (imported from logs that hold none: the provenance says what each source lacks).")
    files = Files()
    curves = budget_curves(groups, arm, budget, BUDGET_POINTS, counted=counted)
    bands = across_seeds(curves, arm)
    final = bands[bands["budget"] == bands["budget"].max()]
    rate = tokens_per_sample(groups, arm)
    same = budget == "tokens" and rate.max() <= rate.min() * (1 + TOKENS_SAME)
    shown = (f"Every arm generated about the same tokens per sample ({markdown.cell(rate.min(), 3)} to "
             f"{markdown.cell(rate.max(), 3)}), so its curves against tokens repeat those against samples: no figure."
             if same else files.figure(f"budget_{budget}", figures.budget_curves, bands, arm=arm, budget=budget,
                               colours=ctx.colours))
    one_seed = int(final["seeds"].max()) <= 1
    if one_seed:  # lowest = highest = the one value: no spread to show
        final = final.drop(columns=[c for c in final.columns if c.endswith(("_low", "_high"))])
    end = float(final["budget"].iloc[0])
    return Section(text="\n".join([
        f"## At equal {budget}", "",
        f"The measures of the section on what trained, at {BUDGET_POINTS} equal budgets of {budget} up to the most "
        f"every job drew ({markdown.cell(end)})."
        + ("" if same else " Lines: mean over seeds; bands: lowest to highest seed.")
        + (" One seed per arm: no spread across seeds to show." if one_seed else ""), "",
        shown, "",
        f"At {end:,.0f} {budget}: `wasted_frac` is over every sample each job drew up to it; "
        f"`{LAST_WINDOW}` over the first-round samples of the last window alone (from "
        f"{end * (BUDGET_POINTS - 1) / BUDGET_POINTS:,.0f} to {end:,.0f} {budget}), not the whole run.", "",
        files.table(f"common_budget_{budget}", final.drop(columns="budget").rename(columns=_last_window)), "",
        f"Per job and budget point: {files.csv(f'budget_curves_{budget}', curves)}",
    ]), files=files)
