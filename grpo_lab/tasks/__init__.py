"""Tasks: verifiable problems with a difficulty label, split into a training pool and a held-out pool."""

from grpo_lab.tasks import arithmetic, mathset
from grpo_lab.tasks.base import Problem, Task
from grpo_lab.tasks.arithmetic import ArithmeticTask
from grpo_lab.tasks.mathset import load_math_task

# task.name -> the keys only that task reads (grpo_lab/reads.py refuses one set under another task)
TASKS: dict[str, tuple[str, ...]] = {"arithmetic": arithmetic.KEYS, "mathset": mathset.KEYS}


def build_task(cfg) -> Task:
    """The task a TaskConfig names, with its training and held-out pools."""
    if cfg.name == "arithmetic":
        return ArithmeticTask.build(cfg.levels, cfg.train_per_level, cfg.eval_per_level, cfg.seed, cfg.answer_format)
    return load_math_task(cfg.path, cfg.eval_path)


__all__ = ["Problem", "Task", "ArithmeticTask", "TASKS", "build_task", "load_math_task"]
