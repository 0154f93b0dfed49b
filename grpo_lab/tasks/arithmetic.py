"""A synthetic addition task with difficulty levels: fast, offline, exactly verifiable."""

from __future__ import annotations

import dataclasses
import random
import zlib
from functools import lru_cache

from grpo_lab.errors import ConfigError
from grpo_lab.records import Problem, Task
from grpo_lab.tasks.base import TaskKind, check_levelled, shots_text

# level -> digits of the two operands. More digits means more carries to get right, and the
# character model writes the most significant digit first, so difficulty rises steeply.
LEVELS: dict[int, tuple[int, int]] = {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 3)}
# the keys only this task reads (grpo_lab/config/reads.py: set under task=mathset, they are refused)
KEYS = ("task.levels", "task.train_per_level", "task.eval_per_level", "task.seed", "task.answer_format")


# How each answer format asks for the answer (the task states its format; rewards.final_answer reads it).
# "bare" is the built-in model's own prompt; the others are questions for instruct models.
QUESTIONS: dict[str, str] = {
    "bare": "{a}+{b}=",
    "number": "What is {a} + {b}? Reply with only the final number.",
    "boxed": "What is {a} + {b}? Put the final number in \\boxed{{}}.",
    "answer_line": 'What is {a} + {b}? End your reply with a last line "Answer: N", N the final number.',
    "last_number": "What is {a} + {b}?",  # answered in the model's own words; the last number is read
}


def held_out_only(prompt_id: str) -> bool:
    """A fixed quarter of every level's problems is reserved for evaluation, decided by a hash of the id,
    so neither the training pool nor the tiny model's supervised warm-start ever sees a held-out problem."""
    return zlib.crc32(prompt_id.encode()) % 4 == 0


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def arithmetic_problem(a: int, b: int, level: int) -> Problem:
    return Problem(prompt_id=f"add-L{level}-{a}+{b}", prompt=f"{a}+{b}=", answer=str(a + b), difficulty=str(level))


def phrase(problem: Problem, answer_format: str) -> Problem:
    """The problem asked in `answer_format`'s words (same id, answer and level)."""
    if answer_format not in QUESTIONS:
        raise ValueError(f"task.answer_format={answer_format!r}: must be one of {', '.join(map(repr, QUESTIONS))}")
    a, b = problem.prompt_id.rsplit("-", 1)[1].split("+")
    return dataclasses.replace(problem, prompt=QUESTIONS[answer_format].format(a=a, b=b))


def sample_problem(rng: random.Random, level: int) -> Problem:
    da, db = LEVELS[level]
    return arithmetic_problem(_operand(rng, da), _operand(rng, db), level)


def _all_problems(level: int) -> list[Problem]:
    da, db = LEVELS[level]
    lo_a, lo_b = (0 if d == 1 else 10 ** (d - 1) for d in (da, db))
    return [arithmetic_problem(a, b, level) for a in range(lo_a, 10**da) for b in range(lo_b, 10**db)]


def _enumerated(level: int) -> bool:
    """Small levels are enumerated, so a pool is sampled from exactly what there is."""
    da, db = LEVELS[level]
    return 10 ** (da + db) <= 100_000


@lru_cache(maxsize=None)
def side_size(level: int, held_out: bool) -> int:
    """How many distinct problems of a level are on the held-out (or the training) side."""
    da, db = LEVELS[level]
    lo_a, lo_b = (0 if d == 1 else 10 ** (d - 1) for d in (da, db))
    return sum(held_out_only(f"add-L{level}-{a}+{b}") == held_out
               for a in range(lo_a, 10**da) for b in range(lo_b, 10**db))


def check_arithmetic(levels: list[int] | tuple[int, ...], train_per_level: int, eval_per_level: int) -> None:
    """Levels that exist, each listed once, and pools no larger than the problems each side of a level has
    (past that sampling distinct problems could never end). Raises ConfigError naming the key."""
    if not levels:
        raise ConfigError(f"task.levels=[] is invalid: name at least one of {sorted(LEVELS)}")
    for lv in levels:
        if isinstance(lv, bool) or lv not in LEVELS:
            raise ConfigError(f"task.levels={list(levels)} is invalid: unknown level {lv!r}; "
                              f"must be among {sorted(LEVELS)}")
        if list(levels).count(lv) > 1:
            raise ConfigError(f"task.levels={list(levels)} is invalid: level {lv} is listed twice")
    for key, count, held_out in (("task.train_per_level", train_per_level, False),
                                 ("task.eval_per_level", eval_per_level, True)):
        for lv in levels:  # a large level has 200,000+ problems a side: counts up to 10,000 need no count
            if (_enumerated(lv) or count > 10**4) and count > (have := side_size(lv, held_out)):
                raise ConfigError(f"{key}={count} is too large: level {lv} has {have} "
                                  f"{'held-out' if held_out else 'training'} problems")


