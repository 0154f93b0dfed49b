"""Local math sets (MATH-style JSONL or parquet with a level field). Nothing is downloaded."""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

from grpo_lab.rewards import last_boxed
from grpo_lab.tasks.base import Problem, Task

DEFAULT_TEMPLATE = "{problem}\nPut the final answer in \\boxed{{}}.\n"


def _read_records(path: Path) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(f"task.path: no such file: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix in (".jsonl", ".json"):
        records = []
        with path.open() as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{i}: not a JSON line ({e.msg})") from None
        return records
    raise ValueError(f"task.path: {path} must end in .jsonl or .parquet")


def _level(value: object) -> str:
    # MATH writes "Level 3"; other sets write 3 or "3".
    m = re.search(r"\d+", str(value))
    return m.group(0) if m else str(value)


def _problems(path: Path, problem_field: str, answer_field: str, level_field: str, template: str) -> list[Problem]:
    problems = []
    for i, rec in enumerate(_read_records(path)):
        missing = [f for f in (problem_field, level_field) if f not in rec]
        answer = rec.get(answer_field)
        if answer is None and "solution" in rec:  # MATH keeps the answer boxed inside the solution
            answer = last_boxed(str(rec["solution"]))
        if answer is None:
            missing.append(answer_field)
        if missing:
            raise ValueError(f"{path}: record {i} has no field {missing[0]!r} (fields: {sorted(rec)})")
        pid = str(rec.get("unique_id") or rec.get("id") or f"{path.stem}-{i}")
        problems.append(Problem(pid, template.format(problem=rec[problem_field]), str(answer), _level(rec[level_field])))
    return problems


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
