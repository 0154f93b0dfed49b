"""REPORT.md at one length whatever the sweep: a markdown table longer than `MAX_ROWS` rows moves to the
second page (DETAILS.md) under a heading of its own, and leaves one line with a link in its place; where the page
is still longer than `MAX_LINES`, its longest tables follow, longest first, until it is not. Any section's table,
whoever wrote it: the page stays at most 300 lines at 2 arms or 20."""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_ROWS = 30  # a table longer than this (7 arms x 4 difficulties is 28) goes to the second page
MAX_LINES = 300  # REPORT.md's length: past it, its longest tables go to the second page too
HEADING = "Long tables from REPORT.md"


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def page_lines(texts: Sequence[str]) -> int:
    """The lines of a page of these texts, as `render.writer.write_report` joins them (a blank line between)."""
    return sum(text.count("\n") + 1 for text in texts) + max(len(texts) - 1, 0)


def move_long_tables(texts: Sequence[str], details: str = "DETAILS.md", max_lines: int | None = None,
                     reserved: int = 0) -> tuple[list[str], str | None]:
    """The texts with each table of more than MAX_ROWS rows replaced by a line linking to where it went, and
    the second page's section that holds them (None when no table moved). `max_lines`: where the page is still
    longer than this, its longest remaining tables move too, longest first, until it is not (many arms make many
    tables of one row an arm, each short enough alone)."""
    parsed = [_blocks(text) for text in texts]
    tables = [(t, b) for t, blocks in enumerate(parsed) for b, block in enumerate(blocks) if block[0] == "table"]
    moving = {(t, b) for t, b in tables if _rows(parsed[t][b]) > MAX_ROWS}
    long_only = len(moving)
    if max_lines is not None:
        by_length = sorted((key for key in tables if key not in moving), key=lambda k: -_rows(parsed[k[0]][k[1]]))
        for key in by_length:
            if _length(parsed, moving) <= max_lines - reserved:
                break
            moving.add(key)
    moved: list[str] = []
    titles: set[str] = set()
    out = []
    for t, blocks in enumerate(parsed):
        kept: list[str] = []
        for b, (_, heading, lines) in enumerate(blocks):
            if (t, b) not in moving:
                kept += lines
                continue
            title, n = f"{heading or 'Table'}: the table", 2
            while title in titles:
                title, n = f"{heading}: table {n}", n + 1
            titles.add(title)
            moved += [f"### {title}", "", *lines, ""]
            kept.append(f"A table of {len(lines) - 2} rows, too long for this page: [{details}, {title}]"
                        f"({details}#{anchor(title)}).")
        out.append("\n".join(kept))
    if not moved:
        return out, None
    what = " and ".join(filter(None, [f"tables of more than {MAX_ROWS} rows" if long_only else "",
                                      f"the longest tables that kept the page over {max_lines} lines"
                                      if len(moving) > long_only else ""]))
    what = what[0].upper() + what[1:] + ","
    return out, "\n".join([f"## {HEADING}", "", f"{what} moved here from the first page, each under the section "
                           "it belongs to there.", "", *moved]).rstrip()


Block = tuple[str, str, list[str]]  # ("table" or "text", the heading above it, its lines)


def _blocks(text: str) -> list[Block]:
    """A text cut into its markdown tables and the lines between them, each with the heading it is under."""
    lines, blocks, heading, i = text.split("\n"), [], "", 0
    while i < len(lines):
        end = i
        table = lines[i].startswith("|")
        while end < len(lines) and lines[end].startswith("|") == table:
            if lines[end].startswith("#"):
                heading = lines[end].lstrip("# ").strip()
            end += 1
        blocks.append(("table" if table else "text", heading, lines[i:end]))
        i = end
    return blocks


def _rows(block: Block) -> int:
    return len(block[2]) - 2  # header and rule


def _length(parsed: list[list[Block]], moving: set[tuple[int, int]]) -> int:
    """The page's lines with the tables `moving` each replaced by one line."""
    return page_lines(["\n".join(["x"] * sum(1 if (t, b) in moving else len(block[2])
                                              for b, block in enumerate(blocks)))
                       for t, blocks in enumerate(parsed)])
