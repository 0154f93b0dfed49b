"""Group size: what each G would buy at the measured pass rates, by difficulty, and observed against
predicted ties where the runs used several G."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.data.load import Tables
from analysis.measures.group_size import (
    best_sizes,
    binary,
    correct_count_misses,
    expected_by_size,
    measured_sizes,
    observed_ties,
    observed_vs_predicted,
    prompt_pass_rates,
)
from analysis.render import markdown
from analysis.render.writer import Files
from analysis.sections.section import Context, Section

SHOWN_SIZES = (2, 4, 8, 16, 32, 64)  # the rows of the expected-by-size table in the text; the CSV has every G


def section(tables: Tables, ctx: Context, overhead: float = 0.0) -> Section | None:
    """The group size section; None without group tables."""
    groups, eval = tables.groups, tables.eval
    if groups.empty:
        return None
    files = Files()
    first, misread = correct_count_misses(groups)
    if not binary(first, misread):
        return not_binary(groups, first, misread, files)
    rates = prompt_pass_rates(groups, eval)
    source = "the base model's eval samples" if not eval.empty and (eval["step"] == 0).any() \
        else "first-round training groups"
    sizes = measured_sizes(rates)
    if len(sizes) < 2:
        return Section(text=f"## Group size\n\nToo few samples per prompt to compare group sizes: the fewest "
                       f"any prompt "
                       f"has in {source} is {int(rates['samples'].min()) if len(rates) else 0}, and a group of G is "
                       "G of them (a larger G would be extrapolated).")
    table, best = expected_by_size(rates, sizes), best_sizes(rates, sizes, overhead=overhead)
    text = describe(table, best, observed_vs_predicted(groups), source, overhead)
    return Section(text=f"{text}\n\nAs CSV: {files.csv('group_size', table)}, {files.csv('group_size_best', best)}",
                   files=files)


def not_binary(groups: pd.DataFrame, first: int, misread: int, files: Files) -> Section:
    """The section where the rewards are not binary: no prediction from correct counts (it would count every
    all-"wrong" group of different rewards as a tie), the ties observed at the G the runs used instead."""
    observed = observed_ties(groups)
    return Section(text="\n".join([
        "## Group size", "",
        f"Not predicted: the rewards are not binary. Of {first:,} first-round groups of two or more samples, "
        f"{misread:,} ({misread / first:.0%}) tie otherwise than their correct count says (a group ties when its "
        "rewards have zero spread; `correct` is a threshold on a reward that takes other values), so the chance "
        "that a group of G ties, and what each G would buy, cannot be read from correct counts. The ties observed "
        "at the G the runs used (first-round groups, zero reward spread):", "",
        markdown.table(observed), "",
        f"As CSV: {files.csv('group_size_observed', observed)}"]), files=files)


def describe(table: pd.DataFrame, best: pd.DataFrame, observed: pd.DataFrame, source: str, overhead: float = 0.0,
             shown_sizes: Sequence[int] = SHOWN_SIZES) -> str:
    """The section's markdown: `best_sizes` and `expected_by_size` of the pass rates measured on `source`,
    and `observed_vs_predicted` (empty: one G was used)."""
    lines = ["## Group size", "",
             f"Counts per prompt from {source}: the chance that a group of G ties is estimated without bias "
             "from c correct of n samples, C(c, G)/C(n, G) + C(n−c, G)/C(n, G), for G up to the fewest samples any "
             f"prompt has ({int(table['group_size'].max())}; larger G would be extrapolated). One group of G per "
             "prompt: the "
             "informative fraction (groups not tied), samples per informative group and informative groups per "
             "1,000 samples. The informative fraction only grows with G, so informative samples per sample "
             "drawn are highest at the largest G; `g_at_share` is the smallest G reaching 90% of that, "
             f"`best_for_groups` the G with most informative groups per sample (overhead {overhead:g} "
             "samples a group).", "", markdown.table_unless_zero(best, ("informative_frac_at_max",)), "",
             markdown.table_unless_zero(table[table["group_size"].isin([*shown_sizes, table["group_size"].max()])],
                                        ("informative_frac", "informative_groups_per_1k"))]
    if not observed.empty:
        lines += ["", "Observed against predicted where the runs used several G (first-round groups; the "
                  "prediction from each prompt's pass rate at the other steps of all jobs):", "",
                  markdown.table(observed[["difficulty", "group_size", "groups", "tie_frac", "ci_low", "ci_high",
                                           "predicted_tie_frac"]])]
    return "\n".join(lines)
