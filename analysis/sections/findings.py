"""The report's opening: a few sentences generated from its own tables, each with its number, its
interval and the test behind it, held-out results first; "no detectable difference" wherever the
interval covers zero."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from analysis.data.arms import short_label
from analysis.measures.ranking import RANKED_METRICS
from analysis.measures.spend import BUDGET_TOLERANCE, unequal_budgets
from analysis.render.markdown import cell
from analysis.sections.section import Section
from analysis.stats.seeds import ALPHA, detectable

MAX_SENTENCES = 6  # comparisons told one by one (two arms: one per metric)
MAX_LISTED = 6  # detectable differences listed by name after a ranking


def verdict(row: pd.Series) -> str:
    """What a comparison supports: a detectable difference only when its interval excludes zero and
    the test across seeds rejects after Holm's correction."""
    low, high = row["ci_low"], row["ci_high"]
    if pd.isna(low) or pd.isna(high):
        return "no interval (too few seeds)"
    if low <= 0 <= high:
        return "no detectable difference"
    if detectable(row):
        return "a detectable difference"
    floor = row.get("smallest_p", math.nan)
    reason = (f"with {row['seeds_a']} and {row['seeds_b']} seeds the exact test cannot go below p = {cell(floor, 2)}"
              if pd.notna(floor) and floor >= ALPHA else "the test across seeds does not reject after Holm")
    return f"the interval excludes zero but {reason}, so no detectable difference"


def _sentence(row: pd.Series) -> str:
    test = "sign-flip over paired seeds" if row["paired"] else "permutation over seeds"
    return (f"{row['metric']}: {cell(row['mean_a'], 3)} for {row['a']} and {cell(row['mean_b'], 3)} for {row['b']}, "
            f"difference {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}] "
            f"(95% interval over {row['interval']}; exact {test}, Holm p = {cell(row['p_holm'], 3)}): "
            f"{verdict(row)}.")


def _power(row: pd.Series) -> str:
    """What these seeds can detect at all, said once, after the first comparison."""
    return (f" With {row['seeds_a']} and {row['seeds_b']} seeds the exact test's smallest p is "
            f"{cell(row['smallest_p'], 3)} and the minimum detectable difference (80% power, α = {ALPHA}) is "
            f"{cell(row['mde'], 3)}.")


def section(tests: pd.DataFrame, calibration: dict, unit_weight: str, ranked: Sequence[str] = (),
            coverage: str | None = None, first: Sequence[str] = ()) -> Section:
    """The Findings section (see `findings`)."""
    return Section(text=findings(tests, calibration, unit_weight, ranked, coverage, first))


def budget_warning(budgets: pd.DataFrame) -> str | None:
    """The Findings' first line where arms drew unequal budgets per job (`budgets_per_arm`), with the
    numbers, and which comparisons are therefore not at an equal budget; None when they drew alike."""
    ratios = unequal_budgets(budgets)
    if not ratios:
        return None
    parts = [f"{unit} per job {', '.join(f'{short_label(a)} {cell(v, 4)}' for a, v in zip(budgets['arm'], budgets[unit]))}"
             f" ({ratios[unit]:.2f}x)" for unit in ("samples", "tokens") if unit in ratios]
    return (f"**Unequal budgets**: the arms drew different amounts, {'; '.join(parts)}, more than "
            f"{BUDGET_TOLERANCE:.0%} apart. The comparisons below made at the end of each job's budget (wasted_frac, "
            "tie_frac, held-out at final) are therefore not at an equal budget; the held-out comparisons at aligned "
            "checkpoints (Held-out results, aligned by samples drawn) are. `max_samples` ends every job at one budget.")


def findings(tests: pd.DataFrame, calibration: dict, unit_weight: str, ranked: Sequence[str] = (),
             coverage: str | None = None, first: Sequence[str] = ()) -> str:
    """The Findings section from the family of tests (`tests`, with p_holm), the overall first-round
    tie calibration (a `tie_frac` row as a dict), and, where a study has more than two arms, its
    rankings in words (`ranked`: they take the place of one sentence per pair, and the other tests are
    counted), and the coverage-after-RL sentence; `first`: lines said before all of them (what limits
    every comparison: unequal budgets, mixed code versions)."""
    lines: list[str] = list(first)
    if ranked:
        lines += ranked
        rest = tests[~tests["metric"].isin(RANKED_METRICS)]
        if len(rest):
            found = [f"{row['metric']}: {short_label(row['b'])} − {short_label(row['a'])} {cell(row['difference'], 3)}"
                     for _, row in rest.iterrows() if detectable(row)]
            lines.append(f"Of the other {len(rest)} comparisons ({', '.join(dict.fromkeys(rest['metric']))}; every pair "
                         f"of arms, under Tests across seeds), {len(found)} "
                         f"{'is a detectable difference' if len(found) == 1 else 'are detectable differences'}"
                         + (f": {'; '.join(found[:MAX_LISTED])}" + ("; …" if len(found) > MAX_LISTED else "")
                            if found else "") + ".")
    elif len(tests):
        order = ["held-out pass@1", "held-out", "wasted_frac", "tie_frac (first rounds)"]
        ranked_rows = sorted(range(len(tests)), key=lambda i: next(
            (n for n, prefix in enumerate(order) if tests["metric"].iloc[i].startswith(prefix)), len(order)))
        lines += [_sentence(tests.iloc[i]) + (_power(tests.iloc[i]) if n == 0 else "")
                  for n, i in enumerate(ranked_rows)][:MAX_SENTENCES]
    if coverage:
        lines.append(coverage)
    if calibration.get("predicted_groups"):
        lines.append(
            f"First-round tie fraction {cell(calibration['tie_frac'], 3)} [{cell(calibration['ci_low'], 3)}, "
            f"{cell(calibration['ci_high'], 3)}]; over the {calibration['predicted_groups']} of them with a "
            f"prediction p^G + (1−p)^G (mean {cell(calibration['predicted_tie_frac'], 3)}), observed − predicted "
            f"{cell(calibration['observed_minus_predicted'], 3)} "
            f"[{cell(calibration['diff_ci_low'], 3)}, {cell(calibration['diff_ci_high'], 3)}] (prompt-clustered "
            "bootstrap; the prediction assumes pass rates constant within a step window)"
            + (": no detectable difference." if calibration["diff_ci_low"] <= 0 <= calibration["diff_ci_high"]
               else "."))
    if len(lines) == len(first):
        lines.append("Only one arm and no tie prediction: nothing to compare.")
    return "\n".join(["## Findings", "",
                      "Generated from the tables below; b − a, at the end of each job's sample budget. Informative "
                      f"= nonzero advantage in its training unit; under `pool=all`, {unit_weight}.", "",
                      *(f"- {line}" for line in lines)])
