"""Cost and what it buys: held-out pass@1 against each resource spent, and the resource each arm needed to first
reach targets set from the data (`analysis.measures.cost`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.data.arms import short_label
from analysis.data.load import Tables
from analysis.data.resources import RESOURCES
from analysis.measures import cost as measures
from analysis.render import cost as figures
from analysis.render.markdown import cell
from analysis.render.writer import Files
from analysis.sections.section import Context, Section


def section(tables: Tables, ctx: Context, prompt_scores: pd.DataFrame | None) -> Section | None:
    """The section from the held-out section's per-prompt scores; None without held-out evaluations past the base
    model."""
    if prompt_scores is None or tables.eval.empty or not (tables.eval["step"] > 0).any():
        return None
    arm = list(ctx.arm)
    curves = measures.job_curves(tables.eval, prompt_scores, arm)
    goals = measures.targets(curves, arm)
    table = measures.resource_to_target(curves, arm, goals)
    files = Files()
    trained = curves[curves["step"] > 0]  # the base model spent nothing of anything: 0 whatever a run records
    recorded = [RESOURCES[r][1] for r in RESOURCES if trained[r].notna().any()]
    missing = [RESOURCES[r][1] for r in RESOURCES if not trained[r].notna().any()]
    parts = [
        "## Cost and what it buys", "",
        "Held-out pass@1 (each arm's mean over seeds at each checkpoint) against each resource spent: updates "
        "(optimizer steps taken), samples drawn, generated tokens and estimated FLOPs (2N a token generated or "
        "scored, 6N a token trained, N the model's parameters without the input embedding)"
        + (f"; not recorded by these runs: {', '.join(missing)}" if missing else "") + ". Dashed: the targets.", "",
        files.figure("cost", figures.cost, measures.arm_curves(curves, arm), goals=goals, colours=ctx.colours), ""]
    if not goals:
        parts.append("No arm gained over the base model: there is no target to reach.")
        return Section(text="\n".join(parts), files=files)
    base = curves.loc[curves["step"] == 0, "pass1"].mean()
    parts += [
        "### Resource to target", "",
        f"Targets from the data: the base model's pass@1 ({cell(base, 3)}) plus "
        + ", ".join(f"{name.split(' of ')[0]} ({cell(value, 3)})" for name, value in goals.items())
        + " of the best arm's final gain. Each job's resource at its first evaluated checkpoint at or above a "
        "target, read from real checkpoints, never interpolated (so an upper bound at the granularity of its "
        "evaluations); per arm the mean over seeds with Student's t 95% interval over seeds (cut at 0: a resource "
        "is never negative) where every seed "
        "reached the target, else only how many did (`reached` of `seeds`).", "",
        files.table("resource_to_target", _wide(table, [r for r in RESOURCES if RESOURCES[r][1] in recorded])), ""]
    return Section(text="\n".join(parts).rstrip(), files=files)


def _wide(table: pd.DataFrame, resources: list[str]) -> pd.DataFrame:
    """One row per arm and target (the arm named as every other table names it: `short_label`), a column per
    resource: "mean [low, high]", or "k of n reached"."""
    rows = []
    for (arm, target), part in table.groupby(["arm", "target"], sort=False):
        row = {"arm": short_label(arm), "target": target, "pass1": part["pass1_target"].iloc[0]}
        for _, r in part.set_index("resource").loc[resources].iterrows():
            row[RESOURCES[r.name][1]] = _cell(r)
        rows.append(row)
    return pd.DataFrame(rows)


def _cell(r: pd.Series) -> str:
    """A resource-to-target cell: "mean [low, high]"; "mean (one seed)"; "k of n reached"; or, where every seed
    reached the target but some run did not record the resource, how many did."""
    if pd.notna(r["mean"]):
        return f"{amount(r['mean'])} (one seed)" if pd.isna(r["ci_low"]) else \
            f"{amount(r['mean'])} [{amount(r['ci_low'])}, {amount(r['ci_high'])}]"
    if r["reached"] < r["seeds"]:
        return f"{int(r['reached'])} of {int(r['seeds'])} reached"
    return f"all {int(r['seeds'])} reached; recorded by {int(r['recorded'])}"


def amount(value: float) -> str:
    """A resource in three significant digits, thousands and up with an SI prefix: 26.5, 3,390, 11.6k, 93.7G."""
    if not np.isfinite(value):
        return "–"
    if abs(value) < 10_000:
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    exponent = min(int(np.log10(abs(value)) // 3), len(PREFIXES))
    return f"{value / 1000 ** exponent:.3g}{PREFIXES[exponent - 1]}"


PREFIXES = ("k", "M", "G", "T", "P", "E")
