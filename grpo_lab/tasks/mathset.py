"""Local math sets (MATH-style JSONL or parquet with a level field). Nothing is downloaded."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import unicodedata
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from grpo_lab.errors import InputError, require
from grpo_lab.records import Problem, Task
from grpo_lab.rewards.answers import clean
from grpo_lab.rewards.rules import MAX_ANSWER_CHARS, last_boxed, undefined
from grpo_lab.tasks.base import TaskKind, shots_text

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "{problem}\nPut the final answer in \\boxed{{}}.\n"
NO_LEVEL = "all"  # the difficulty of problems whose file has no level field
# A record is one problem: a prompt. 1 MiB of text is some 250,000 tokens, past the context of any model
# trained here; a longer line is refused before it is read whole (a 50 MB `problem` was once accepted).
MAX_RECORD_BYTES = 1 << 20
EVAL_FRACTION = 0.2  # the held-out share of a file split by hash (without task.eval_path)
# the keys only this task reads (grpo_lab/config/reads.py): its files, and the LaTeX answer checks (worker processes)
KEYS = ("task.path", "task.eval_path", "reward.workers", "reward.answer_timeout_s", "reward.step_budget_s")


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
                    raise DataError(f"{path}:{i}: not UTF-8 "
                                    f"(byte {raw[e.start]:#04x} at column {e.start + 1})") from None
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
    if isinstance(value, float) and not math.isfinite(value):  # JSON's NaN and Infinity, a parquet float's NaN
        raise DataError(f"{where}: field {key!r} is {value} (not a finite number)")
    if not str(value).strip():
        raise DataError(f"{where}: field {key!r} is empty")
    if len(str(value).encode("utf-8", "surrogatepass")) > MAX_RECORD_BYTES:
        raise DataError(f"{where}: field {key!r} is over {MAX_RECORD_BYTES:,} bytes")
    return str(value)


def _answer(where: str, rec: dict, answer_field: str) -> str:
    """The answer a reply must state: the field, or MATH's last box of its solution; refused (file:line) when no
    reply could state it: empty once its dress is off, a non-finite number (NaN never equals itself), or longer
    than answers are read."""
    if rec.get(answer_field) is None and rec.get("solution") is not None:  # MATH boxes it in the solution
        answer = last_boxed(_text(where, rec, "solution"))
        if answer is None or not answer.strip():
            raise DataError(f"{where}: no field {answer_field!r} and no \\boxed{{}} answer in 'solution'")
    else:
        answer = _text(where, rec, answer_field)
    if not clean(answer).strip():
        raise DataError(f"{where}: the answer {answer!r} is empty once its dress ($, \\text{{}}, \\boxed{{}}) is off")
    if non_finite(clean(answer)) or undefined(answer):
        raise DataError(f"{where}: the answer {answer!r} is not a defined finite number (NaN equals nothing, "
                        "infinity is written \\infty): no reply could be right")
    if len(answer) > MAX_ANSWER_CHARS:  # answers are read up to this length: no completion could match it
        raise DataError(f"{where}: the answer is {len(answer):,} characters; answers are read up to "
                        f"{MAX_ANSWER_CHARS}, so no completion could be right")
    return answer


def non_finite(text: str) -> bool:
    """Whether `text` reads as a number that is not finite ("nan", "NaN", "-inf", "Infinity"): what a float
    column holding NaN, or its text, becomes."""
    try:
        return not math.isfinite(float(text.replace(" ", "")))
    except ValueError:
        return False


def spelling(text: str) -> str:
    """A problem's text as its hash places it (`held_out_by_text`): Unicode NFKC, case folded, whitespace runs one
    space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def normalised(text: str) -> str:
    """A problem's text as the held-out split and the repeat count compare it: its `spelling` without the spaces
    beside a sign, so "4+7" and "4 + 7" are one problem ("what is 47" and "what is 4 7" are not: a space between two
    word characters stays)."""
    return re.sub(r" (?=\W)|(?<=\W) ", "", spelling(text))


def _id(where: str, rec: dict, i: int, path: Path) -> str:
    """A record's id: its `unique_id`, else its `id`, whatever the value (0, "0" and 0.5 are ids; "", false and NaN
    are refused at file:line); the file's name and the record's index where neither is given (absent or null)."""
    key = next((k for k in ("unique_id", "id") if rec.get(k) is not None), None)
    return f"{path.stem}-{i}" if key is None else _text(where, rec, key)


