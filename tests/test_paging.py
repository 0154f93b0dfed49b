"""REPORT.md's length: tables past MAX_ROWS move to DETAILS.md, and past MAX_LINES the page's longest tables
follow, longest first, until it fits; every committed report's first page is within the bound."""

from pathlib import Path

import pytest

from analysis.render.paging import MAX_LINES, MAX_ROWS, move_long_tables, page_lines

REPORTS = Path(__file__).resolve().parent.parent / "reports"


def table(name: str, rows: int) -> str:
    return "\n".join(["| arm | mean |", "|---|---|", *(f"| {name}{i} | {i} |" for i in range(rows))])


def section(name: str, rows: int, prose: int = 3) -> str:
    return "\n".join([f"## {name}", "", *(f"words {i}" for i in range(prose)), "", table(name, rows), "",
                      "after the table"])


def test_only_tables_past_max_rows_move_without_a_line_budget():
    texts = [section("small", 10), section("large", MAX_ROWS + 5)]
    out, details = move_long_tables(texts)
    assert out[0] == texts[0]
    assert table("large", MAX_ROWS + 5) not in out[1] and f"A table of {MAX_ROWS + 5} rows" in out[1]
    assert table("large", MAX_ROWS + 5) in details and "the longest tables" not in details
    assert details.splitlines()[2].startswith(f"Tables of more than {MAX_ROWS} rows, moved here")
    assert move_long_tables([section("small", 10)]) == ([section("small", 10)], None)


@pytest.mark.parametrize("budget", [60, 90, 120, 400])
def test_a_page_over_its_budget_moves_its_longest_tables_first_until_it_fits(budget):
    sizes = {"a": 17, "b": 12, "c": 25, "d": 5, "e": 17}
    texts = [section(name, rows) for name, rows in sizes.items()]
    out, details = move_long_tables(texts, max_lines=budget)
    moved = {name for name, rows in sizes.items() if table(name, rows) not in "\n".join(out)}
    assert page_lines(out) <= budget or moved == set(sizes)
    for name in moved:  # every moved table is on the second page whole, and no shorter one moved before it
        assert table(name, sizes[name]) in details
        assert all(sizes[other] <= sizes[name] or other in moved for other in sizes)
    # none moved that the page did not need: putting back the shortest moved one would break the budget
    if moved:
        shortest = min(moved, key=lambda n: sizes[n])
        assert page_lines(out) + sizes[shortest] + 1 > budget
        assert f"the longest tables that kept the page over {budget} lines" in details.lower()
    else:
        assert details is None and out == texts


@pytest.mark.parametrize("name", sorted(p.parent.name for p in REPORTS.glob("*/REPORT.md")))
def test_every_committed_first_page_is_within_the_bound(name):
    assert len((REPORTS / name / "REPORT.md").read_text().splitlines()) <= MAX_LINES
