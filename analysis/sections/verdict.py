"""The verdict, under the Findings: one table of every arm's held-out pass@1 at each alignment (equal samples,
equal updates, equal tokens), with letters saying which arms the seeds tell apart there and what each arm had
spent at the compared point; where a study has more than four arms, a figure of each arm's difference from the
reference arm. A reader who reads nothing else reads which arm won, where, and at what cost."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.arms import short_label
from analysis.data.load import Tables
from analysis.measures.verdict import SAMPLES, SPENT, TOKENS, UPDATES, Alignment, alignments, reference_arm
from analysis.render import markdown
from analysis.render import verdict as figures
from analysis.render.markdown import cell
from analysis.render.writer import Files
from analysis.sections.section import Context, Section
from analysis.stats.seeds import ALPHA

SHOWN = 20  # arms the table shows; the CSV has every arm
FIGURE_ARMS = 4  # more arms than this: the figure of differences from the reference
# the resources shown beside each alignment's pass@1: the aligned one left out where it is equal by construction
SHOWN_SPENT = {SAMPLES: SPENT, UPDATES: ("samples", "tokens"), TOKENS: ("updates", "samples")}


@dataclass(frozen=True, kw_only=True)
class Verdict(Section):
    """`alignments`: the verdict at each alignment (`measures.verdict`); `reference`: the arm the figure's
    differences are taken from."""

    alignments: list[Alignment]
    reference: str


def section(tables: Tables, ctx: Context, tests: pd.DataFrame, scores: pd.DataFrame | None,
            prompt_scores: pd.DataFrame | None) -> Verdict | None:
    """The verdict from the tests' family (with p_holm) and the held-out section's per-job scores (`seed_scores`)
    and per-prompt scores (`prompt_scores`, for the equal-updates and equal-tokens points); None where no held-out
    pass@1 was compared (one arm, no eval rows)."""
    found = alignments(tests, scores, prompt_scores, tables.eval, list(ctx.arm))
    reference = reference_arm(tests)
    return verdict(found, reference) if found and reference is not None else None


def verdict(found: list[Alignment], reference: str) -> Verdict:
    """The section's text and files from the verdict at each alignment (`measures.verdict.alignments`): the table
    of the SHOWN arms of highest pass@1 at the first alignment (every arm in `tables/verdict.csv`), and with more
    than FIGURE_ARMS arms the figure of differences from `reference`."""
    files = Files()
    frame = verdict_frame(found)
    arms = len(frame)
    csv = files.csv("verdict", frame)
    more = (f" The {SHOWN} arms of highest pass@1 at {found[0].name} are shown; {arms - SHOWN} more are in "
            f"[tables/verdict.csv](tables/verdict.csv)." if arms > SHOWN else "")
    parts = [
        "## Verdict: held-out pass@1 at each alignment", "",
        f"Each arm's held-out pass@1 (mean over the held-out prompts and {seeds_text(found)}; [95% interval]: "
        "Student's t over seeds, for new seeds on these held-out prompts) at "
        + ", ".join(f"{a.name} ({a.point})" for a in found) + ", best first at "
        f"{found[0].name}. The letters after each score: arms sharing a letter are not resolved apart at that "
        "alignment; an ordering is resolved where its interval excludes 0 and the exact test across seeds rejects "
        f"after Holm over every pair (α = {ALPHA}). Resources: means per job at the compared point (updates: "
        "optimizer steps taken; tokens: generated). " + resolved_text(found) + more, "",
        markdown.table(display_frame(found, frame.head(SHOWN))) + f"\n\nAs CSV: {csv}", ""]
    if arms > FIGURE_ARMS and any(a.differences is not None and a.differences["difference"].notna().any()
                                  for a in found):
        parts += [f"Each arm's difference from {short_label(reference)} (the study's first arm), one panel per "
                  "alignment, highest first; filled: resolved, hollow: not.", "",
                  files.figure("verdict", figures.differences_from_reference, found, reference=reference), ""]
    return Verdict(text="\n".join(parts).rstrip(), files=files, alignments=found, reference=reference)


def verdict_frame(found: list[Alignment]) -> pd.DataFrame:
    """Every arm, in the first alignment's order (best first): for each alignment its table's columns, named
    "<alignment>_<column>" ("equal_updates_mean"): the CSV."""
    order = found[0].table["arm"].tolist()
    order += [arm for a in found[1:] for arm in a.table["arm"] if arm not in order]
    out = pd.DataFrame({"arm": order})
    for a in found:
        prefix = a.name.replace(" ", "_")
        own = a.table.set_index("arm")
        for column in own.columns:
            out[f"{prefix}_{column}"] = out["arm"].map(own[column])
    return out


def display_frame(found: list[Alignment], frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` (`verdict_frame`) as the table shows them: the short arm name, then per alignment its
    pass@1 "mean [low, high]" (3 significant digits), its letters (a column without a header) and the resources
    beside it (counts with thousands separators)."""
    columns: list[str] = ["arm"]
    values: list[list[str]] = [[short_label(a) for a in frame["arm"]]]
    for a in found:
        prefix = a.name.replace(" ", "_")
        columns += [f"{a.name} ({a.point}): pass@1", ""]
        values += [[score_text(m, lo, hi) for m, lo, hi in zip(frame[f"{prefix}_mean"], frame[f"{prefix}_ci_low"],
                                                                frame[f"{prefix}_ci_high"])],
                   [letters if isinstance(letters, str) else "–" for letters in frame[f"{prefix}_letters"]]]
        for resource in SHOWN_SPENT.get(a.name, SPENT):
            columns.append(resource)
            values.append([count_text(v) for v in frame[f"{prefix}_{resource}"]])
    return pd.DataFrame(list(zip(*values)), columns=columns)


def score_text(mean: float, low: float, high: float) -> str:
    """A mean and its interval: "0.412 [0.381, 0.443]"; the mean alone without an interval (one seed)."""
    if pd.isna(mean):
        return "–"
    return cell(float(mean), 3) + ("" if pd.isna(low) or pd.isna(high) else
                                   f" [{cell(float(low), 3)}, {cell(float(high), 3)}]")


def count_text(value: float) -> str:
    """A resource as a count: "65,000", "37.5" (a mean over jobs of few updates), "–" where unknown."""
    if pd.isna(value):
        return "–"
    value = float(value)
    return f"{value:,.0f}" if value.is_integer() or abs(value) >= 100 else f"{value:.1f}"


def seeds_text(found: list[Alignment]) -> str:
    """The seeds an arm has: "8 seeds", or the range "4–8 seeds"."""
    seeds = np.concatenate([a.table["seeds"].to_numpy(int) for a in found])
    low, high = int(seeds.min()), int(seeds.max())
    return f"{low} seed{'s' * (low != 1)}" if low == high else f"{low}–{high} seeds"


def resolved_text(found: list[Alignment]) -> str:
    """How many orderings each alignment resolves: "Resolved: 2 of 3 pairs at equal samples, 0 of 3 pairs at
    equal updates."."""
    counts = [f"{len(a.resolved)} of {a.pairs} pair{'s' * (a.pairs != 1)} at {a.name}" for a in found]
    return "Resolved: " + ", ".join(counts) + "."
