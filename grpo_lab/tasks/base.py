from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One verifiable problem. `prompt_id` is stable across runs so a prompt's history can be followed."""

    prompt_id: str
    prompt: str
    answer: str
    difficulty: str  # level label "1".."5", or a pass-rate bin


@dataclass(frozen=True)
class Task:
    """A finite training pool, a disjoint held-out pool, and how answers are checked.

    answer_kind: "integer" (exact integer match) or "latex" (math-verify equivalence).
    answer_format: "bare" (the whole completion), "number", "boxed", "answer_line" or "last_number"
    (rewards.final_answer).
    """

    name: str
    train: tuple[Problem, ...]
    held_out: tuple[Problem, ...]
    answer_kind: str
    # what each difficulty label is, for the report's figures ("1": "1+1 digits"); {} when the labels say it
    difficulty_labels: dict[str, str] = field(default_factory=dict)
    answer_format: str = "bare"  # where the answer is read in a completion (rewards.ANSWER_FORMATS)

    def __post_init__(self) -> None:
        if not self.train:
            raise ValueError(f"task {self.name!r} has an empty training pool")
        overlap = {p.prompt_id for p in self.train} & {p.prompt_id for p in self.held_out}
        if overlap:
            raise ValueError(f"task {self.name!r}: {len(overlap)} prompt ids are in both pools, e.g. {min(overlap)!r}")


class TaskKind:
    """What a task (`task.name`) owns: the `task` keys only it reads, its checks and advice, its pool sizes before
    it is built, and the build. One module each, registered once in grpo_lab/tasks/__init__.py."""

    name: str = ""
    keys: tuple[str, ...] = ()  # keys only this task reads: set under another task they are refused

    @classmethod
    def check(cls, cfg) -> None:
        """Its own keys' values (grpo_lab.errors.require: one line naming the key); `cfg` is the TrainConfig."""

    @classmethod
    def sizes(cls, cfg) -> tuple[int, int]:
        """(training problems, held-out problems) it will build, known before it is built."""
        raise NotImplementedError

    @classmethod
    def no_held_out(cls, cfg) -> str:
        """Why it has no held-out problem, and what gives it some."""
        return "no held-out problem"

    @classmethod
    def build(cls, cfg) -> Task:
        """The task, with its pools, from the TaskConfig."""
        raise NotImplementedError

    @classmethod
    def advice(cls, cfg) -> list[str]:
        """Warnings about valid settings that will not learn, for a config that chose this task."""
        return []
