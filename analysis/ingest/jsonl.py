"""JSON Lines as the tools dump them (verl, open-instruct, NeMo-RL): one JSON object a line, each named by its
file:line, a line that is not one refused in one line before anything is built of the file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from analysis.ingest.logs import IngestError


def objects(path: Path, name: str | Path) -> Iterator[tuple[str, dict]]:
    """(where, object) for each non-blank line of `path`, `where` being `name:line`."""
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is named by its number, as any other
        for number, raw in enumerate(f, start=1):
            where = f"{name}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad = raw[e.start:e.start + 1]
                raise IngestError(f"{where}: not UTF-8 text (byte {e.start + 1} of the line: {bad!r})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise IngestError(f"{where}: not a JSON line ({e.msg} at column {e.colno})") from None
            except RecursionError:  # json's decoder recurses once a nesting level
                raise IngestError(f"{where}: JSON nested too deep to read") from None
            if not isinstance(row, dict):
                raise IngestError(f"{where}: a JSON {type(row).__name__}, not an object")
            yield where, row
