"""docs/DESIGN.md is the tables' contract: every column it names exists in grpo_lab/run/tables.py's schemas, and
every column there is named in it."""

import re
from pathlib import Path

import pytest

from grpo_lab.run.tables import SCHEMAS

DESIGN = (Path(__file__).resolve().parent.parent / "docs" / "DESIGN.md").read_text()


def table_columns(title: str) -> set[str]:
    """The first cells of the markdown table that follows `title` (a cell may name several: "a, b")."""
    rows = DESIGN.split(title, 1)[1].split("\n\n", 2)[1].splitlines()
    cells = [r.split("|")[1].strip() for r in rows if r.startswith("|") and not r.startswith("|---")][1:]
    return {name.strip() for cell in cells for name in cell.split(",")} - {""}


def paragraph(title: str) -> str:
    return DESIGN.split(title, 1)[1].split("\n\n", 1)[0]


@pytest.mark.parametrize("table,title", [("groups", "groups: one row per group"),
                                         ("completions", "completions (`log_completions=N`)")])
def test_design_tables_name_exactly_the_schemas_columns(table, title):
    assert table_columns(title) == set(SCHEMAS[table].names)


@pytest.mark.parametrize("table,title", [("steps", "steps: one row per loop step"),
                                         ("eval", "eval: one row per sample")])
def test_design_paragraphs_name_every_column(table, title):
    text = paragraph(title)
    missing = [c for c in SCHEMAS[table].names if not re.search(rf"\b{c}\b", text)]
    assert not missing, missing
