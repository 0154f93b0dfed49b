"""JSON Lines as the tools dump them (verl, open-instruct, NeMo-RL): one JSON object a line, each named by its
file:line, a line that is not one refused in one line before anything is built of the file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from analysis.ingest.logs import IngestError


def objects(path: Path, name: str | Path) -> Iterator[tuple[str, dict]]:
    """(where, object) for each non-blank line of `path`, `where` being `name:line`."""
    with open(path, encoding="utf-8", errors="strict") as f:
        for number, line in enumerate(f, start=1):
            where = f"{name}:{number}"
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise IngestError(f"{where}: not a JSON line ({e.msg} at column {e.colno})") from None
            if not isinstance(row, dict):
                raise IngestError(f"{where}: a JSON {type(row).__name__}, not an object")
            yield where, row
