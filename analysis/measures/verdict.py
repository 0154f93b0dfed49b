"""The verdict: held-out pass@1 of every arm at each alignment the study has (equal samples: the end of each job's
budget; equal updates; equal tokens where the runs evaluated on a token schedule), each with its interval over
seeds, a compact letter display of the orderings the tests resolve there, and what each arm had spent at the
compared point, so one table says which arms the seeds tell apart and at what cost.

Means and intervals are the ranking's (`analysis.measures.ranking`: Student's t over seeds, on these held-out
prompts); an ordering is resolved where the tests' family row of that alignment's metric is a detectable
difference (Holm over every pair on the metric; a row fixed by an arm's rule, `by_construction`, resolves
nothing); the resources are the family rows' own (the mean over the arm's jobs at the compared point)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.alignment import equal_tokens_point, equal_updates_point, final_alignment
from analysis.measures.ranking import (
    PASS1,
    PASS1_TOKENS,
    PASS1_UPDATES,
    TEST_METRIC,
    pass1_at_tokens,
    pass1_at_updates,
    pass1_by_arm,
    rank,
)
from analysis.stats.letters import compact_letters
from analysis.stats.seeds import detectable

SAMPLES, UPDATES, TOKENS = "equal samples", "equal updates", "equal tokens"
SPENT = ("updates", "samples", "tokens")  # the resources a row of the verdict carries, as the family names them
COLUMNS = ("arm", "seeds", "mean", "ci_low", "ci_high", "letters", *SPENT)
DIFFERENCE_COLUMNS = ("arm", "difference", "ci_low", "ci_high", "p_holm", "resolved")


@dataclass
class Alignment:
    """One alignment's verdict: `table` (COLUMNS, best first), the `resolved` orderings (better, worse) out of
    `pairs` tested, the `orderings` (`Ranking.orderings`: each resolved one with both arms' resources and what the
    winner had more of), and `differences` (DIFFERENCE_COLUMNS): each arm against the study's reference arm,
    arm − reference, where the family compared them."""

    name: str  # SAMPLES, UPDATES or TOKENS
    metric: str  # the tests' family metric behind it
    point: str  # where, in words: "end of budget", "38 updates", "65,000 tokens"
    table: pd.DataFrame
    resolved: list[tuple[str, str]]
    pairs: int
    orderings: pd.DataFrame | None = None
    differences: pd.DataFrame | None = None


def reference_arm(tests: pd.DataFrame) -> str | None:
    """The arm the figure measures the others from: the study's first arm in the tests' order (a declared
    `--baseline` is put first: `select.baseline_first`), `a` of the family's first held-out pass@1 row."""
    rows = tests[tests["metric"] == TEST_METRIC[PASS1]] if len(tests) else tests
    return str(rows["a"].iloc[0]) if len(rows) else None


def alignments(tests: pd.DataFrame, scores: pd.DataFrame | None, prompt_scores: pd.DataFrame | None,
               eval: pd.DataFrame, arm: Sequence[str]) -> list[Alignment]:
    """Each alignment whose held-out pass@1 the tests' family (with p_holm) compared, in the order equal samples,
    equal updates, equal tokens; [] with fewer than two arms or no eval rows. `scores`: the held-out section's
    per-job scores (`seed_scores`); `prompt_scores`: each prompt's scores at every job and step (the held-out
    section's); `eval`: the eval rows with `updates`, `tokens_total` and the arm keys."""
    if scores is None or eval.empty or tests.empty:
        return []
    reference = reference_arm(tests)
    steps = eval.drop_duplicates(["job", "step"])
    made = []
    if _compared(tests, PASS1):  # the jobs' last checkpoints: at equal samples, or what else ended them alike
        ended = final_alignment(steps)
        made.append(_alignment(f"equal {ended}", PASS1, "end of budget" if ended in ("samples", "tokens") else
                               "each job's end", pass1_by_arm(scores, arm), tests, reference))
    at_updates = equal_updates_point(steps)
    if prompt_scores is not None and at_updates is not None and _compared(tests, PASS1_UPDATES):
        made.append(_alignment(UPDATES, PASS1_UPDATES, f"{at_updates:,} updates",
                               pass1_at_updates(prompt_scores, eval, arm, at_updates), tests, reference))
    at_tokens = equal_tokens_point(steps)
    if prompt_scores is not None and at_tokens is not None and _compared(tests, PASS1_TOKENS):
        made.append(_alignment(TOKENS, PASS1_TOKENS, f"{at_tokens:,.0f} tokens",
                               pass1_at_tokens(prompt_scores, eval, arm, at_tokens), tests, reference))
    # where every job ended at equal updates (or tokens) its end is the comparison there: no second one named alike
    made = [a for i, a in enumerate(made) if a.name not in {b.name for b in made[:i]}]
    return [a for a in made if len(a.table) >= 2]


