"""A task's kind: what every task owns (its keys, checks, pools). Its records, `Problem` and `Task`, are
grpo_lab/records.py's."""

from __future__ import annotations

from dataclasses import dataclass

from grpo_lab.errors import require
from grpo_lab.records import Problem, Task
from grpo_lab.rewards.rules import ANSWER_FORMATS

__all__ = ["Problem", "Remedies", "Task", "TaskKind", "check_levelled", "shots_text"]


@dataclass(frozen=True)
class Remedies:
    """What a task says helps a run that cannot learn (grpo_lab/train/cannot_learn.py), each in keys the task reads
    or as a change to its data: `answer`, for a model that gives no answer in the task's format ("task.answer_format=
    last_number or task.shots"); `easier`, for one that answers wrongly ("easier problems (task.levels)")."""

    answer: str
    easier: str


def shots_text(cfg, shots: str, what: str = "") -> str:
    """Shot keys as a remedy names them: read only with a model=hf tokenizer (chat turns, or plain text for a base
    model), so said with it where the run has the built-in model. `what`: what the shots are ("worked examples")."""
    needs = "" if cfg.model.name == "hf" else "with model.name=hf"
    said = ": ".join(x for x in (needs, what) if x)
    return f"{shots} ({said})" if said else shots


def check_levelled(cfg) -> None:
    """The keys a task built level by level reads (arithmetic, gym): its pools' sizes per level and how the prompt
    asks for the answer. `cfg` is the TrainConfig."""
    t = cfg.task
    require(t.train_per_level >= 1, "task.train_per_level", t.train_per_level, "must be >= 1")
    require(t.eval_per_level >= 0, "task.eval_per_level", t.eval_per_level, "must be >= 0")
    require(t.answer_format in ANSWER_FORMATS, "task.answer_format", t.answer_format,
            f"must be one of {', '.join(map(repr, ANSWER_FORMATS))}")


class TaskKind:
    """What a task (`task.name`) owns: the `task` keys only it reads, its checks and advice, its pool sizes before
    it is built, and the build. One module each, registered once in grpo_lab/tasks/__init__.py."""

    name: str = ""
    keys: tuple[str, ...] = ()  # shared `task` keys only this task reads: set under another task they are refused
    settings_type: type | None = None  # a dataclass of its own keys, the `task.<name>.*` block (None: none)

    def __init_subclass__(cls, **kwargs) -> None:
        """A task says, where it is defined, how large its pools are and how they are built."""
        super().__init_subclass__(**kwargs)
        missing = [m for m in ("sizes", "build") if getattr(cls, m).__func__ is getattr(TaskKind, m).__func__]
        if missing:
            raise TypeError(f"task {cls.__name__} ({cls.name!r}) must define {', '.join(missing)}")

    @classmethod
    def check(cls, cfg) -> None:
        """Its own keys' values (grpo_lab.errors.require: one line naming the key); `cfg` is the TrainConfig."""

    @classmethod
    def sizes(cls, cfg) -> tuple[int, int]:
        """(training problems, held-out problems) it will build, known before it is built (every task defines it)."""
        raise TypeError(f"{cls.__name__} defines no sizes")

    @classmethod
    def no_held_out(cls, cfg) -> str:
        """Why it has no held-out problem, and what gives it some."""
        return "no held-out problem"

    @classmethod
    def build(cls, cfg) -> Task:
        """The task, with its pools, from the TaskConfig (every task defines it)."""
        raise TypeError(f"{cls.__name__} defines no build")

    @classmethod
    def advice(cls, cfg) -> list[str]:
        """Warnings about valid settings that will not learn, for a config that chose this task."""
        return []

    @classmethod
    def easier(cls, cfg) -> str:
        """The capability remedy: what gives the model easier problems, in keys this task reads ("easier problems
        (task.levels)"), or what to change in its data."""
        return "easier problems"

    @classmethod
    def answer_help(cls, cfg) -> str:
        """The format remedy: what helps the model answer in this task's format, in keys this task reads."""
        return shots_text(cfg, "task.shots", "worked examples")

    @classmethod
    def remedies(cls, cfg) -> Remedies:
        """Both remedies, for the warning of a run that cannot learn; `cfg` is the TrainConfig."""
        return Remedies(cls.answer_help(cfg), cls.easier(cfg))
