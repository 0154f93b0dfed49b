"""What a reader declares of its tool: its name, what SOURCE is, an example command line, the options only it takes,
and its `read`. `analysis.ingest` makes its registry, its command line and its checks from these declarations, so a
new tool is its module (ending in `TOOL = Tool(...)`) and one line in `analysis/ingest/__init__.py`'s `TOOLS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.ingest.logs import Logged


@dataclass(frozen=True)
class Option:
    """One option only this tool takes: `read(..., name=value)`, and `--name-with-dashes` on the command line."""

    name: str  # the keyword `read` takes
    help: str
    type: Callable[[str], object] = str  # the command line's text -> the value `read` gets
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Tool:
    """A tool whose logs the ingest reads: `read(source, group_size=..., **options)` -> Logged."""

    name: str  # the command line's TOOL, and run.json's imported.tool
    title: str  # its name in prose (the report's provenance): "TRL", "open-instruct"
    source: str  # what SOURCE is, for --help
    example: str  # one command line, for --help
    read: Callable[..., Logged]
    options: tuple[Option, ...] = ()
