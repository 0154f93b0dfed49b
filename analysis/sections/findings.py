"""The report's first screen: the answer in at most MAX_WORDS words, no bullet over MAX_BULLET_WORDS, for a
reader who will read nothing else. What was compared and at what cost; the verdict at each alignment in one
bullet each, with what its winners had more of; the same at the largest k (an equal inference budget); what
trained; what these seeds can resolve; the caveats, each in a line; and one pointer to everything else, which
is on the second page (each comparison in words, coverage after RL, tie prediction: `sections.in_words`).

Pairs of arms are never listed here: they live in the verdict table under the Findings and the tests' tables.
Each number is the verdict table's (`measures.verdict`) or a tests' family row's, as those tables print it.
Where the bullets would pass MAX_WORDS, the least important go (named in the pointer), never a verdict."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.arms import short_label
from analysis.data.resources import RESOURCES, had_more, more_text
from analysis.measures.informative import COMPARABLE_METRIC
from analysis.measures.questions import Question
from analysis.render.markdown import cell, p_value
from analysis.render.paging import anchor
from analysis.sections.section import DETAILS, Section
from analysis.sections.verdict import count_text, score_text
from analysis.stats.seeds import ALPHA, detectable

MAX_WORDS = 250  # the Findings, from the heading to the last bullet: a paper's abstract
MAX_BULLET_WORDS = 60  # one bullet: one thing said
CAVEATS = "Caveats in full"  # the second page's section of every caveat as long as it needs (`caveats_section`)
IN_WORDS = "Each comparison in words"  # the second page's section of the long form (`sections.in_words`)
LEADERS = 4  # arms named in a verdict bullet's top group; more are counted


def words(text: str) -> int:
    """Words as a reader counts them: runs of characters between spaces, markdown links counted by their text."""
    return len(re.sub(r"\]\([^)]*\)", "]", text).split())


@dataclass(frozen=True)
class Inputs:
    """What the Findings read: the verdict's alignments (`sections.verdict`: None without held-out comparisons),
    the tests' family (with p_holm and the attribution columns), each arm's budget per job (`budgets_per_arm`),
    the caveats (each a line that limits every comparison: incomplete sweep, unequal budgets, mixed code, ...)
    and the arm keys."""

    alignments: Sequence = ()
    tests: pd.DataFrame | None = None
    budgets: pd.DataFrame | None = None
    caveats: Sequence[str] = ()
    arm: tuple[str, ...] = ()
    # where no arm trained anything, its lines (`failures.nothing_trained`): all the Findings say, with what ran
    idle: Sequence[str] = ()
    # the study's questions (`measures.questions`): one bullet each instead of one an alignment; () asks none
    questions: Sequence[Question] = ()


def section(inputs: Inputs) -> Section:
    """The Findings section (`findings`)."""
    return Section(text=findings(inputs))


def findings(inputs: Inputs) -> str:
    """The Findings: the opening line, then the bullets in order of importance, as many as MAX_WORDS holds."""
    tests = inputs.tests if inputs.tests is not None else pd.DataFrame(columns=["metric", "a", "b"])
    if inputs.idle:  # nothing to compare: what ran, and why nothing trained
        return _page(_compared(inputs, tests) + ".", [brief(line) for line in inputs.idle])
    opening = _opening(inputs, tests)
    caveats = [brief(line) for line in inputs.caveats]
    verdicts = ([_question(q, tests, inputs.alignments) for q in inputs.questions] if inputs.questions
                and inputs.alignments else [_alignment(a, tests) for a in inputs.alignments])
    if verdicts and not any(a.name == "equal updates" for a in inputs.alignments):
        verdicts.append(_no_equal_updates(inputs.alignments[0]))
    optional = [(name, text) for name, text in (("power", _power(inputs.alignments, tests)),
                                                ("pass@k and cons@k", _at_k(tests, inputs.alignments)),
                                                ("what trained", _trained(tests)))
                if text]
    if not verdicts and not optional:
        verdicts = ["Only one arm, or no comparison between arms: nothing to compare (the second page has what "
                    "each arm did)."]
    bullets = [*verdicts, *caveats]
    left_out: list[str] = []
    for name, text in optional:  # kept in this order while the page stays within MAX_WORDS
        if words(_page(opening, [*bullets, text, _pointer(tests, left_out + ["x" * 12])])) <= MAX_WORDS:
            bullets.append(text)
        else:
            left_out.append(name)
    return _page(opening, [*bullets, _pointer(tests, left_out)])


def _page(opening: str, bullets: Sequence[str]) -> str:
    return "\n".join(["## Findings", "", opening, "", *(f"- {b}" for b in bullets)])


def _opening(inputs: Inputs, tests: pd.DataFrame) -> str:
    """What was compared and at what budget, and what "resolved" means, in two sentences."""
    return (f"{_compared(inputs, tests)}. Resolved: the 95% interval over seeds excludes 0 and the exact test rejects "
            f"after Holm over all pairs (α = {ALPHA}).")


def _compared(inputs: Inputs, tests: pd.DataFrame) -> str:
    """The arms and seeds that ran and each job's budget, in one clause."""
    arms = list(dict.fromkeys([*tests["a"].astype(str), *tests["b"].astype(str)])) if len(tests) else []
    if inputs.budgets is not None and len(inputs.budgets):
        arms = arms or list(inputs.budgets["arm"].astype(str))
    keys = ", ".join(f"`{k}`" for k in inputs.arm) or "one configuration"
    what = f"{len(arms)} arms ({keys}) × {_seeds(tests)}" if len(arms) > 1 else "One arm"
    return f"{what}; {_budget(inputs.budgets)}"


