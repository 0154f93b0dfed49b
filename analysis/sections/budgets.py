"""What the budget was, in words: the Findings' opening line (what "the end of each job's budget" was) and the
line said before every finding where the arms drew unequal budgets (samples, or tokens at equal samples), and the
words a comparison is placed by (`compared_at`: never "at equal samples" where the arms' samples were not)."""

from __future__ import annotations

import math

import pandas as pd

from analysis.data.arms import short_label
from analysis.measures.spend import BUDGET_TOLERANCE, unequal_budgets


def budget_warning(budgets: pd.DataFrame, tests: pd.DataFrame | None = None) -> str | None:
    """The Findings' first line where arms drew unequal budgets per job (`budgets_per_arm`), with the
    numbers, and which comparisons are therefore not at an equal budget; None when they drew alike. `tests`: the
    family, whose held-out rows at equal tokens (if the runs evaluated on a token schedule) are named."""
    ratios = unequal_budgets(budgets)
    if not ratios:
        return None
    if "samples" not in ratios:  # samples alike, tokens not: aligning by samples does not equalise tokens
        tokens = tests[tests["metric"].str.endswith(" (equal tokens)")] if tests is not None and len(tests) else []
        where = (f"the held-out comparisons at {str(tokens['interval'].iloc[0]).split(', ', 1)[-1]} are at equal "
                 "tokens" if len(tokens) else "no checkpoint is at equal tokens (`eval.every_tokens` gives one; "
                 "`max_tokens` ends every job at one token budget)")
        return (f"**Unequal tokens**: equal samples, but generated tokens per job range {_range(budgets, 'tokens')}, "
                f"more than {BUDGET_TOLERANCE:.0%} apart; {where}.")
    parts = [f"{unit} per job {_range(budgets, unit)}" for unit in ("samples", "tokens") if unit in ratios]
    # samples alike but tokens not (an arm that draws longer answers): a token budget is the equal one then
    fix = "`max_samples` ends every job at one budget" if "samples" in ratios else \
        "`max_tokens` ends every job at one token budget, if tokens are the cost that matters"
    return (f"**Unequal budgets**: {'; '.join(parts)}, more than {BUDGET_TOLERANCE:.0%} apart: the comparisons at "
            "the end of each job's budget are not at an equal budget; those at aligned checkpoints (Held-out "
            f"results) are. {fix}.")


def _range(budgets: pd.DataFrame, unit: str) -> str:
    """The arms' lowest and highest mean amount per job, each with its arm, and their ratio: "65,393 (mopps) to
    74,648 (dars_paper), 1.14x" (each arm's own is in the verdict table and tables/budget_by_arm.csv)."""
    low, high = budgets[unit].astype(float).idxmin(), budgets[unit].astype(float).idxmax()
    amount = lambda v: f"{v:,.0f}" if abs(v) >= 1000 else _amount(v)  # noqa: E731 - 65,316, not 65,316.2
    return (f"{amount(budgets[unit][low])} ({short_label(budgets['arm'][low])}) to {amount(budgets[unit][high])} "
            f"({short_label(budgets['arm'][high])}), {budgets[unit][high] / budgets[unit][low]:.2f}x")


