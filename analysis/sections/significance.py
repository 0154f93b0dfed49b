"""Tests across seeds: the comparisons between arms that the other sections hand in, with Holm's
correction within each metric's family, as a table and a forest of intervals."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.measures.attribution import COLUMNS as ATTRIBUTION
from analysis.measures.attribution import attributed
from analysis.measures.construction import Fixed
from analysis.render import intervals as figures
from analysis.render.writer import Files
from analysis.sections.section import Section
from analysis.stats.seeds import ALPHA, SEED_TEST, detectable, with_holm

FAMILY_COLUMNS = ("metric", "a", "b", "paired", "seeds_a", "seeds_b", "mean_a", "mean_b", "difference", "ci_low",
                  "ci_high", "interval", "p_value", "p_holm", "family", "b_higher", "b_lower", "smallest_p", "mde",
                  "by_construction", *ATTRIBUTION)
FOREST_PAIRS = 6  # arm pairs the forest plot shows in full; more: only those with the first arm


def family(parts: Sequence[pd.DataFrame | None], fixed: Fixed | None = None) -> pd.DataFrame:
    """The sections' comparisons (None: a section had none) as one table with `p_holm`; `fixed`: what the arms'
    rules fix (`construction.fixed_by_rule`), whose rows are labelled `by_construction` and kept out of Holm's
    families."""
    found = [part for part in parts if part is not None]
    if not found:
        return pd.DataFrame(columns=FAMILY_COLUMNS)
    table = pd.concat(found, ignore_index=True)
    return attributed(with_holm((fixed or Fixed()).label(table)))


def section(tests: pd.DataFrame) -> Section:
    """The tests table (`family`) and its forest plot."""
    if tests.empty:
        return Section(text="## Tests across seeds\n\nOnly one arm: nothing to compare.")
    files = Files()
    pairs = tests[["a", "b"]].astype(str).drop_duplicates()
    forest, shown_note = tests, ""
    if len(pairs) > FOREST_PAIRS:  # one row per pair and metric would run off the page: against one arm
        first = str(tests["a"].iloc[0])
        forest = tests[(tests["a"].astype(str) == first) | (tests["b"].astype(str) == first)]
        shown_note = f" With {len(pairs)} pairs of arms, the figure shows those with {first} only; the table has all."
    filled = [detectable(row) for _, row in forest.iterrows()]
    text = "\n".join([
        "## Tests across seeds", "",
        "The comparisons: every pair of arms at the end of the budget, on held-out pass@1, pass@k and cons@k at "
        "the largest k, on wasted_frac and on the first-round tie fraction; where the arms took different numbers "
        "of updates (optimizer steps taken), also the first-round tie fraction, train reward and KL over the first "
        "updates every job took "
        "(`interval` names them). Differences are b − a. "
        f"Tests: {SEED_TEST}. A held-out row's per-seed value is that seed's mean over the held-out prompts, so "
        "its interval and its test are both for new seeds on these prompts (the prompts are held fixed, not "
        "resampled). **Families**: each metric is one family, every pair of arms on it "
        "(each metric answers its own question), and `p_holm` is Holm's adjustment within it (α = "
        f"{ALPHA}); `family` counts its tests: with two arms a family holds one test and `p_holm` equals `p_value`. "
        "`b_higher` and `b_lower` count the paired seeds where b is above or below a. `smallest_p` is the "
        "smallest p the exact test can give with these seeds (at or above α nothing can be detected, however "
        "large); `mde` is the minimum detectable difference at 80% power, by the t approximation from the spread "
        "of per-seed differences, at α where the family holds one test, else at Holm's first bar α / `family` "
        "(inf: the exact test cannot reject there with these seeds, so no difference of any size is detectable; "
        "empty: fewer than two seeds a side). "
        "`by_construction` names a quantity an arm's own rule fixes (RL-ZVP's informative share, PODS's cap on the "
        "samples that train, the tie fraction of larger groups): such a row is measured but is no finding, and is "
        "in no family (`p_holm` empty).", "",
        files.table("tests", tests[list(FAMILY_COLUMNS)]), "",
        "The same differences with their 95% intervals (dashed: no difference); a filled dot where the findings "
        "call it a detectable difference" + (", one panel per metric (each on its own scale)" if len(pairs) > 1 else "")
        + ". Signs differ in meaning: higher is better for held-out scores, lower for "
        f"wasted_frac.{shown_note}", "",
        files.figure("differences", figures.forest, forest, detectable=filled),
    ])
    return Section(text=text, files=files, pointer="every comparison of every pair of arms with its interval, test "
                   "and Holm p: the source of each verdict and difference the first page states")