def _seeds(tests: pd.DataFrame) -> str:
    """"13 seeds" (or "4–13 seeds" where arms ran different numbers)."""
    if tests.empty or "seeds_a" not in tests:
        return "the seeds listed under Jobs"
    counts = pd.concat([tests["seeds_a"], tests["seeds_b"]]).dropna().astype(int)
    low, high = int(counts.min()), int(counts.max())
    return f"{low} seed{'s' * (high != 1)}" if low == high else f"{low}–{high} seeds"


def _budget(budgets: pd.DataFrame | None) -> str:
    """Each job's budget in samples drawn (and tokens generated), one number or the arms' range."""
    if budgets is None or budgets.empty:
        return "each job to its end"
    samples, tokens = budgets["samples"].astype(float), budgets["tokens"].astype(float)
    drawn = f"{samples.iloc[0]:,.0f}" if samples.nunique() == 1 else f"{samples.min():,.0f}–{samples.max():,.0f}"
    if tokens.isna().all():  # runs ingested from logs that hold no token counts
        return f"{drawn} samples per job (arm means; generated tokens not recorded)"
    generated = f"{tokens.min():,.0f}" if tokens.min() == tokens.max() else f"{tokens.min():,.0f}–{tokens.max():,.0f}"
    unknown = f", not recorded for {tokens.isna().sum()} arm{'s' * (tokens.isna().sum() > 1)}" if tokens.isna().any() \
        else ""
    return f"{drawn} samples and {generated} generated tokens per job (arm means{unknown})"


def _alignment(alignment, tests: pd.DataFrame) -> str:
    """One alignment's verdict on held-out pass@1 in one bullet: two arms, their difference; more, the top group
    and how many orderings are resolved; and what the winners (or the arm ahead) had more of."""
    head = f"**{alignment.name.capitalize()}** ({alignment.point}), held-out pass@1: "
    table = alignment.table
    if len(table) == 2:
        rows = tests[tests["metric"] == alignment.metric]
        if len(rows) == 1:
            return head + _pair(rows.iloc[0])
    top = table.iloc[0]
    group = table[table["letters"].astype(str).str.contains(str(top["letters"])[0], regex=False)].iloc[1:]
    named = ", ".join(short_label(a) for a in group["arm"].head(LEADERS))
    more = f" and {len(group) - LEADERS} more" if len(group) > LEADERS else ""
    interval = score_text(top["mean"], top["ci_low"], top["ci_high"])
    lead = f"{short_label(top['arm'])} has the highest mean ({interval}){_ahead_spent(table)}; "
    if not alignment.resolved:
        return head + lead + f"no ordering of the {alignment.pairs} pairs is resolved."
    top_group = f"not resolved below it: {named}{more}" if len(group) else "resolved above every other arm"
    return (head + lead + f"{top_group}. {len(alignment.resolved)} of {alignment.pairs} orderings resolved; "
            f"{_winners(alignment.orderings)}.")


