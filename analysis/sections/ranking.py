"""Ranking, where a study has more than two arms: each arm's held-out pass@1 and informative samples
per 1,000 drawn with intervals over seeds, and the orderings the tests resolve, as rank ranges; in
words for the Findings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from analysis.data.alignment import SAMPLES, equal_updates_point, final_alignment
from analysis.data.arms import iter_arms, short_label
from analysis.data.load import Tables
from analysis.measures.ranking import (
    INFORMATIVE,
    PASS1,
    PASS1_UPDATES,
    Ranking,
    informative_by_arm,
    pass1_at_updates,
    pass1_by_arm,
    rank,
)
from analysis.measures.reversal import reversal
from analysis.render import intervals as figures
from analysis.render.markdown import MAX_LISTED, cell
from analysis.render.writer import Files
from analysis.sections.section import Context, Section
from analysis.stats.seeds import ALPHA


@dataclass(frozen=True, kw_only=True)
class Ranked(Section):
    """`sentences`: each ranking in one Findings line (the first with what the seeds can resolve)."""

    sentences: list[str]


def section(tables: Tables, ctx: Context, tests: pd.DataFrame, scores: pd.DataFrame | None,
            per_job: pd.DataFrame | None, fixed: Mapping[str, str] | None = None,
            prompt_scores: pd.DataFrame | None = None, by_difficulty: pd.DataFrame | None = None,
            rules: Mapping[str, str] | None = None) -> Ranked | None:
    """The ranking section from the tests' family (with p_holm), the held-out section's per-job
    scores (`seed_scores`; None without eval tables) and the what-trained section's per-job spend
    (`per_job_spend`); None with two arms or fewer, whose one comparison per metric says it all.
    `fixed`: the arms whose wasted fraction their own rule fixes (label -> why: `construction.Fixed.wasted`),
    left out of the informative ranking and named apart. `prompt_scores`: every prompt's scores at every job and
    step (the held-out section's), for the ranking at the study's equal-updates point where the arms took
    different numbers of updates (`alignment.equal_updates_point`). `by_difficulty`: each arm's wasted fraction and
    samples per difficulty (the what-trained section's), for the informative ordering's check within every
    difficulty (`reversal`)."""
    arm = list(ctx.arm)
    if len(list(iter_arms(tables.jobs, arm))) <= 2:
        return None
    rankings: list[Ranking] = []
    if scores is not None:
        rankings.append(rank(PASS1, pass1_by_arm(scores, arm), tests))
    at_step = equal_updates_point(tables.eval.drop_duplicates(["job", "step"])) if not tables.eval.empty else None
    if prompt_scores is not None and at_step is not None:
        rankings.append(rank(PASS1_UPDATES, pass1_at_updates(prompt_scores, tables.eval, arm, at_step), tests))
    fixed = dict(fixed or {})
    if not tables.groups.empty:
        by_arm = informative_by_arm(tables.groups, arm, per_job)
        rankings.append(rank(INFORMATIVE, by_arm[~by_arm["arm"].isin(fixed)].reset_index(drop=True), tests))
    if not rankings:
        return None
    # what the arms' last checkpoints share: the budget's samples, or one step where every job ran the same steps
    ended = final_alignment(tables.eval.drop_duplicates(["job", "step"])) if not tables.eval.empty else SAMPLES
    sentences = [sentence(r, step=at_step, final=ended) for r in rankings]
    first = rankings[0]
    if at_step is None and first.measure == PASS1 and first.orderings is not None and \
            first.orderings["winner_had_more"].fillna("").str.contains("updates").any():
        sentences[0] += (" No checkpoint at equal updates was evaluated (`eval.every_updates` gives every job one), "
                         "so whether these orderings are of the arms or of their training progress is not known.")
    left_out = " ".join(filter(None, [counted_text({a: w for a, w in (rules or {}).items() if a not in (fixed or {})}),
                                      unranked_text(fixed)]))
    if left_out and rankings[-1].measure == INFORMATIVE:
        sentences[-1] += f" {left_out}"
    sentences[0] += f" Power: {power(rankings[0])}"
    files = Files()
    parts = [
        "## Ranking", "",
        f"Each arm at the end of its budget (equal {ended}), best first: held-out pass@1 (mean over held-out "
        "prompts and seeds), "
        + (f"the same at the study's equal-updates point ({at_step:,} updates, optimizer steps taken: every job "
           "evaluated there, whatever its budget; arms that spend samples on redraws take fewer updates to a "
           "budget), " if at_step is not None else "")
        + "and informative samples per 1,000 drawn, counted alike for every arm (a tie rule's forced advantages "
        "and a sampler's cap left out: `wasted_frac (comparable)` under Tests across seeds; each job's own rate), "
        "each with "
        "Student's t 95% interval over seeds (the trained models; every arm is scored on the same held-out prompts, "
        "so the pass@1 interval is for new seeds on these prompts, as the tests' intervals are). An "
        "ordering of two arms is **resolved** when their comparison under Tests across seeds is a detectable "
        "difference: its interval excludes zero and the exact "
        f"test across seeds rejects after Holm's correction over every pair of arms on that measure (α = {ALPHA}). "
        "`ranks` is the range of places an arm can hold given the resolved orderings alone (1–n: none involves "
        "it); `above` lists the arms it is resolved above, `below` those resolved above it. A place in the "
        f"order of the means that no resolved ordering backs is not a finding. Power: {power(rankings[0])}", "",
        files.figure("ranking", figures.ranking, rankings), ""]
    for r in rankings:
        name = "ranking_" + {PASS1: "pass1", PASS1_UPDATES: "pass1_equal_updates",
                             INFORMATIVE: "informative"}[r.measure]
        text = resolved_text(r)
        apart = f" {left_out}" if r.measure == INFORMATIVE and left_out else ""
        parts += [f"### {r.measure}", "", files.table(name, r.table), "", f"{text[0].upper()}{text[1:]}.{apart}", ""]
        if r.orderings is not None and len(r.orderings):
            orderings = within_difficulty(r, by_difficulty) if r.measure == INFORMATIVE else r.orderings
            parts += ["Each resolved ordering with both arms' resources at the compared point (updates: optimizer "
                      "steps taken; tokens: generated) and what the winner had more than 10% more of; `reversal`: "
                      "the same ordering resolved the other way at another alignment"
                      + (", or reversed within every difficulty (the arms' mix of difficulties)"
                         if r.measure == INFORMATIVE else "") + ".", "",
                      files.table(name + "_orderings", orderings), ""]
    return Ranked(text="\n".join(parts).rstrip(), files=files, sentences=sentences,
                  pointer="each arm's place on held-out pass@1 and on informative samples per 1,000 drawn, with "
                  "every resolved ordering and what its winner had more of (the verdict table's orderings, listed)")


def within_difficulty(r: Ranking, by_difficulty: pd.DataFrame | None) -> pd.DataFrame:
    """The informative ranking's orderings with a pooled ordering that every difficulty reverses said in its
    `reversal` (Simpson's paradox: the pooled wasted fraction comes from the arms' mix of difficulties)."""
    out = r.orderings.copy()
    if by_difficulty is None or by_difficulty.empty:
        return out
    out["reversal"] = out["reversal"].astype(object)  # all-NaN (no reversal anywhere) reads as float: words go in
    for i, (better, worse) in enumerate(r.resolved):
        if reversal(by_difficulty, worse, better, "wasted_frac", "samples") is not None:
            said = out.at[i, "reversal"]
            out.at[i, "reversal"] = "; ".join(filter(None, [said if isinstance(said, str) else None,
                                                            "reversed within every difficulty"]))
    return out


def counted_text(rules: Mapping[str, str]) -> str:
    """The arms ranked on informative samples counted alike although their rule fixes the share as trained, with
    the rule and both counts; "" if none."""
    if not rules:
        return ""
    return ("Ranked on the share counted alike for every arm, their own rule fixing the share as trained: " +
            "; ".join(f"{short_label(a)} ({why})" for a, why in rules.items()) + ".")


def unranked_text(fixed: Mapping[str, str]) -> str:
    """The arms left out of the informative ranking because their rule fixes it, with the rule; "" if none."""
    if not fixed:
        return ""
    return ("Not ranked on informative samples, fixed by their own rule: " +
            "; ".join(f"{short_label(a)} ({why})" for a, why in fixed.items()) + ".")


def power(r: Ranking) -> str:
    """Whether these seeds can resolve any ordering: the exact test's floor against Holm's first bar."""
    if not r.pairs:
        return "no pairs were tested."
    bar = ALPHA / r.pairs
    text = (f"with {r.seeds} seeds a side the exact test's smallest p is {cell(r.smallest_p, 2)}; Holm's bar for the "
            f"first of the {r.pairs} pairs is α/{r.pairs} = {cell(bar, 2)}")
    return text + (", so an ordering can be resolved only where nearly every seed agrees." if r.smallest_p < bar else
                   ", so no ordering can be resolved with these seeds, however large the differences.")


def order_text(r: Ranking) -> str:
    """The arms in the order of their means, ">" between neighbours whose ordering is resolved and "~"
    where it is not: "knapsack > band > fixed ~ dynamic"."""
    arms = r.table["arm"].tolist()
    resolved = set(r.resolved)
    return short_label(arms[0]) + "".join(f" {'>' if (a, b) in resolved else '~'} {short_label(b)}"
                                          for a, b in zip(arms, arms[1:]))


def resolved_text(r: Ranking) -> str:
    """Which orderings are resolved, listing whichever is shorter: the resolved or the unresolved pairs."""
    if not r.resolved:
        return f"none of the {r.pairs} pairwise orderings is resolved"
    if 2 * len(r.resolved) <= r.pairs:
        shown = ", ".join(f"{short_label(b)} > {short_label(w)}" for b, w in r.resolved)
        return f"resolved: {shown} ({len(r.resolved)} of {r.pairs} pairs); no other ordering is"
    done = set(r.resolved) | {(w, b) for b, w in r.resolved}
    arms = r.table["arm"].tolist()
    open_pairs = [f"{short_label(a)} vs {short_label(b)}" for i, a in enumerate(arms) for b in arms[i + 1:]
                  if (a, b) not in done]
    listed = ", ".join(open_pairs) if len(open_pairs) <= MAX_LISTED else \
        f"{len(open_pairs)} pairs (the `above`/`below` columns of the table)"
    return (f"resolved: {len(r.resolved)} of {r.pairs} pairs, all but {listed or 'none'}; "
            f"in order of the means, {order_text(r)} ('>' resolved, '~' not)")


def sentence(r: Ranking, digits: int = 3, step: int | None = None, final: str = SAMPLES) -> str:
    """The ranking in one Findings line: where the arms are compared (the equal-updates point `step`, or the end of
    the budget, aligned by `final`), each arm's mean [interval] (possible ranks), then the resolved orderings."""
    arms = "; ".join(f"{short_label(a)} {cell(m, digits)} [{cell(lo, digits)}, {cell(hi, digits)}] "
                     f"({'ranks' if '–' in ranks else 'rank'} {ranks})"
                     for a, m, lo, hi, ranks in r.table[["arm", "mean", "ci_low", "ci_high", "ranks"]].itertuples(
                         index=False))
    text = resolved_text(r)
    where = f", {step:,} updates, which every job reached" if r.measure == PASS1_UPDATES else \
        f" at the end of the budget, equal {final}"
    owed = attribution_text(r)
    return (f"Ranking on {r.measure}{where} (mean [95% interval over {r.interval}] "
            f"(possible ranks), best first): {arms}. {text[0].upper()}{text[1:]}." + (f" {owed}" if owed else ""))


def attribution_text(r: Ranking) -> str:
    """What the winners of the resolved orderings had more of, counted per resource with the range of ratios
    ("All 9 winners had more updates (×1.8–3.0)"), and the reversals; "" where nothing is resolved."""
    if r.orderings is None or not len(r.orderings):
        return ""
    more = r.orderings["winner_had_more"].fillna("").astype(str)
    found: dict[str, list[float]] = {}
    for text in more:
        for part in filter(None, (t.strip() for t in text.split(","))):
            name, _, ratio = part.rpartition(" ×")
            if name:
                found.setdefault(name, []).append(float(ratio))
    n = len(more)
    said = [f"{'all' if len(v) == n else f'{len(v)} of'} {n} winners had more {name} (×{min(v):.2g}–{max(v):.2g})"
            if len(v) > 1 else f"1 of {n} winners had more {name} (×{v[0]:.2g})" for name, v in found.items()]
    clean = int((more == "none").sum())
    if clean:
        said.append(f"{clean} won with no more of any recorded resource")
    reversed_ = int(r.orderings["reversal"].notna().sum())
    if reversed_:
        said.append(f"{reversed_} reverse at another alignment or within every difficulty (`reversal` in the "
                    "orderings table)")
    text = "; ".join(said)
    return f"{text[0].upper()}{text[1:]}."
