"""The report's opening: a few sentences generated from its own tables, each with its number, its
interval and the test behind it, held-out results first; "no detectable difference" wherever the
interval covers zero. Each number once: a quantity quoted here has the estimate and interval of the
table it comes from; pooled numbers say what they pool."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from analysis.data.arms import short_label
from analysis.measures.equal_steps import AT_EQUAL_SAMPLES
from analysis.measures.equal_steps import METRICS as EQUAL_STEPS
from analysis.measures.ranking import RANKED_METRICS
from analysis.measures.spend import BUDGET_TOLERANCE, unequal_budgets
from analysis.measures.ties import MIN_PROMPTS
from analysis.render.markdown import MAX_LISTED, cell
from analysis.sections.section import Section
from analysis.stats.seeds import ALPHA, detectable

MAX_SENTENCES = 6  # comparisons told one by one (two arms: one per metric)


def verdict(row: pd.Series) -> str:
    """What a comparison supports: a detectable difference only when its interval excludes zero and
    the test across seeds rejects (after Holm's correction where its family holds several tests)."""
    low, high = row["ci_low"], row["ci_high"]
    if pd.isna(low) or pd.isna(high):
        return "no interval (too few seeds)"
    rejects = pd.notna(row.get("p_holm")) and row["p_holm"] < ALPHA
    if low <= 0 <= high:
        if not rejects:
            return "no detectable difference"
        if _over_prompts(row):
            return ("a difference on these prompts that a new draw of prompts does not establish (the interval "
                    "covers zero), so no detectable difference")
        return "the test rejects but the interval covers zero, so no detectable difference"
    if detectable(row):
        return "a detectable difference"
    floor = row.get("smallest_p", math.nan)
    reason = (f"with {row['seeds_a']} and {row['seeds_b']} seeds the exact test cannot go below p = {cell(floor, 2)}"
              if pd.notna(floor) and floor >= ALPHA else "the test across seeds does not reject")
    return f"the interval excludes zero but {reason}, so no detectable difference"


def _over_prompts(row: pd.Series) -> bool:
    """Whether the row's interval resamples prompts too (held-out rows), not seeds alone."""
    return "prompts" in str(row.get("interval", ""))


def p_text(row: pd.Series) -> str:
    """The test's p as adjusted: plain where its family (the pairs of arms on its metric) holds one
    test, Holm's with the family's size otherwise."""
    family = int(row.get("family", 1) or 1)
    return f"p = {cell(row['p_holm'], 3)}" if family <= 1 else \
        f"Holm p = {cell(row['p_holm'], 3)} over the {family} pairs on this metric"


def _test_name(row: pd.Series) -> str:
    return "exact sign-flip test over paired seeds" if row["paired"] else "exact permutation test over seeds"


def _difference(row: pd.Series) -> str:
    return (f"{row['metric']}: {cell(row['mean_a'], 3)} for {row['a']} and {cell(row['mean_b'], 3)} for {row['b']}, "
            f"difference {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}]")


def _sentence(row: pd.Series) -> str:
    """One comparison in words. A held-out row answers two questions, said apart: the test across seeds
    holds the held-out prompts fixed (new seeds, these prompts), the interval resamples them too (a new
    draw of prompts)."""
    if not _over_prompts(row):
        return (f"{_difference(row)} (95% interval over {row['interval']}; {_test_name(row)}, {p_text(row)}): "
                f"{verdict(row)}.")
    seeds = ""
    if row["paired"] and pd.notna(row.get("b_higher")):
        higher, lower = int(row["b_higher"]), int(row["b_lower"])
        side, count = ("higher", higher) if higher >= lower else ("lower", lower)
        seeds = f"{row['b']} is {side} in {count} of {row['seeds_a']} paired seeds, "
    prompts = f"these {int(row['prompts'])} prompts" if pd.notna(row.get("prompts")) else "these prompts"
    return (f"{_difference(row)} (95% interval over prompts and seeds: a new draw of prompts). On {prompts} "
            f"(new seeds, the same prompts) {seeds}{_test_name(row)} {p_text(row)}: {verdict(row)}.")


def _power(row: pd.Series) -> str:
    """What these seeds can detect at all, said once, after the first comparison: the exact test's floor
    and the minimum detectable difference of the quantity the verdict reads (the interval's)."""
    basis = ("over new prompts and seeds, from this interval's width" if _over_prompts(row)
             else "t approximation over seeds")
    return (f" With {row['seeds_a']} and {row['seeds_b']} seeds the exact test's smallest p is "
            f"{cell(row['smallest_p'], 3)}; the minimum detectable difference (80% power, α = {ALPHA}, {basis}) is "
            f"{cell(row['mde'], 3)}.")


def _at_equal_steps(row: pd.Series, twin: pd.Series, steps: dict[str, float]) -> str:
    """A training-dynamics row at equal samples followed by the same measure over the same optimizer steps,
    saying plainly when the difference at equal samples is one of training progress."""
    span = str(twin["interval"]).removeprefix("seeds, ")
    taken = "; ".join(f"{short_label(a)} {v:,.0f}" for a, v in steps.items() if a in (row["a"], row["b"]))
    text = (f" Over the same optimizer steps ({span}; steps per job: {taken}): {cell(twin['mean_a'], 3)} vs "
            f"{cell(twin['mean_b'], 3)}, difference {cell(twin['difference'], 3)} [{cell(twin['ci_low'], 3)}, "
            f"{cell(twin['ci_high'], 3)}] ({p_text(twin)}): {verdict(twin)}")
    if detectable(row) and not detectable(twin):
        text += ", so the difference at equal samples is one of training progress (the arms took different steps)"
    elif detectable(row) and detectable(twin) and (row["difference"] > 0) != (twin["difference"] > 0):
        text += (", the opposite sign: the difference at equal samples comes from training progress (the arms "
                 "took different steps)")
    return text + "."


def _waste_by_difficulty(row: pd.Series, by_difficulty: pd.DataFrame | None, names: dict[str, str]) -> str:
    """Where the wasted samples are: each difficulty's wasted / drawn in a, then b."""
    if by_difficulty is None or by_difficulty.empty:
        return ""
    a = by_difficulty[by_difficulty["arm"] == row["a"]].set_index("difficulty")["wasted_frac"]
    b = by_difficulty[by_difficulty["arm"] == row["b"]].set_index("difficulty")["wasted_frac"]
    shared = [d for d in a.index if d in b.index]
    if len(shared) < 2:
        return ""
    gaps = {d: b[d] - a[d] for d in shared}
    widest = max(gaps, key=lambda d: abs(gaps[d]))
    parts = "; ".join(f"{names.get(d, d)} {cell(a[d], 3)} → {cell(b[d], 3)}" for d in shared)
    return (f" By difficulty (wasted / drawn, summed over seeds, {short_label(row['a'])} → {short_label(row['b'])}): "
            f"{parts}; the gap is widest at {names.get(widest, widest)} ({cell(gaps[widest], 3)}).")


@dataclass(frozen=True)
class Inputs:
    """What the Findings read besides the tests' family: each arm's tie fraction beside its prediction
    (the ties section's `calibration`), its samples per job (`budgets_per_arm`), its optimizer steps
    per job (`steps_per_arm`), its wasted_frac per difficulty (the what-trained section's), and the
    difficulty names."""

    calibration: pd.DataFrame | None = None
    budgets: pd.DataFrame | None = None
    steps: dict[str, float] = field(default_factory=dict)
    waste_by_difficulty: pd.DataFrame | None = None
    names: dict[str, str] = field(default_factory=dict)


def section(tests: pd.DataFrame, inputs: Inputs, unit_weight: str, ranked: Sequence[str] = (),
            coverage: str | None = None, first: Sequence[str] = ()) -> Section:
    """The Findings section (see `findings`)."""
    return Section(text=findings(tests, inputs, unit_weight, ranked, coverage, first))


def budget_warning(budgets: pd.DataFrame) -> str | None:
    """The Findings' first line where arms drew unequal budgets per job (`budgets_per_arm`), with the
    numbers, and which comparisons are therefore not at an equal budget; None when they drew alike."""
    ratios = unequal_budgets(budgets)
    if not ratios:
        return None
    parts = [f"{unit} per job {', '.join(f'{short_label(a)} {_amount(v)}' for a, v in zip(budgets['arm'], budgets[unit]))}"
             f" ({ratios[unit]:.2f}x)" for unit in ("samples", "tokens") if unit in ratios]
    # samples alike but tokens not (an arm that draws longer answers): a token budget is the equal one then
    fix = "`max_samples` ends every job at one budget" if "samples" in ratios else \
        "`max_tokens` ends every job at one token budget, if tokens are the cost that matters"
    return (f"**Unequal budgets**: the arms drew different amounts, {'; '.join(parts)}, more than "
            f"{BUDGET_TOLERANCE:.0%} apart. The comparisons below made at the end of each job's budget (wasted_frac, "
            "tie_frac, held-out at final) are therefore not at an equal budget; the held-out comparisons at aligned "
            f"checkpoints (Held-out results, aligned by samples drawn) are. {fix}.")


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


def calibration_text(calibration: pd.DataFrame | None) -> str | None:
    """The tie prediction p^G + (1−p)^G against what happened, per arm (never pooled across arms); an arm
    whose groups with a prediction come from too few prompts is counted, not compared."""
    if calibration is None or calibration.empty or not calibration["predicted_groups"].gt(0).any():
        return None
    one = len(calibration) == 1
    name = (lambda row: "") if one else (lambda row: short_label(row["arm"]) + ": ")  # noqa: E731
    checked = calibration[calibration["predicted_tie_frac"].notna()]
    too_few = [f"{'' if one else short_label(row['arm']) + ' '}{int(row['predicted_groups']):,} of "
               f"{int(row['groups']):,}" for _, row in calibration.iterrows() if pd.isna(row["predicted_tie_frac"])]
    few = (f"too few first-round groups have a prediction to check it ({'; '.join(too_few)}; a prompt must recur "
           f"within a step window, in at least {MIN_PROMPTS} prompts)") if too_few else ""
    if checked.empty:
        return f"Tie prediction p^G + (1−p)^G: {few}."
    parts = []
    for _, row in checked.iterrows():
        gap = (f"observed − predicted {cell(row['observed_minus_predicted'], 3)} "
               f"[{cell(row['diff_ci_low'], 3)}, {cell(row['diff_ci_high'], 3)}]")
        if row["observed_minus_predicted"] == row["diff_ci_low"] == row["diff_ci_high"] == 0:
            # every prompt's gaps sum to 0 whatever is resampled: the check could not have failed
            gap += (" by construction, not a check passed: each prompt's gaps sum to exactly 0 (a prompt seen at "
                    "two steps of a window, whose visits predict each other, or one that always ties alike), so the "
                    "check has no power here; longer step windows (a longer run) give it some")
        elif row["diff_ci_low"] <= 0 <= row["diff_ci_high"]:
            gap += ", no detectable difference"
        parts.append(f"{name(row)}first-round tie fraction {cell(row['tie_frac'], 3)} [{cell(row['ci_low'], 3)}, "
                     f"{cell(row['ci_high'], 3)}] of {int(row['groups']):,} groups; over the "
                     f"{int(row['predicted_groups']):,} with a prediction (mean {cell(row['predicted_tie_frac'], 3)}), "
                     f"{gap}")
    return ("Tie prediction p^G + (1−p)^G" + ("" if one else ", each arm over its own groups (all jobs, steps and "
            "difficulties, each group once)") + ": " + "; ".join(parts) + " (prompt-clustered bootstrap; the "
            "prediction assumes pass rates constant within a step window)" + (f"; {few}" if few else "") + ".")


def findings(tests: pd.DataFrame, inputs: Inputs, unit_weight: str, ranked: Sequence[str] = (),
             coverage: str | None = None, first: Sequence[str] = ()) -> str:
    """The Findings section from the family of tests (`tests`, with p_holm), what else they quote
    (`Inputs`), and, where a study has more than two arms, its rankings in words (`ranked`: they take
    the place of one sentence per pair, and the other tests are counted), and the coverage-after-RL
    sentence; `first`: lines said before all of them (what limits every comparison: unequal budgets,
    mixed code versions). A training-dynamics comparison at equal samples is followed by the same
    measure at equal optimizer steps where the arms took different steps."""
    lines: list[str] = list(first)
    at_steps = tests["metric"].isin(EQUAL_STEPS.values())
    twins = tests[tests["metric"].isin(AT_EQUAL_SAMPLES.values())]
    dynamics = tests[at_steps & ~tests["metric"].isin(AT_EQUAL_SAMPLES.values())]
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
        told = tests[~at_steps]
        order = ["held-out pass@1", "held-out", "wasted_frac", "tie_frac (first rounds)"]
        ranked_rows = sorted(range(len(told)), key=lambda i: next(
            (n for n, prefix in enumerate(order) if told["metric"].iloc[i].startswith(prefix)), len(order)))
        for n, i in enumerate(ranked_rows[:MAX_SENTENCES]):
            row = told.iloc[i]
            line = _sentence(row) + (_power(row) if n == 0 else "")
            if row["metric"] == "wasted_frac":
                line += _waste_by_difficulty(row, inputs.waste_by_difficulty, inputs.names)
            twin = twins[(twins["metric"] == AT_EQUAL_SAMPLES.get(row["metric"])) & (twins["a"] == row["a"])
                         & (twins["b"] == row["b"])]
            if len(twin):
                line += _at_equal_steps(row, twin.iloc[0], inputs.steps)
            lines.append(line)
        if len(dynamics):
            span = str(dynamics["interval"].iloc[0]).removeprefix("seeds, ")
            lines.append(f"Training dynamics over the same optimizer steps ({span}): " + "; ".join(
                f"{row['metric'].replace(', equal steps)', ')').removesuffix(' (equal steps)')} {cell(row['mean_a'], 3)} vs {cell(row['mean_b'], 3)}, "
                f"difference {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}] "
                f"({p_text(row)}): {verdict(row)}" for _, row in dynamics.iterrows()) + ".")
    if coverage:
        lines.append(coverage)
    tie_line = calibration_text(inputs.calibration)
    if tie_line:
        lines.append(tie_line)
    if len(lines) == len(first):
        lines.append("Only one arm and no tie prediction: nothing to compare.")
    return "\n".join(["## Findings", "",
                      f"Generated from the tables below; b − a, {budget_text(inputs.budgets)}. Informative "
                      f"= nonzero advantage in its training unit; under `pool=all`, {unit_weight}.", "",
                      *(f"- {line}" for line in lines)])