def _ahead_spent(table: pd.DataFrame) -> str:
    """What the arm with the highest mean had more of than the next (the verdict table's resources at that point):
    ", with samples ×2.6, generated tokens ×2.7 the next arm's (grpo)"; "" where it had no more of any."""
    if len(table) < 2:
        return ""
    top, next_ = (table.iloc[i][[r for r in RESOURCES if r in table]].astype(float).to_dict() for i in (0, 1))
    more = had_more(next_, top)
    return f", with {more_text(more, next_, top)} the next arm's ({short_label(table.iloc[1]['arm'])})" if more else ""


def _question(question: Question, tests: pd.DataFrame, alignments: Sequence) -> str:
    """One question in one bullet: each of its arms' held-out pass@1 against the reference at the first alignment
    (Δpass@1: arm − reference, its interval), then at the others only what is resolved; for each resolved ordering,
    the arm ahead and what it had more of; where nothing is resolved anywhere, that these seeds cannot tell."""
    reference = short_label(question.reference)
    keys = ", ".join(f"`{k}`" for k in question.keys)
    values = " / ".join(question.values[a] for a in question.arms)
    head = f"**{keys}**: {values} vs {question.values[question.reference]} ({reference}), Δpass@1"
    parts, owed = [], []
    for i, alignment in enumerate(alignments):
        found = [(arm, row) for arm in question.arms
                 if (row := _against(tests, alignment.metric, arm, question.reference)) is not None]
        resolved = [(arm, row) for arm, row in found if detectable(row) and pd.isna(row.get("by_construction"))]
        where = f"at {alignment.name}"
        if i == 0:
            shown = [(f"{short_label(arm)} " if len(question.arms) > 1 else "")
                     + f"{'+' if row['difference'] > 0 else ''}{cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, "
                     f"{cell(row['ci_high'], 3)}]"
                     for arm, row in found]
            parts.append(f"{', '.join(shown)} {where}" if shown else f"not compared {where}")
        elif found:
            parts.append(f"{where}: {', '.join(short_label(a) for a, _ in resolved) or 'none'} resolved")
        for arm, row in resolved:
            ahead, other = (arm, question.reference) if row["difference"] > 0 else (question.reference, arm)
            amounts = {side: {r: row.get(f"{r}_{s}", np.nan) for r in RESOURCES}
                       for side, s in ((arm, "b"), (question.reference, "a"))}
            more = had_more(amounts[other], amounts[ahead])
            owed.append(f"{short_label(ahead)} above {short_label(other)} {where}, with more "
                        f"{more_text(more, amounts[other], amounts[ahead]) if more else 'of nothing'}")
    if not owed:  # one sentence for all of it: where it was compared, and that these seeds cannot tell
        return f"{head}: {parts[0]}; not resolved at {' or '.join(a.name for a in alignments)}."
    return f"{head}: {'; '.join(parts)}. Resolved: {'; '.join(owed)}."


def _against(tests: pd.DataFrame, metric: str, arm: str, reference: str) -> pd.Series | None:
    """The family row comparing `arm` with `reference` on `metric`, as b = arm, a = reference (the difference,
    its interval and the resources flipped where the family has them the other way round); None where none."""
    rows = tests[(tests["metric"] == metric) & (tests["a"].astype(str).isin([arm, reference]))
                 & (tests["b"].astype(str).isin([arm, reference])) & (tests["a"].astype(str) != tests["b"].astype(str))]
    if rows.empty:
        return None
    row = rows.iloc[0].copy()
    if str(row["a"]) == arm:  # flip to arm − reference
        row["difference"], row["ci_low"], row["ci_high"] = -row["difference"], -row["ci_high"], -row["ci_low"]
        for r in RESOURCES:
            row[f"{r}_a"], row[f"{r}_b"] = row.get(f"{r}_b", np.nan), row.get(f"{r}_a", np.nan)
        row["a"], row["b"] = reference, arm
    return row


def _no_equal_updates(first) -> str:
    """Where no checkpoint is at equal updates: whether that matters (the arms' updates at the first alignment
    differ by more than 10%) and how to get one."""
    updates = first.table["updates"].astype(float).dropna()
    if updates.empty or updates.max() <= 1.1 * updates.min():
        return ("**Equal updates**: no checkpoint there; the arms' updates at the end differ by at most 10% "
                f"({_span(updates)}).")
    return (f"**Equal updates**: no checkpoint there (`eval.every_updates` gives one); the arms took {_span(updates)} "
            "updates by the end, so the verdict above may be one of training progress, not of the arms.")


