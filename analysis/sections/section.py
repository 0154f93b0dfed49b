"""What a section is: a function of the loaded tables and a small read-only context that returns
its markdown with the CSVs and figures the markdown links to (`Section`), and, where another
section needs them, values of its own (a subclass's fields). Sections never write files and never
change their arguments; `analysis.report` passes one section's values into the next."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from analysis.render.writer import DETAILS, Files  # noqa: F401 - DETAILS: the second page's name, for sections


@dataclass(frozen=True)
class Context:
    """What every section may read besides the tables."""

    root: Path  # the run or sweep directory
    out: Path  # the report's folder: paths in the text are relative to it
    arm: tuple[str, ...]  # the config keys that tell arms apart (`analysis.data.arms.arm_keys`)
    names: Mapping[str, str]  # what each difficulty label is ("1" -> "1+1 digits"), as the runs recorded
    # each arm's colour in every figure, by its label (`render.canvas.report_colours`); None: each figure its own
    colours: Mapping[str, str] | None = None
    viewer: bool = False  # the build writes every group on one page beside the report (viewer.html)


@dataclass(frozen=True, kw_only=True)
class Section:
    """A section's markdown and the files it links to (written by `analysis.render.writer`)."""

    text: str
    files: Files = field(default_factory=Files)
    # on the second page: what the first page's link to it says is there, and whether any of it is a finding
    pointer: str = ""
