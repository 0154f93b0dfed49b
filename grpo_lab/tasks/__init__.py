"""Tasks: verifiable problems with a difficulty label, split into a training pool and a held-out pool.

Each task is one module owning its keys, checks, advice, pool sizes and build (grpo_lab/tasks/base.py
`TaskKind`), registered below once; `conf/task/<name>.yaml` is its preset."""

from grpo_lab.errors import require
from grpo_lab.records import Problem, Task
from grpo_lab.tasks.arithmetic import Arithmetic, ArithmeticTask
from grpo_lab.tasks.base import TaskKind
from grpo_lab.tasks.gym import Gym
from grpo_lab.tasks.mathset import Mathset, load_math_task

TASKS: dict[str, type[TaskKind]] = {cls.name: cls for cls in (Arithmetic, Mathset, Gym)}


def task_kind(name: str) -> type[TaskKind]:
    """The task `task.name` names (one line naming the key where none is)."""
    require(name in TASKS, "task.name", name, f"must be one of {', '.join(map(repr, TASKS))}")
    return TASKS[name]


def build_task(cfg) -> Task:
    """The task a TaskConfig names, with its training and held-out pools."""
    return task_kind(cfg.name).build(cfg)


__all__ = ["Problem", "Task", "TaskKind", "ArithmeticTask", "TASKS", "build_task", "load_math_task", "task_kind"]
