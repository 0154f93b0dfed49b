"""A task's kind: what every task owns (its keys, checks, pools). Its records, `Problem` and `Task`, are
grpo_lab/records.py's."""

from __future__ import annotations

from grpo_lab.errors import require
from grpo_lab.records import Problem, Task
from grpo_lab.rewards.rules import ANSWER_FORMATS

__all__ = ["Problem", "Task", "TaskKind", "check_levelled"]


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
    keys: tuple[str, ...] = ()  # keys only this task reads: set under another task they are refused

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
