"""Tasks: verifiable problems with a difficulty label, split into a training pool and a held-out pool."""

from grpo_lab.tasks.base import Problem, Task
from grpo_lab.tasks.arithmetic import ArithmeticTask
from grpo_lab.tasks.mathset import load_math_task

__all__ = ["Problem", "Task", "ArithmeticTask", "load_math_task"]