def _distinct(rng: random.Random, level: int, count: int, held_out: bool) -> list[Problem]:
    """`count` distinct problems of one level from the held-out or the training side (check_arithmetic first)."""
    if _enumerated(level):
        return rng.sample([p for p in _all_problems(level) if held_out_only(p.prompt_id) == held_out], count)
    out: dict[str, Problem] = {}
    while len(out) < count:  # large level: rejection sampling never runs dry
        p = sample_problem(rng, level)
        if held_out_only(p.prompt_id) == held_out:
            out.setdefault(p.prompt_id, p)
    return list(out.values())


def held_out_problems(level: int, count: int, seed: int = 0) -> list[Problem]:
    """Up to `count` distinct held-out problems of one level (all of them where the level has fewer)."""
    da, db = LEVELS[level]
    if 10 ** (da + db) <= 100_000:
        count = min(count, sum(held_out_only(p.prompt_id) for p in _all_problems(level)))
    return _distinct(random.Random(f"held-out-{seed}-{level}"), level, count, True)


class ArithmeticTask:
    """Build the task: per level, a seeded training pool and a disjoint held-out pool."""

    @staticmethod
    def build(
        levels: list[int] | tuple[int, ...] = (1, 2, 3, 4),
        train_per_level: int = 32,
        eval_per_level: int = 16,
        seed: int = 1234,
        answer_format: str = "bare",
    ) -> Task:
        check_arithmetic(levels, train_per_level, eval_per_level)
        train: list[Problem] = []
        held_out: list[Problem] = []
        for level in levels:
            rng = random.Random(f"{seed}-{level}")  # per-level stream: adding a level changes no other
            train += _distinct(rng, level, train_per_level, False)
            held_out += _distinct(rng, level, eval_per_level, True)
        if answer_format != "bare":
            train, held_out = [phrase(p, answer_format) for p in train], [phrase(p, answer_format) for p in held_out]
        names = {str(lv): f"{LEVELS[lv][0]}+{LEVELS[lv][1]} digits" for lv in levels}
        return Task(name="arithmetic", train=tuple(train), held_out=tuple(held_out), answer_kind="integer",
                    difficulty_labels=names, answer_format=answer_format)


class Arithmetic(TaskKind):
    """`task=arithmetic`: the built-in a+b= problems, by digit level."""

    name = "arithmetic"
    keys = KEYS

    @classmethod
    def check(cls, cfg) -> None:
        check_levelled(cfg)
        check_arithmetic(cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level)  # levels that exist

    @classmethod
    def sizes(cls, cfg) -> tuple[int, int]:
        t = cfg.task
        return len(t.levels) * t.train_per_level, len(t.levels) * t.eval_per_level  # check: all exist

    @classmethod
    def no_held_out(cls, cfg) -> str:
        return "task.eval_per_level=0"

    @classmethod
    def build(cls, cfg) -> Task:
        return ArithmeticTask.build(cfg.levels, cfg.train_per_level, cfg.eval_per_level, cfg.seed, cfg.answer_format)

    @classmethod
    def easier(cls, cfg) -> str:
        return "easier problems (task.levels: fewer digits)"

    @classmethod
    def answer_help(cls, cfg) -> str:
        shots = shots_text(cfg, "task.shots")
        return shots if cfg.task.answer_format == "last_number" else f"task.answer_format=last_number or {shots}"

    @classmethod
    def advice(cls, cfg) -> list[str]:
        if cfg.model.name == "hf" and cfg.task.answer_format == "bare":
            return ["task.answer_format=bare with a real model (model.name=hf): the whole reply must be the number, "
                    "which instruct models rarely write; use task.answer_format=boxed (or another format that reads "
                    "the answer out of a sentence) with task.chat_template=true"]
        return []