def _amount(value: float) -> str:
    """A mean amount drawn per job: 65,589.3; a whole one without decimals."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def budget_text(budgets: pd.DataFrame | None) -> str:
    """What "the end of each job's budget" was, in samples drawn per job: one number where every job drew
    alike, else each arm's mean and range (a job stops at the first step that reaches its budget, so
    an arm that draws several rounds a step overshoots it)."""
    if budgets is None or budgets.empty:
        return "at the end of each job"
    if budgets["samples_min"].nunique() == 1 and budgets["samples_max"].nunique() == 1 \
            and budgets["samples_min"].iloc[0] == budgets["samples_max"].iloc[0]:
        return f"at the end of each job's budget (every job drew {budgets['samples_min'].iloc[0]:,} samples)"
    parts = [f"{short_label(r.arm)} {r.samples_min:,}" if r.samples_min == r.samples_max else
             f"{short_label(r.arm)} {r.samples:,.0f} on average ({r.samples_min:,}–{r.samples_max:,})"
             for r in budgets.itertuples()]
    return (f"at the end of each job's budget (samples drawn per job: {'; '.join(parts)}; a job stops at the first "
            "step that reaches its budget, so a step of several rounds can pass it)")


def skipped_updates_line(steps: pd.DataFrame, arm: list[str]) -> str | None:
    """The Findings' first line where some loop steps took no update, per arm (steps without an update of all
    steps) and why: under `algo.tied_batch=skip` (and in every run made before that key, whose default it was) an
    all-tied batch takes none; under either value a step whose sampler left nothing to train takes none. None where
    every step took its update (or there is no steps table)."""
    from analysis.data.arms import iter_arms
    from analysis.data.resources import step_updates

    at = step_updates(steps)
    if at.empty:
        return None
    keys = [k for k in dict.fromkeys([*arm, "algo.tied_batch"]) if k in steps]
    at = at.assign(skipped=at["opt_steps"].to_numpy() == 0).merge(
        steps.assign(job=steps["job"].astype(str))[["job", "step", *keys]].drop_duplicates(["job", "step"]),
        on=["job", "step"])
    parts, skipping = [], False
    for label, part in iter_arms(at, arm):
        if part["skipped"].any():
            parts.append(f"{short_label(label)} {int(part['skipped'].sum()):,} of {len(part):,}")
            skipped = part[part["skipped"].to_numpy()]
            skipping |= "algo.tied_batch" not in part or bool(skipped["algo.tied_batch"].astype(str).ne("step").any())
    if not parts:
        return None
    why = ("an all-tied batch under `algo.tied_batch=skip`, the default before that key, or nothing left to train"
           if skipping else "the sampler left nothing to train (`algo.tied_batch=step`)")
    return (f"**Steps without an update**: {'; '.join(parts)} loop steps took no optimizer step ({why}). Updates "
            "count optimizer steps taken, never loop steps.")


def unknown_updates_line(eval: pd.DataFrame) -> str | None:
    """The Findings' line where some jobs' updates at their evaluated checkpoints are not known (a run with no steps
    table, or one that stops short of its checkpoints, and no count on its eval rows): the study then has no
    equal-updates point and none of its comparisons is at equal updates, which would otherwise go unsaid. None
    where every checkpoint's updates are known."""
    from analysis.sections.provenance import jobs_text

    if eval.empty or "updates" not in eval:
        return None
    unknown = sorted(eval.loc[eval["updates"].isna(), "job"].astype(str).unique())
    if not unknown:
        return None
    one = len(unknown) == 1
    return (f"**Updates not known**: job{'' if one else 's'} {jobs_text(unknown)} record{'s' if one else ''} no "
            f"updates at {'its' if one else 'their'} checkpoints (no steps table there): no held-out comparison is "
            f"made at equal updates, the training dynamics there leave {'it' if one else 'them'} out, and no win is "
            "attributed to updates.")


def _samples_at(row: pd.Series, budgets: pd.DataFrame | None) -> tuple[float, float]:
    """Each arm's samples drawn at a row's compared point: the held-out rows carry them (`samples_a`, `samples_b`),
    the others are at the end of each job (the arm's mean per job, `budgets`); NaN where not known."""
    if pd.notna(row.get("samples_a")) and pd.notna(row.get("samples_b")):
        return float(row["samples_a"]), float(row["samples_b"])
    if budgets is None or budgets.empty:
        return math.nan, math.nan
    drawn = budgets.set_index(budgets["arm"].astype(str))["samples"].astype(float)
    return float(drawn.get(str(row["a"]), math.nan)), float(drawn.get(str(row["b"]), math.nan))


def compared_at(row: pd.Series, budgets: pd.DataFrame | None) -> tuple[str, str]:
    """(the words opening a sentence on where a comparison was made, the point's short name): "At equal samples"
    where the arms drew alike there (within BUDGET_TOLERANCE), else the end of each budget with both sample counts
    and how little of the larger range the other shares, never "equal samples"."""
    a, b = _samples_at(row, budgets)
    if not (math.isfinite(a) and math.isfinite(b)) or abs(a - b) <= BUDGET_TOLERANCE * max(a, b):
        return "At equal samples", "equal samples"
    low, high = min(a, b), max(a, b)
    shared = f"they share only the first {low:,.0f}, {low / high:.0%} of the larger" if low > 0 else "they share none"
    return (f"At the end of each job's budget, not at equal samples ({short_label(row['a'])} {a:,.0f} samples, "
            f"{short_label(row['b'])} {b:,.0f}, {high / low if low > 0 else math.inf:.1f}x apart: {shared}),",
            "the end of each budget")