def _problems(path: Path, problem_field: str, answer_field: str, level_field: str,
              template: str) -> list[tuple[str, str, str, Problem]]:
    """(where, the problem's normalised text, its spelling, the Problem) of every record; two records with one id
    refused."""
    out, seen = [], {}
    for i, (where, rec) in enumerate(_read_records(path)):
        if not isinstance(rec, dict):
            raise DataError(f"{where}: not a JSON object (a {type(rec).__name__})")
        problem = _text(where, rec, problem_field)
        level = _text(where, rec, level_field) if level_field in rec else NO_LEVEL  # optional: one difficulty
        answer = _answer(where, rec, answer_field)
        pid = _id(where, rec, i, path)
        if pid in seen:  # one prompt_id for two problems would merge their histories and pools
            raise DataError(f"{where}: id {pid!r} is also the id of {seen[pid]}: two problems with one id")
        seen[pid] = where
        out.append((where, normalised(problem), spelling(problem),
                    Problem(pid, template.format(problem=problem), answer, _level(level))))
    if not out:
        raise DataError(f"{path}: no records")
    return out


def held_out_by_text(text: str, eval_fraction: float = EVAL_FRACTION) -> bool:
    """The stable hash split: a problem is held out by a hash of its text (its `spelling`)."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) % 1000 < eval_fraction * 1000


def held_out_sides(rows: list[tuple[str, str, str, Problem]], eval_fraction: float = EVAL_FRACTION) -> list[bool]:
    """Each row's side of the hash split: every row of one normalised text on the side the hash of its first
    spelling in the file gives, so the same problem under two ids, or spelled with other spaces or case, is on
    one side, never both (a file without such repeats splits as each problem's own spelling says)."""
    first: dict[str, str] = {}
    for _, text, spelled, _ in rows:
        first.setdefault(text, spelled)
    side = {text: held_out_by_text(spelled, eval_fraction) for text, spelled in first.items()}
    return [side[text] for _, text, _, _ in rows]


@dataclass(frozen=True)
class MathFile:
    """What the checks need of a math-set file: its problems' ids and normalised texts (each with the first place
    it is found), each record's normalised text in order, how many repeat an earlier problem's text, and how many
    the hash split holds out."""

    ids: dict[str, str]
    texts: dict[str, str]
    rows: tuple[str, ...]
    repeats: int
    held_out: int

    @property
    def count(self) -> int:
        return len(self.ids)


@lru_cache(maxsize=8)
def _checked(path: str, size: int, mtime_ns: int) -> MathFile:
    rows = _problems(Path(path), "problem", "answer", "level", DEFAULT_TEMPLATE)
    texts: dict[str, str] = {}
    for where, text, _, _ in rows:
        texts.setdefault(text, where)
    return MathFile({p.prompt_id: where for where, _, _, p in rows}, texts, tuple(text for _, text, _, _ in rows),
                    len(rows) - len(texts), sum(held_out_sides(rows)))


def check_math_file(path: str, key: str = "task.path") -> MathFile:
    """Read and check every record of a math-set file (cached while the file is unchanged); raises a
    one-line DataError naming file:line and field. Config validation calls it before any model loads."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise DataError(f"{key}: {path}: {e.strerror}") from None
    return _checked(str(path), st.st_size, st.st_mtime_ns)


def check_math_task(path: str, eval_path: str | None = None) -> tuple[int, int]:
    """Both files checked, and an id in both refused naming both places; (training problems, held-out
    problems), as load_math_task will make them."""
    train = check_math_file(path, "task.path")
    if not eval_path:
        return train.count - train.held_out, train.held_out
    held = check_math_file(eval_path, "task.eval_path")
    for pid, where in held.ids.items():
        if pid in train.ids:
            raise DataError(f"{where}: id {pid!r} is also the id of the training problem at {train.ids[pid]}: "
                            "a held-out problem must not be a training one")
    return train.count - sum(t in held.texts for t in train.rows), held.count  # every record of a held-out text


def load_math_task(
    path: str,
    eval_path: str | None = None,
    *,
    eval_fraction: float = EVAL_FRACTION,
    problem_field: str = "problem",
    answer_field: str = "answer",
    level_field: str = "level",
    template: str = DEFAULT_TEMPLATE,
) -> Task:
    """Load a local math set. Without `eval_path`, a stable hash of each problem's text puts `eval_fraction` of
    the problems in the held-out pool (the same split on every machine, the same problem on one side whatever its
    ids or spacing: `held_out_sides`); with it, a training problem whose normalised text is held out leaves
    training. Problems that repeat another's normalised text are counted in a warning."""
    fields = dict(problem_field=problem_field, answer_field=answer_field, level_field=level_field, template=template)
    rows = _problems(Path(path), **fields)
    _warn_repeats(path, [text for _, text, _, _ in rows])
    if eval_path:
        held = _problems(Path(eval_path), **fields)
        _warn_repeats(eval_path, [text for _, text, _, _ in held])
        ids = {p.prompt_id: where for where, _, _, p in rows}
        for where, _, _, p in held:
            if p.prompt_id in ids:
                raise DataError(f"{where}: id {p.prompt_id!r} is also the id of the training problem at "
                                f"{ids[p.prompt_id]}: a held-out problem must not be a training one")
        texts = {text for _, text, _, _ in held}
        train = tuple(p for _, text, _, p in rows if text not in texts)
        if len(train) < len(rows):
            log.warning("%s: %d training problems have the text of a held-out problem in %s: left out of training",
                        path, len(rows) - len(train), eval_path)
        return Task("mathset", train, tuple(p for _, _, _, p in held), "latex")
    side = held_out_sides(rows, eval_fraction)
    train = tuple(p for (_, _, _, p), h in zip(rows, side) if not h)
    return Task("mathset", train, tuple(p for (_, _, _, p), h in zip(rows, side) if h), "latex")


def _warn_repeats(path: str, texts: list[str]) -> None:
    repeats = len(texts) - len(set(texts))
    if repeats:
        log.warning("%s: %d problems repeat the text of another (%d distinct texts); each text stays on one side "
                    "of the held-out split", path, repeats, len(set(texts)))


class Mathset(TaskKind):
    """`task=mathset`: a local JSONL or parquet file of problems, answers checked by math-verify."""

    name = "mathset"
    keys = KEYS

    @classmethod
    def check(cls, cfg) -> None:
        t = cfg.task
        require(bool(t.path), "task.path", t.path, "task=mathset needs task.path=FILE, a local JSONL or parquet file "
                "of problems")
        require(os.path.isfile(t.path), "task.path", t.path,
                "no such file (task=mathset needs an existing JSONL or parquet file)")
        require(t.eval_path is None or os.path.isfile(t.eval_path), "task.eval_path", t.eval_path,
                "must be an existing JSONL or parquet file")
        require(t.answer_format == "bare", "task.answer_format", t.answer_format,
                "applies to task=arithmetic (mathset answers are always \\boxed{})")
        train, _ = cls.sizes(cfg)  # its files read and checked once per (path, size, mtime)
        split = "task.eval_path" if t.eval_path else "task.path"
        require(train >= 1, split, getattr(t, split.split(".")[1]),
                "leaves no training problem (every one is held out: the held-out file holds its text, or the hash "
                "split of a small file took all)")

    @classmethod
    def sizes(cls, cfg) -> tuple[int, int]:
        return check_math_task(cfg.task.path, cfg.task.eval_path)  # its files read and checked, cached

    @classmethod
    def no_held_out(cls, cfg) -> str:
        return f"the hash split holds none of {cfg.task.path}'s problems out; give task.eval_path=FILE"

    @classmethod
    def build(cls, cfg) -> Task:
        return load_math_task(cfg.path, cfg.eval_path)

    @classmethod
    def easier(cls, cfg) -> str:  # its problems are its file's: task.levels is arithmetic's
        return (f"easier problems in the file (task.path={cfg.task.path}: problems this model solves some of, e.g. "
                "only the lower levels of its level field)")

    @classmethod
    def answer_help(cls, cfg) -> str:
        return shots_text(cfg, "task.shots", "examples that box their answers")

    @classmethod
    def advice(cls, cfg) -> list[str]:
        if cfg.model.name == "tiny":
            return ["task=mathset with the built-in model (model=tiny): it knows only the arithmetic task's a+b= "
                    "prompts, so every answer will be wrong and every group tie; use model=local model.path=DIR"]
        return []
