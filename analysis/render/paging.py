"""REPORT.md at one length whatever the sweep: a markdown table longer than `MAX_ROWS` rows moves to the
second page (DETAILS.md) under a heading of its own, and leaves one line with a link in its place. Any
section's table, whoever wrote it: the page stays about 300 lines at 2 arms or 20."""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_ROWS = 30  # a table longer than this (7 arms x 4 difficulties is 28) goes to the second page
HEADING = "Long tables from REPORT.md"


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def move_long_tables(texts: Sequence[str], details: str = "DETAILS.md") -> tuple[list[str], str | None]:
    """The texts with each table of more than MAX_ROWS rows replaced by a line linking to where it went, and
    the second page's section that holds them (None when no table moved)."""
    moved: list[str] = []
    titles: set[str] = set()
    out = []
    for text in texts:
        lines, kept, heading, i = text.split("\n"), [], "", 0
        while i < len(lines):
            if lines[i].startswith("#"):
                heading = lines[i].lstrip("# ").strip()
            if not lines[i].startswith("|"):
                kept.append(lines[i])
                i += 1
                continue
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            rows = end - i - 2  # header and rule
            if rows <= MAX_ROWS:
                kept += lines[i:end]
            else:
                title, n = f"{heading}: the table", 2
                while title in titles:
                    title, n = f"{heading}: table {n}", n + 1
                titles.add(title)
                moved += [f"### {title}", "", *lines[i:end], ""]
                kept.append(f"A table of {rows} rows, too long for this page: [{details}, {title}]"
                            f"({details}#{anchor(title)}).")
            i = end
        out.append("\n".join(kept))
    if not moved:
        return out, None
    return out, "\n".join([f"## {HEADING}", "", f"Tables of more than {MAX_ROWS} rows, moved here from the first "
                           "page, each under the section it belongs to there.", "", *moved]).rstrip()