def _compared(tests: pd.DataFrame, measure: str) -> bool:
    """Whether the family holds a comparison of the measure (none where it was refused or never made)."""
    return bool((tests["metric"] == TEST_METRIC[measure]).any())


def _alignment(name: str, measure: str, point: str, by_arm: pd.DataFrame, tests: pd.DataFrame,
               reference: str | None) -> Alignment:
    """One alignment from its arms' means (`pass1_*`) and the family: letters, resources, differences."""
    ranked = rank(measure, by_arm, tests)
    table = ranked.table[["arm", "seeds", "mean", "ci_low", "ci_high"]].copy()
    letters = compact_letters(table["arm"].tolist(), ranked.resolved)
    table["letters"] = table["arm"].map(letters)
    rows = tests[tests["metric"] == TEST_METRIC[measure]]
    spent = spent_by_arm(rows)
    for resource in SPENT:
        table[resource] = table["arm"].map(spent[resource]) if resource in spent else np.nan
    return Alignment(name=name, metric=TEST_METRIC[measure], point=point, table=table[list(COLUMNS)],
                     resolved=ranked.resolved, pairs=ranked.pairs, orderings=ranked.orderings,
                     differences=from_reference(rows, reference) if reference is not None else None)


def spent_by_arm(rows: pd.DataFrame) -> pd.DataFrame:
    """Each arm's resources at the compared point (index: arm; columns: SPENT) from the family rows of one metric:
    `updates_a` where the arm is `a`, `updates_b` where it is `b` (every row naming the arm carries the same means
    over its jobs there: the first is taken)."""
    sides = []
    for side in "ab":
        columns = {f"{r}_{side}": r for r in SPENT if f"{r}_{side}" in rows}
        sides.append(rows[[side, *columns]].rename(columns={side: "arm", **columns}))
    both = pd.concat(sides, ignore_index=True)
    both["arm"] = both["arm"].astype(str)
    return both.groupby("arm", sort=False).first().reindex(columns=list(SPENT)).astype(float)


def from_reference(rows: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Each other arm's difference from the reference (arm − reference) with its interval and Holm p, from the
    family rows of one metric (b − a there: the sign and the interval flipped where the reference is `b`), and
    whether it is resolved (`detectable`; a row fixed by an arm's rule never is)."""
    out = []
    for _, row in rows.iterrows():
        a, b = str(row["a"]), str(row["b"])
        if reference not in (a, b) or a == b:
            continue
        sign = 1.0 if a == reference else -1.0
        low, high = (row["ci_low"], row["ci_high"]) if sign > 0 else (-row["ci_high"], -row["ci_low"])
        fixed = "by_construction" in row and pd.notna(row["by_construction"])
        out.append({"arm": b if a == reference else a, "difference": sign * row["difference"],
                    "ci_low": low, "ci_high": high, "p_holm": row.get("p_holm", np.nan),
                    "resolved": detectable(row) and not fixed})
    return pd.DataFrame(out, columns=list(DIFFERENCE_COLUMNS))