def _span(values: pd.Series) -> str:
    """The lowest and highest of the arms' amounts, as the verdict table prints each."""
    low, high = count_text(values.min()), count_text(values.max())
    return low if low == high else f"{low}–{high}"


def _pair(row: pd.Series) -> str:
    """A two-arm comparison in one clause: b − a with its interval and p; who is ahead and with more of what."""
    a, b = short_label(row["a"]), short_label(row["b"])
    text = (f"{b} − {a} {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}], "
            f"p = {p_value(row['p_holm'])}: ")
    amounts = {side: {r: row.get(f"{r}_{side}", np.nan) for r in RESOURCES} for side in "ab"}
    if detectable(row):
        ahead, other = (b, a) if row["difference"] > 0 else (a, b)
        side = "b" if ahead == b else "a"
        more = had_more(amounts["a" if side == "b" else "b"], amounts[side])
        owed = (f"with more {more_text(more, amounts['a' if side == 'b' else 'b'], amounts[side])}" if more
                else "with no more of any resource")
        return text + f"{ahead} ahead of {other}, {owed}."
    bits = [f"{name} had more {more_text(m, amounts[o], amounts[s])}"
            for name, s, o in ((a, "a", "b"), (b, "b", "a")) if (m := had_more(amounts[o], amounts[s]))]
    return text + "not resolved" + (f" ({'; '.join(bits)})" if bits else "") + "."


def _winners(orderings: pd.DataFrame | None) -> str:
    """What the winners of the resolved orderings had more of, counted: "every winner had more updates" or
    "winners had more updates in 30 of 31, samples in 1"."""
    if orderings is None or orderings.empty or "winner_had_more" not in orderings:
        return "their resources are not recorded"
    more = orderings["winner_had_more"].fillna("not recorded").astype(str)
    n = len(more)
    counts = {RESOURCES[r][1]: int(more.str.contains(RESOURCES[r][1], regex=False).sum()) for r in RESOURCES}
    counts = {name: c for name, c in counts.items() if c}
    none = int((more == "none").sum())
    if not counts:
        return "no winner had more of any resource" if none == n else "the winners' resources are not recorded"
    first, *rest = sorted(counts.items(), key=lambda kv: -kv[1])
    text = (f"every winner had more {first[0]}" if first[1] == n else
            f"winners had more {first[0]} in {first[1]} of {n}")
    also = [f"{name} in {c}" for name, c in rest] + ([f"no more of any in {none}"] if none else [])
    return text + (f" ({', '.join(also)})" if also else "")


def _held_out_metrics(tests: pd.DataFrame) -> list[str]:
    """The held-out metrics at the largest k (pass@K, cons@K at equal samples), as the family names them."""
    names = [m for m in dict.fromkeys(tests["metric"].astype(str)) if re.fullmatch(r"held-out (pass|cons)@\d+", m)]
    ks = {int(m.rsplit("@", 1)[1]) for m in names}
    largest = max(ks, default=1)
    return [m for m in names if int(m.rsplit("@", 1)[1]) == largest and largest > 1]


def _at_k(tests: pd.DataFrame, alignments: Sequence) -> str | None:
    """The same arms at an equal inference budget, k samples per prompt: pass@K and cons@K at each alignment."""
    metrics = _held_out_metrics(tests)
    if not metrics:
        return None
    k = metrics[0].rsplit("@", 1)[1]
    parts = []
    for metric in metrics:
        at = []
        for a in alignments:
            rows = tests[tests["metric"] == metric + a.metric.removeprefix("held-out pass@1")]
            if rows.empty:
                continue
            if len(rows) == 1:
                row = rows.iloc[0]
                at.append(f"{cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, {cell(row['ci_high'], 3)}]"
                          f"{' resolved' if detectable(row) else ''} at {a.name}")
            else:
                at.append(f"{sum(detectable(r) for _, r in rows.iterrows())} of {len(rows)} pairs resolved at "
                          f"{a.name}")
        if at:
            parts.append(f"{metric.removeprefix('held-out ')}: {', '.join(at)}")
    return f"**At k = {k}** (an equal inference budget): " + "; ".join(parts) + "." if parts else None


