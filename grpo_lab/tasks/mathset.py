"""Local math sets (MATH-style JSONL or parquet with a level field). Nothing is downloaded."""

from __future__ import annotations

import json
import os
import re
import zlib
from functools import lru_cache
from pathlib import Path

from grpo_lab.errors import InputError
from grpo_lab.rewards.rules import MAX_ANSWER_CHARS, last_boxed
from grpo_lab.tasks.base import Problem, Task

DEFAULT_TEMPLATE = "{problem}\nPut the final answer in \\boxed{{}}.\n"
NO_LEVEL = "all"  # the difficulty of problems whose file has no level field
# A record is one problem: a prompt. 1 MiB of text is some 250,000 tokens, past the context of any model
# trained here; a longer line is refused before it is read whole (a 50 MB `problem` was once accepted).
MAX_RECORD_BYTES = 1 << 20


class DataError(InputError):
    """A training or held-out file that cannot be used; the message names file:line and the field."""


def _read_records(path: Path) -> list[tuple[str, object]]:
    """(where, record) per record: where is "file:line" (JSONL) or "file: row N" (parquet)."""
    if not path.exists():
        raise FileNotFoundError(f"task.path: no such file: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a broken file
            raise DataError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
        return [(f"{path}: row {i}", row) for i, row in enumerate(rows)]
    if path.suffix in (".jsonl", ".json"):
        records = []
        with path.open("rb") as f:  # bytes: a decode error then names its line
            for i, raw in enumerate(iter(lambda: f.readline(MAX_RECORD_BYTES + 1), b""), 1):
                if len(raw) > MAX_RECORD_BYTES:
                    raise DataError(f"{path}:{i}: a line over {MAX_RECORD_BYTES:,} bytes (one problem is one prompt; "
                                    "no model here reads that much)")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{path}:{i}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
                if line.strip():
                    try:
                        records.append((f"{path}:{i}", json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise DataError(f"{path}:{i}: not a JSON line ({e.msg} at column {e.colno})") from None
        return records
    raise DataError(f"task.path: {path} must end in .jsonl or .parquet")


def _level(value: object) -> str:
    # MATH writes "Level 3"; other sets write 3 or "3".
    m = re.search(r"\d+", str(value))
    return m.group(0) if m else str(value)


def _text(where: str, rec: dict, key: str) -> str:
    """A field as text: present, not null, a string or a number, not blank."""
    if key not in rec:
        raise DataError(f"{where}: no field {key!r} (fields: {sorted(map(str, rec))})")
    value = rec[key]
    if value is None:
        raise DataError(f"{where}: field {key!r} is null")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: field {key!r} must be text or a number, not {type(value).__name__}")
    if not str(value).strip():
        raise DataError(f"{where}: field {key!r} is empty")
    if len(str(value).encode("utf-8", "surrogatepass")) > MAX_RECORD_BYTES:
        raise DataError(f"{where}: field {key!r} is over {MAX_RECORD_BYTES:,} bytes")
    return str(value)


def _problems(path: Path, problem_field: str, answer_field: str, level_field: str, template: str) -> list[Problem]:
    problems = []
    for i, (where, rec) in enumerate(_read_records(path)):
        if not isinstance(rec, dict):
            raise DataError(f"{where}: not a JSON object (a {type(rec).__name__})")
        problem = _text(where, rec, problem_field)
        level = _text(where, rec, level_field) if level_field in rec else NO_LEVEL  # optional: one difficulty
        if rec.get(answer_field) is None and rec.get("solution") is not None:  # MATH boxes it in the solution
            answer = last_boxed(_text(where, rec, "solution"))
            if answer is None or not answer.strip():
                raise DataError(f"{where}: no field {answer_field!r} and no \\boxed{{}} answer in 'solution'")
        else:
            answer = _text(where, rec, answer_field)
        if len(answer) > MAX_ANSWER_CHARS:  # answers are read up to this length: no completion could match it
            raise DataError(f"{where}: the answer is {len(answer):,} characters; answers are read up to "
                            f"{MAX_ANSWER_CHARS}, so no completion could be right")
        pid = str(rec.get("unique_id") or rec.get("id") or f"{path.stem}-{i}")
        problems.append(Problem(pid, template.format(problem=problem), answer, _level(level)))
    if not problems:
        raise DataError(f"{path}: no records")
    return problems


@lru_cache(maxsize=8)
def _checked(path: str, size: int, mtime_ns: int) -> None:
    _problems(Path(path), "problem", "answer", "level", DEFAULT_TEMPLATE)


def check_math_file(path: str, key: str = "task.path") -> None:
    """Read and check every record of a math-set file (cached while the file is unchanged); raises a
    one-line DataError naming file:line and field. Config validation calls it before any model loads."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise DataError(f"{key}: {path}: {e.strerror}") from None
    _checked(str(path), st.st_size, st.st_mtime_ns)


def load_math_task(
    path: str,
    eval_path: str | None = None,
    *,
    eval_fraction: float = 0.2,
    problem_field: str = "problem",
    answer_field: str = "answer",
    level_field: str = "level",
    template: str = DEFAULT_TEMPLATE,
) -> Task:
    """Load a local math set. Without `eval_path`, a stable hash of each prompt id puts
    `eval_fraction` of the problems in the held-out pool (the same split on every machine)."""
    fields = dict(problem_field=problem_field, answer_field=answer_field, level_field=level_field, template=template)
    problems = _problems(Path(path), **fields)
    if eval_path:
        return Task("mathset", tuple(problems), tuple(_problems(Path(eval_path), **fields)), "latex")
    held = [(zlib.crc32(p.prompt_id.encode()) % 1000) < eval_fraction * 1000 for p in problems]
    train = tuple(p for p, h in zip(problems, held) if not h)
    return Task("mathset", train, tuple(p for p, h in zip(problems, held) if h), "latex")
