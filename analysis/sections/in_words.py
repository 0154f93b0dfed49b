"""Each comparison in words, on the second page: a sentence per comparison generated from the report's own
tables, each with its number, its interval and the test behind it, held-out results first; "no detectable
difference" wherever the interval covers zero; the same at the other alignments and what the winner had more of.
Many arms: the rankings in words and the other comparisons counted. Then coverage after RL and the tie prediction.
The first page's Findings (`sections.findings`) say the answer in 250 words; this is the long form behind it.
Each number once: a quantity quoted here has the estimate and interval of the table it comes from; pooled
numbers say what they pool."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from analysis.data.arms import short_label
from analysis.measures.equal_updates import AT_EQUAL_SAMPLES
from analysis.measures.equal_updates import METRICS as EQUAL_UPDATES
from analysis.measures.informative import COMPARABLE_METRIC
from analysis.measures.ranking import RANKED_METRICS
from analysis.measures.reversal import reversal
from analysis.measures.spend import unequal_budgets
from analysis.measures.ties import MIN_PROMPTS
from analysis.render.markdown import MAX_LISTED, cell, p_value
from analysis.sections.budgets import budget_text, compared_at
from analysis.sections.failures import answered_text
from analysis.sections.findings import IN_WORDS
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
        return "the test rejects but the interval covers zero, so no detectable difference"
    if detectable(row):
        return "a detectable difference"
    floor = row.get("smallest_p", math.nan)
    reason = (f"with {row['seeds_a']} and {row['seeds_b']} seeds the exact test cannot go below p = {cell(floor, 2)}"
              if pd.notna(floor) and floor >= ALPHA else "the test across seeds does not reject")
    return f"the interval excludes zero but {reason}, so no detectable difference"


def p_text(row: pd.Series) -> str:
    """The test's p as adjusted: plain where its family (the pairs of arms on its metric) holds one
    test, Holm's with the family's size otherwise."""
    family = int(row.get("family", 1) or 1)
    return f"p = {p_value(row['p_holm'])}" if family <= 1 else \
        f"Holm p = {p_value(row['p_holm'])} over the {family} pairs on this metric"


def _test_name(row: pd.Series) -> str:
    return "exact sign-flip test over paired seeds" if row["paired"] else "exact permutation test over seeds"


def _difference(row: pd.Series) -> str:
    return (f"{row['metric']}: {cell(row['mean_a'], 3)} for {row['a']} and {cell(row['mean_b'], 3)} for {row['b']}, "
            f"difference {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}]")


def _sentence(row: pd.Series) -> str:
    """One comparison in words: the interval and the test both over seeds; a held-out row says it holds for new
    seeds on these held-out prompts (not for a new draw of prompts) and how many paired seeds agree."""
    if not str(row["metric"]).startswith("held-out"):
        return (f"{_difference(row)} (95% interval over {row['interval']}; {_test_name(row)}, {p_text(row)}): "
                f"{verdict(row)}.")
    seeds = ""
    if row["paired"] and pd.notna(row.get("b_higher")):
        higher, lower = int(row["b_higher"]), int(row["b_lower"])
        side, count = ("higher", higher) if higher >= lower else ("lower", lower)
        seeds = f"; {short_label(row['b'])} is {side} in {count} of {row['seeds_a']} paired seeds"
    prompts = f"these {int(row['prompts'])} held-out prompts" if pd.notna(row.get("prompts")) else \
        "these held-out prompts"
    return (f"{_difference(row)} (95% interval over seeds, for new seeds on {prompts}{seeds}; {_test_name(row)}, "
            f"{p_text(row)}): {verdict(row)}.")


def _power(row: pd.Series) -> str:
    """What these seeds can detect at all, said once, after the first comparison: the exact test's floor
    and the minimum detectable difference of the quantity the verdict reads (the interval's)."""
    basis = "t approximation over seeds"
    floor = (f" With {row['seeds_a']} and {row['seeds_b']} seeds the exact test's smallest p is "
             f"{cell(row['smallest_p'], 3)}")
    if pd.notna(row["mde"]) and math.isfinite(row["mde"]) and row["mde"] > 0:  # 0: no spread to measure by
        return (f"{floor}; the minimum detectable difference (80% power, α = {ALPHA}, {basis}) is "
                f"{cell(row['mde'], 3)}.")
    family = int(row.get("family", 1) or 1)
    if pd.notna(row["smallest_p"]) and row["smallest_p"] >= ALPHA:
        why = f"at or above α = {ALPHA}, so no difference of any size can be detected with these seeds"
    elif pd.notna(row["mde"]) and math.isinf(row["mde"]):
        why = (f"not below Holm's first bar α/{family} over the {family} pairs on this metric, so no difference of "
               "any size can be detected with these seeds")
    elif pd.notna(row["mde"]):  # 0: every seed's difference the same
        why = "and the per-seed differences have no spread to measure it by"
    else:
        why = "and the per-seed differences have no spread to measure it by (fewer than two seeds a side)"
    return f"{floor}, {why}: there is no minimum detectable difference to give."


STEP_TOLERANCE = 0.10  # arms whose updates differ by more than this at a compared point: both counts are named


def twin_metric(metric: str, at: str = "updates") -> str | None:
    """The metric of the same comparison at equal updates (`at` "updates": a held-out score's "(equal
    updates)" row, the first-round tie fraction's over the first updates every job took, `equal_updates`) or
    equal tokens (`at` "tokens": a held-out score's "(equal tokens)" row); None for the others."""
    if at == "updates" and metric in AT_EQUAL_SAMPLES:
        return AT_EQUAL_SAMPLES[metric]
    return f"{metric} (equal {at})" if metric.startswith("held-out") and not metric.endswith(")") else None


def is_twin(metric: str) -> bool:
    """Whether a metric is another alignment's view of a comparison made at equal samples (said with it)."""
    return metric in AT_EQUAL_SAMPLES.values() or (metric.startswith("held-out") and metric.endswith(
        (" (equal updates)", " (equal tokens)")))


def mean_steps(text: object) -> float:
    """The mean of a comparison's steps per job as the held-out tables write them ("80, 83"); NaN if none."""
    values = [float(v) for v in str(text).split(",") if v.strip().replace(".", "", 1).isdigit()]
    return sum(values) / len(values) if values else math.nan


def steps_differ(a: float, b: float) -> bool:
    """Whether two arms' updates differ by more than STEP_TOLERANCE (relative to the larger)."""
    return bool(math.isfinite(a) and math.isfinite(b) and abs(a - b) > STEP_TOLERANCE * max(a, b))


def _steps_taken(row: pd.Series, steps: dict[str, float]) -> tuple[float, float]:
    """Each arm's updates (updates taken) at a row's compared point: the held-out rows carry them
    (`updates_a`, `updates_b`), the others are at the end of each job (the mean over the arm's jobs, `steps`)."""
    if pd.notna(row.get("updates_a")) and pd.notna(row.get("updates_b")):
        return float(row["updates_a"]), float(row["updates_b"])
    return steps.get(row["a"], math.nan), steps.get(row["b"], math.nan)


def owed(row: pd.Series) -> str:
    """What the winner of a resolved ordering had more than 10% more of at the compared point (the tests' family's
    `winner_had_more`, `analysis.measures.attribution`), and a reversal at another alignment; "" where unresolved."""
    won, more = row.get("winner"), row.get("winner_had_more")
    if not isinstance(won, str) or not isinstance(more, str):
        return ""
    text = (f" {short_label(won)} won with no more of any resource recorded (updates, samples, tokens, FLOPs within "
            "10%)" if more == "none" else f" {short_label(won)} won with more {more}" if more != "not recorded"
            else f" {short_label(won)} won; its resources there were not recorded")
    if isinstance(row.get("reversal"), str):
        text += f"; the ordering is {row['reversal']}"
    return text + "."


def _at_equal_steps(row: pd.Series, twin: pd.Series, inputs: Inputs) -> str:
    """A row at equal samples (or at the end of unequal budgets, said so) whose arms took different numbers of
    updates, followed by the same comparison at equal updates, saying which alignment the difference holds at: both
    step counts named."""
    a_steps, b_steps = _steps_taken(row, inputs.steps)
    opening, point = compared_at(row, inputs.budgets)
    where = str(twin["interval"]).removeprefix("seeds, ").removeprefix("prompts and seeds, ")
    text = (f" {opening} {short_label(row['a'])} took {a_steps:,.0f} updates and "
            f"{short_label(row['b'])} {b_steps:,.0f}; at equal updates ({where}): {cell(twin['mean_a'], 3)} vs "
            f"{cell(twin['mean_b'], 3)}, difference {cell(twin['difference'], 3)} [{cell(twin['ci_low'], 3)}, "
            f"{cell(twin['ci_high'], 3)}] ({p_text(twin)}): {verdict(twin)}")
    if detectable(row) and not detectable(twin) and not twin["ci_low"] <= row["difference"] <= twin["ci_high"]:
        text += (f", so the difference holds at {point}, not at equal updates (whose interval excludes it): it "
                 "is one of training progress (the arms took different updates), not of the arms at equal updates")
    elif detectable(row) and not detectable(twin):
        text += (f", so it is not established at equal updates ({where}), nor ruled out there: these seeds cannot "
                 "tell a difference of the arms from one of training progress")
    elif detectable(row) and detectable(twin) and (row["difference"] > 0) != (twin["difference"] > 0):
        text += (f", the opposite sign: the difference at {point} comes from training progress (the arms "
                 "took different updates)")
    elif detectable(row) and detectable(twin):
        text += ", so the difference holds at both alignments"
    elif detectable(twin):
        text += f", a difference at equal updates that {point} {'do' if point == 'equal samples' else 'does'} not show"
    return text + "." + owed(twin)


def _waste_by_difficulty(row: pd.Series, by_difficulty: pd.DataFrame | None, names: dict[str, str]) -> str:
    """Where the wasted samples are: each difficulty's wasted / drawn in a, then b; where the pooled difference
    is reversed at every difficulty, that in its place (`reversal`)."""
    if by_difficulty is None or by_difficulty.empty:
        return ""
    flipped = reversal(by_difficulty, row["a"], row["b"], "wasted_frac", "samples")
    if flipped is not None:
        return " " + flipped.text(names, "wasted_frac", "samples drawn")
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


def _ties_reversed(row: pd.Series, by_difficulty: pd.DataFrame | None, names: dict[str, str]) -> str:
    """The first-round tie fraction's pooled difference reversed at every difficulty, in words; "" if not."""
    if by_difficulty is None or by_difficulty.empty:
        return ""
    flipped = reversal(by_difficulty, row["a"], row["b"], "tie_frac", "groups")
    return "" if flipped is None else " " + flipped.text(names, "the first-round tie fraction", "first-round groups")


def _by_construction(row: pd.Series) -> str | None:
    """The reason a comparison is fixed by an arm's rule (`analysis.measures.construction`), or None."""
    why = row.get("by_construction")
    return None if why is None or pd.isna(why) else str(why)


@dataclass(frozen=True)
class Inputs:
    """What the Findings read besides the tests' family: each arm's tie fraction beside its prediction
    (the ties section's `calibration`), its samples per job (`budgets_per_arm`), its updates
    per job (`updates_per_arm`), its wasted_frac and first-round tie fraction per difficulty (the what-trained and
    ties sections'), and the difficulty names."""

    calibration: pd.DataFrame | None = None
    budgets: pd.DataFrame | None = None
    steps: dict[str, float] = field(default_factory=dict)
    waste_by_difficulty: pd.DataFrame | None = None
    ties_by_difficulty: pd.DataFrame | None = None
    names: dict[str, str] = field(default_factory=dict)
    answered: pd.DataFrame | None = None  # all-wrong ties split by whether the model answered (the ties section's)
    arm: tuple[str, ...] = ()  # the keys that tell arms apart


def section(tests: pd.DataFrame, inputs: Inputs, unit_weight: str, ranked: Sequence[str] = (),
            coverage: str | None = None, idle: bool = False) -> Section | None:
    """The section of each comparison in words (see `in_words`); None where no arm trained anything."""
    return None if idle else Section(
        text=in_words(tests, inputs, unit_weight, ranked, coverage),
        pointer="the long form of the Findings: a sentence per comparison with its interval and test, the "
        "rankings in words, coverage after RL and the tie prediction")


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


def _twin(row: pd.Series, twins: pd.DataFrame, at: str = "updates") -> pd.Series | None:
    """The same comparison at equal updates (or `at` "tokens": equal tokens), where there is one."""
    twin = twins[(twins["metric"] == twin_metric(row["metric"], at)) & (twins["a"] == row["a"])
                 & (twins["b"] == row["b"])]
    return twin.iloc[0] if len(twin) else None


def _at_equal_tokens(twin: pd.Series) -> str:
    """The same held-out comparison at the study's equal-tokens point, in one sentence."""
    where = str(twin["interval"]).split(", ", 1)[-1]
    return (f" At equal tokens ({where}): {cell(twin['mean_a'], 3)} vs {cell(twin['mean_b'], 3)}, difference "
            f"{cell(twin['difference'], 3)} [{cell(twin['ci_low'], 3)}, {cell(twin['ci_high'], 3)}] ({p_text(twin)}): "
            f"{verdict(twin)}.")


def _other_comparisons(rest: pd.DataFrame, twins: pd.DataFrame, inputs: Inputs) -> str:
    """The comparisons a many-arm study does not rank, counted: the detectable differences listed; those that
    vanish or flip over the same updates, and those an arm's rule fixes, counted apart and never listed as
    differences of the arms."""
    rest = rest[~rest["metric"].map(is_twin).astype(bool)]  # another alignment's view: said with its own row
    fixed = rest[[_by_construction(row) is not None for _, row in rest.iterrows()]]
    found, progress = [], []
    for _, row in rest.drop(fixed.index).iterrows():
        if not detectable(row):
            continue
        text = f"{row['metric']}: {short_label(row['b'])} − {short_label(row['a'])} {cell(row['difference'], 3)}"
        twin = _twin(row, twins)
        if twin is not None and (not detectable(twin) or (twin["difference"] > 0) != (row["difference"] > 0)):
            progress.append(f"{text} (over the same updates {cell(twin['difference'], 3)})")
            continue
        if row["metric"] == "tie_frac (first rounds)" and _ties_reversed(row, inputs.ties_by_difficulty, {}):
            text += " (reversed within every difficulty: the arms' mix of difficulties)"
        found.append(text)
    counted = len(rest) - len(fixed)
    text = (f"Of the other {counted} comparisons ({', '.join(dict.fromkeys(rest.drop(fixed.index)['metric']))}; "
            f"every pair of arms, under Tests across seeds), {len(found)} "
            f"{'is a detectable difference' if len(found) == 1 else 'are detectable differences'}"
            + (f": {'; '.join(found[:MAX_LISTED])}" + ("; …" if len(found) > MAX_LISTED else "") if found else "")
            + ".")
    if progress:
        point = ("at the end of each job's budget (unequal samples)" if inputs.budgets is not None
                 and "samples" in unequal_budgets(inputs.budgets) else "at equal samples")
        text += (f" {len(progress)} more {'is' if len(progress) == 1 else 'are'} detectable {point} but not "
                 "at equal updates, where the difference is not established or changes sign (the arms took different "
                 "updates, so each may be one of training progress rather than of the arms): "
                 f"{'; '.join(progress[:MAX_LISTED])}" + ("; …" if len(progress) > MAX_LISTED else "") + ".")
    if len(fixed):
        text += (f" {len(fixed)} {'comparison is' if len(fixed) == 1 else 'comparisons are'} fixed by an arm's own "
                 f"rule ({', '.join(dict.fromkeys(fixed['metric']))}: `by_construction` under Tests across seeds) and "
                 "not counted.")
    return text


def in_words(tests: pd.DataFrame, inputs: Inputs, unit_weight: str, ranked: Sequence[str] = (),
             coverage: str | None = None) -> str:
    """The section from the family of tests (`tests`, with p_holm), what else they quote (`Inputs`), and, where
    a study has more than two arms, its rankings in words (`ranked`: they take the place of one sentence per
    pair, and the other tests are counted), and the coverage-after-RL sentence. A training-dynamics comparison
    at equal samples is followed by the same measure at equal updates where the arms took different numbers."""
    lines: list[str] = []
    twinned = tests["metric"].map(is_twin).astype(bool)
    at_steps = tests["metric"].isin(EQUAL_UPDATES.values()) | twinned
    twins = tests[twinned]
    dynamics = tests[at_steps & ~twinned]
    if ranked:
        lines += ranked
        ranked_metrics = set(RANKED_METRICS)
        if not tests["metric"].isin([COMPARABLE_METRIC]).any():  # no arm has a rule: the ranking read wasted_frac
            ranked_metrics.add("wasted_frac")
        rest = tests[~tests["metric"].isin(ranked_metrics)]
        if len(rest):
            lines.append(_other_comparisons(rest, twins, inputs))
    elif len(tests):
        told = tests[~at_steps]
        order = ["held-out pass@1", "held-out", "wasted_frac", "tie_frac (first rounds)"]
        ranked_rows = sorted(range(len(told)), key=lambda i: next(
            (n for n, prefix in enumerate(order) if told["metric"].iloc[i].startswith(prefix)), len(order)))
        powered = False  # what the seeds can detect, said after the first comparison that is tested
        for i in ranked_rows[:MAX_SENTENCES]:
            row = told.iloc[i]
            why = _by_construction(row)
            if why is not None:  # measured, but the arm's rule fixed it: no test, no finding
                lines.append(f"{_difference(row)}: by construction, not a finding ({why}).")
                continue
            line = _sentence(row) + owed(row) + ("" if powered else _power(row))
            powered = True
            if row["metric"] == "wasted_frac":
                line += _waste_by_difficulty(row, inputs.waste_by_difficulty, inputs.names)
            if row["metric"] == "tie_frac (first rounds)":
                line += _ties_reversed(row, inputs.ties_by_difficulty, inputs.names)
            twin, taken = _twin(row, twins), _steps_taken(row, inputs.steps)
            if steps_differ(*taken) and twin is not None:
                line += _at_equal_steps(row, twin, inputs)
            elif steps_differ(*taken):
                line += (f" {compared_at(row, inputs.budgets)[0]} {short_label(row['a'])} took {taken[0]:,.0f} "
                         f"updates and {short_label(row['b'])} {taken[1]:,.0f}" + (
                             "; no checkpoint at equal updates was evaluated (`eval.every_updates` gives every job "
                             "one), so whether the difference is one of the arms or of training progress is not "
                             "known."
                             if row["metric"].startswith("held-out") else "."))
            if (tokens := _twin(row, twins, "tokens")) is not None:
                line += _at_equal_tokens(tokens)
            lines.append(line)
        if len(dynamics):
            span = str(dynamics["interval"].iloc[0]).removeprefix("seeds, ")
            lines.append(f"Training dynamics over the same updates ({span}): " + "; ".join(
                f"{row['metric'].replace(', equal updates)', ')').removesuffix(' (equal updates)')} "
                f"{cell(row['mean_a'], 3)} vs {cell(row['mean_b'], 3)}, "
                f"difference {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}] "
                f"({p_text(row)}): {verdict(row)}" for _, row in dynamics.iterrows()) + ".")
    if coverage:
        lines.append(coverage)
    tie_line = calibration_text(inputs.calibration)
    if tie_line:
        lines.append(tie_line)
    if format_line := answered_text(inputs.answered, inputs.arm):
        lines.append(format_line)
    if not lines:
        lines.append("Only one arm and no tie prediction: nothing to compare.")
    return "\n".join([f"## {IN_WORDS}", "",
                      f"Generated from the report's tables; b − a, {budget_text(inputs.budgets)}. Informative "
                      f"= nonzero advantage in its training unit; under `pool=all`, {unit_weight}.", "",
                      *(f"- {line}" for line in lines)])
