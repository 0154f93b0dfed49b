"""A report a reader finishes: every committed REPORT.md's Findings are at most 250 words with no bullet over 60,
the verdict table follows them, and what they say recounts from the report's own tables with code of its own
(a detectable difference re-derived from each row's interval and Holm p, letters from the resolved pairs)."""

import itertools
from pathlib import Path

import pandas as pd
import pytest

from analysis.render.markdown import cell
from analysis.sections.findings import MAX_BULLET_WORDS, MAX_WORDS, brief, words

ROOT = Path(__file__).resolve().parent.parent
REPORTS = sorted(p.parent for p in (ROOT / "reports").glob("*/REPORT.md"))
ALIGNED = {"Equal samples": "held-out pass@1", "Equal updates": "held-out pass@1 (equal updates)",
           "Equal tokens": "held-out pass@1 (equal tokens)"}


def findings_text(report: Path) -> str:
    text = (report / "REPORT.md").read_text()
    return text[text.index("## Findings"):text.index("\n## ", text.index("## Findings") + 1)]


def bullets(report: Path) -> list[str]:
    return [line[2:] for line in findings_text(report).splitlines() if line.startswith("- ")]


def resolved(row) -> bool:
    """A detectable difference, counted here apart from `analysis.stats.seeds`: the interval misses 0 and Holm's p
    is under 0.05 (a row an arm's rule fixes resolves nothing)."""
    if isinstance(row.get("by_construction"), str):
        return False
    return bool((row["ci_low"] > 0 or row["ci_high"] < 0) and row["p_holm"] < 0.05)


def short(label: str) -> str:
    return label.split("=", 1)[1] if label.count("=") == 1 else label


@pytest.fixture(params=REPORTS, ids=[p.name for p in REPORTS])
def report(request) -> Path:
    return request.param


def test_the_findings_fit_one_screen(report):
    text = findings_text(report)
    assert words(text) <= MAX_WORDS, (report.name, words(text))
    for bullet in bullets(report):
        assert words(bullet) <= MAX_BULLET_WORDS, (report.name, bullet)


def test_the_verdict_table_follows_the_findings(report):
    text = (report / "REPORT.md").read_text()
    tests = pd.read_csv(report / "tables" / "tests.csv")
    if not (tests["metric"] == "held-out pass@1").any():
        pytest.skip("no held-out comparison")
    after = text[text.index("## Findings"):]
    assert after.split("\n## ", 2)[1].startswith("Verdict"), report.name
    assert (report / "tables" / "verdict.csv").exists()


def test_each_verdict_bullet_recounts_from_the_tests_table(report):
    tests = pd.read_csv(report / "tables" / "tests.csv")
    said = {b.split("**")[1]: b for b in bullets(report) if b.startswith("**Equal ")}
    asked = [b for b in bullets(report) if b.startswith("**`")]  # a study of questions: one bullet each instead
    assert said or asked or not (tests["metric"] == "held-out pass@1").any(), report.name
    for name, bullet in said.items():
        if "no checkpoint there" in bullet:  # said only where the tests table has no comparison there
            assert not (tests["metric"] == ALIGNED[name]).any(), bullet
            continue
        ended = "(end of budget)" in bullet or "(each job's end)" in bullet  # the last checkpoints
        rows = tests[tests["metric"] == ("held-out pass@1" if ended else ALIGNED[name])]
        assert len(rows), (report.name, name)
        if len(rows) == 1:  # two arms: the difference as the tests table has it
            row = rows.iloc[0]
            assert f"{short(row['b'])} − {short(row['a'])} {cell(row['difference'], 3)} [{cell(row['ci_low'], 3)}, " \
                f"{cell(row['ci_high'], 3)}], p = {cell(row['p_holm'], 3)}" in bullet, bullet
            assert ("ahead of" in bullet) == resolved(row), bullet
            continue
        means = pd.concat([rows.set_index("a")["mean_a"], rows.set_index("b")["mean_b"]]).groupby(level=0).first()
        assert bullet.split("pass@1: ", 1)[1].startswith(f"{short(means.idxmax())} has the highest mean "
                                                         f"({cell(means.max(), 3)} ["), bullet
        count = sum(resolved(r) for _, r in rows.iterrows())
        if count:
            assert f"{count} of {len(rows)} orderings resolved" in bullet, bullet
        else:
            assert f"no ordering of the {len(rows)} pairs is resolved" in bullet, bullet


