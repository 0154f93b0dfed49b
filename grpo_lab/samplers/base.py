from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from grpo_lab.config import SamplerConfig
from grpo_lab.rollout import Rollout
from grpo_lab.tasks.base import Problem


@dataclass
class Group:
    """One sampling round of one prompt: G completions and their scores."""

    problem: Problem
    round: int  # 0 = first draw of this prompt this step; k = k-th redraw after a tie
    samples: Rollout  # the G completions (one prompt)
    rewards: np.ndarray  # (G,) float32
    correct: np.ndarray  # (G,) bool
    tie: bool  # reward std <= eps: zero advantage for every member
    used: bool = False  # set by the sampler: the group enters the gradient


# (problems, round) -> one freshly sampled and scored Group per problem, in order
DrawRound = Callable[[list[Problem], int], list[Group]]


@dataclass
class Draw:
    """What a sampler drew for one step."""

    groups: list[Group]  # every group drawn, in draw order (all go to the table)
    units: list[list[Group]]  # what trains: each unit's groups pool into one advantage baseline
    exhausted: str | None = None  # set when the sampler hit its cap: the run must stop, saying this


class PromptStream:
    """An endless stream of seeded epoch permutations of the training pool. Its only state is the
    cursor, so a checkpoint restores it exactly."""

    def __init__(self, pool: tuple[Problem, ...], seed: int):
        self.pool, self.seed, self.cursor = pool, seed, 0
        self._perm = lru_cache(maxsize=4)(self._permutation)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.pool)))
        random.Random(f"{self.seed}-epoch-{epoch}").shuffle(order)
        return order

    def take(self, count: int) -> list[Problem]:
        n = len(self.pool)
        out = [self.pool[self._perm(k // n)[k % n]] for k in range(self.cursor, self.cursor + count)]
        self.cursor += count
        return out


@dataclass
class Sampler(ABC):
    """Base: holds the config and the prompt stream; subclasses implement `draw`."""

    cfg: SamplerConfig
    stream: PromptStream
    extra_state: dict = field(default_factory=dict)

    @abstractmethod
    def draw(self, draw_round: DrawRound, prompts: int) -> Draw:
        """Draw the groups of one step that trains on (up to) `prompts` prompts."""

    def state_dict(self) -> dict:
        return {"cursor": self.stream.cursor, **self.extra_state}

    def load_state_dict(self, state: dict) -> None:
        self.stream.cursor = state["cursor"]
        self.extra_state = {k: v for k, v in state.items() if k != "cursor"}


def use(groups: list[Group]) -> list[Group]:
    for g in groups:
        g.used = True
    return groups