def _trained(tests: pd.DataFrame) -> str | None:
    """What trained: the share of drawn samples that taught nothing (tied groups), counted alike for every arm
    where an arm's rule fixes some (`wasted_frac (comparable)`), lowest and highest arm and what is resolved."""
    metric = COMPARABLE_METRIC if (tests["metric"] == COMPARABLE_METRIC).any() else "wasted_frac"
    rows = tests[tests["metric"] == metric]
    if "by_construction" in rows:
        rows = rows[rows["by_construction"].isna()]
    if rows.empty:
        return None
    if len(rows) == 1:
        row = rows.iloc[0]
        return (f"**What trained**: {metric} (drawn samples that taught nothing), {short_label(row['b'])} − "
                f"{short_label(row['a'])} {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, "
                f"{cell(row['ci_high'], 3)}]{', resolved' if detectable(row) else ', not resolved'}.")
    means = pd.concat([rows.set_index("a")["mean_a"], rows.set_index("b")["mean_b"]]).groupby(level=0).first()
    low, high = means.idxmin(), means.idxmax()
    resolved = sum(detectable(r) for _, r in rows.iterrows())
    return (f"**What trained**: {metric} (drawn samples that taught nothing) lowest in {short_label(low)} "
            f"({cell(means[low], 3)}), highest in {short_label(high)} ({cell(means[high], 3)}); {resolved} of "
            f"{len(rows)} pairs resolved.")


def _power(alignments: Sequence, tests: pd.DataFrame) -> str | None:
    """What these seeds can resolve at all, on the first alignment's metric: the exact test's floor and the median
    minimum detectable difference (80% power)."""
    if not alignments:
        return None
    rows = tests[tests["metric"] == alignments[0].metric]
    if rows.empty or "smallest_p" not in rows:
        return None
    floor = float(rows["smallest_p"].max())
    mde = rows["mde"].replace([np.inf, -np.inf], np.nan).dropna() if "mde" in rows else pd.Series(dtype=float)
    seeds = _seeds(rows)
    if floor >= ALPHA or mde.empty:
        return (f"**Power**: with {seeds} the exact test's smallest p is {p_value(floor)}: no pass@1 difference of "
                "any size can be resolved; more seeds can.")
    unresolved = len(rows) - sum(detectable(r) for _, r in rows.iterrows())
    typical = "" if len(rows) == 1 else " (median over pairs)"
    return (f"**Power**: with {seeds} a side the smallest pass@1 difference resolved at 80% power is about "
            f"{cell(float(mde.median()), 2)}{typical}" + (f"; {unresolved} of {len(rows)} pairs are not resolved."
                                                          if len(rows) > 1 else "."))


def _pointer(tests: pd.DataFrame, left_out: Sequence[str]) -> str:
    """The one line to the second page: what is there and whether anything in it is a finding."""
    told = {"held-out pass@1", COMPARABLE_METRIC, "wasted_frac", *(m for m in _held_out_metrics(tests))}
    other = tests[~tests["metric"].astype(str).map(lambda m: m.split(" (equal")[0] in told)] if len(tests) else tests
    found = sum(detectable(r) for _, r in other.iterrows() if pd.isna(r.get("by_construction")))
    dropped = f" ({', '.join(left_out)} too)" if left_out else ""
    return (f"**More** on [{DETAILS}]({DETAILS}#{anchor(IN_WORDS)}): each comparison in words{dropped}, coverage "
            f"after RL and the tie prediction; {found} other detectable difference{'s' * (found != 1)} (tie "
            "fractions, training dynamics), none a verdict.")


def brief(line: str) -> str:
    """A caveat as the Findings give it: whole where it is at most MAX_BULLET_WORDS words, else its bold lead and
    its first clauses up to the limit, and where it is given in full (the second page's CAVEATS)."""
    if words(line) <= MAX_BULLET_WORDS:
        return line
    link = f" … ([in full]({DETAILS}#{anchor(CAVEATS)}))"
    kept: list[str] = []
    for clause in re.split(r"(?<=[;:.,])\s+", line):
        if words(" ".join([*kept, clause])) + words(link) > MAX_BULLET_WORDS:
            break
        kept.append(clause)
    return " ".join(kept).rstrip(";:,") + link


def caveats_section(caveats: Sequence[str]) -> Section | None:
    """The second page's section of every caveat in full, where one was cut short in the Findings."""
    if not any(words(c) > MAX_BULLET_WORDS for c in caveats):
        return None
    return Section(text="\n".join([f"## {CAVEATS}", "", *(f"- {c}" for c in caveats)]))