def test_each_question_bullet_recounts_from_the_tests_table(report):
    """A question's bullet: each of its arms' difference from the reference at the first alignment as the tests
    table has it (flipped where the reference is b), "Resolved" exactly where a row of it is, at any alignment."""
    tests = pd.read_csv(report / "tables" / "tests.csv")
    asked = [b for b in bullets(report) if b.startswith("**`")]
    if not asked:
        pytest.skip("no questions")
    for bullet in asked:
        reference = bullet.split(" vs ", 1)[1].split("(", 1)[1].split(")", 1)[0]
        shown = bullet.split("Δpass@1: ", 1)[1].split(" at equal ", 1)[0]  # "arm +0.01 [a, b], ..." or "+0.01 [a, b]"
        pieces = shown.split("], ")
        found = 0
        for piece in pieces:
            arm = piece.split(" ")[0] if len(pieces) > 1 else None
            rows = tests[(tests["metric"] == "held-out pass@1") & tests["a"].map(short).isin([reference, arm])
                         & tests["b"].map(short).isin([reference, arm])] if arm else None
            if rows is None:  # one arm: the row naming the reference whose numbers the bullet shows
                rows = tests[(tests["metric"] == "held-out pass@1")
                             & ((tests["a"].map(short) == reference) | (tests["b"].map(short) == reference))]
            for _, r in rows.iterrows():
                sign = 1 if short(r["a"]) == reference else -1
                low, high = sorted((sign * r["ci_low"], sign * r["ci_high"]))
                if f"{cell(sign * r['difference'], 3)} [{cell(low, 3)}, {cell(high, 3)}" in piece:
                    found += 1
                    break
        assert found == len(pieces), bullet
    rows = tests[tests["metric"].str.startswith("held-out pass@1")]
    assert any("Resolved:" in b for b in asked) <= any(resolved(r) for _, r in rows.iterrows())


def test_verdict_letters_share_exactly_where_no_ordering_is_resolved(report):
    """The compact letter display recounted: two arms share a letter exactly when the tests table resolves no
    ordering between them at that alignment."""
    path = report / "tables" / "verdict.csv"
    if not path.exists():
        pytest.skip("no verdict table")
    table = pd.read_csv(path)
    tests = pd.read_csv(report / "tables" / "tests.csv")
    letter_columns = [c for c in table.columns if "letters" in c or c.endswith("group")]
    assert letter_columns, table.columns
    for column in letter_columns:
        metric = next((m for name, m in ALIGNED.items() if name.lower() in column.replace("_", " ").lower()),
                      "held-out pass@1")
        rows = tests[tests["metric"] == metric]
        apart = {frozenset((short(r["a"]), short(r["b"]))) for _, r in rows.iterrows() if resolved(r)}
        letters = {short(str(a)): set(str(v)) for a, v in zip(table["arm"], table[column]) if isinstance(v, str)}
        for x, y in itertools.combinations(letters, 2):
            assert bool(letters[x] & letters[y]) == (frozenset((x, y)) not in apart), (report.name, column, x, y)


def test_a_long_caveat_is_cut_at_a_clause_and_points_to_its_whole():
    long = ("**Incomplete sweep**: left no run: 40 of the 80 jobs its multirun.yaml meant to run (jobs "
            + ", ".join(f"`{i}`" for i in range(40)) + "). Every comparison here is of the jobs that are.")
    cut = brief(long)
    assert words(cut) <= MAX_BULLET_WORDS and cut.startswith("**Incomplete sweep**:")
    assert cut.endswith("(DETAILS.md#caveats-in-full))") and "`3`" in cut
    assert long.startswith(cut.split(" … ")[0])  # whole clauses, in order
    short_one = "**Pooled within arms**: `task.levels` varies between jobs."
    assert brief(short_one) == short_one
