from __future__ import annotations

import copy
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from grpo_lab.records import Draw, DrawRound, Group, Problem, Rollout

if TYPE_CHECKING:  # annotations only
    import torch


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
class SamplerSettings:
    """A sampler's own keys, under `sampler.<its name>.` in the config (its defaults are its reasons)."""

    def check(self, key: str) -> None:
        """Raise ConfigError naming `key`.<field> for a value that cannot work on its own."""


@dataclass
class Sampler(ABC):
    """Base: holds the sampler config and the prompt stream; subclasses implement `draw`. Everything a sampler
    remembers between steps lives in `extra_state` (and the cursor), so a checkpoint restores it exactly.

    A subclass owns its rules: `name` (its one spelling), `settings_type` (its keys, `sampler.<name>.*`), `check`
    (rules that tie its keys to the shared ones), `advice` (valid settings that defeat it) and `draw_bounds` (what
    one step can draw, for the budget checks). `grpo_lab.samplers` registers it once."""

    name: ClassVar[str]
    settings_type: ClassVar[type[SamplerSettings] | None] = None  # None: no keys of its own
    # True when its state holds what only one rank has (a replay buffer's completions stay where they were drawn):
    # a checkpoint then keeps every rank's state_dict, and each rank restores its own
    rank_local: ClassVar[bool] = False
    # True when it sets each group's `predicted_rate` (its estimate of the prompt's pass rate before the draw): the
    # baseline of algo.advantage=spo
    predicts: ClassVar[bool] = False
    # True when it draws one answer a prompt (SPO): a group-relative rule would give every answer a zero advantage
    one_answer: ClassVar[bool] = False
    # False when its rounds have a size of its own (ar3po's round_size): sampler.group_size is then read by nothing
    # (the loss's unit weights scale by it, and their normaliser cancels it)
    reads_group_size: ClassVar[bool] = True
    # the highest reward it can count (SPO's tracker adds each reward as a success: above 1 its pass rates leave
    # [0, 1]); None: any
    reward_ceiling: ClassVar[float | None] = None

    cfg: Any  # the SamplerConfig (name, group_size and every sampler's block)
    stream: PromptStream
    extra_state: dict = field(default_factory=dict)

    @property
    def settings(self) -> Any:
        """This sampler's own block of the config (`sampler.<name>`)."""
        return getattr(self.cfg, self.name)

    @classmethod
    def check(cls, cfg: Any) -> None:
        """Raise ConfigError for settings that cannot work together with the shared keys (group_size)."""
        return None  # most samplers' keys stand on their own (SamplerSettings.check)

    @classmethod
    def advice(cls, cfg: Any) -> list[str]:
        """Warnings about valid settings that will not do what they seem to, for a config (the TrainConfig) that
        chose this sampler; never an error."""
        return []

    @classmethod
    def draw_bounds(cls, cfg: Any, prompts: int) -> tuple[int, int]:
        """The fewest and the most samples one step over `prompts` prompts can draw."""
        return prompts * cfg.group_size, prompts * cfg.group_size

    @abstractmethod
    def draw(self, draw_round: DrawRound, prompts: int) -> Draw:
        """Draw the groups of one step that trains on (up to) `prompts` prompts."""

    def observe(self, step: int, draw: Draw, trained: dict, behaviour: dict) -> None:
        """After the step's update: `trained` (id(group) -> grpo_lab.run.rows.Trained: each sample's advantage,
        the same on every rank) and `behaviour` (id(group) -> (G, T) log-probs of its samples under the policy
        that drew them, for this rank's groups whose every sample trained). Most samplers need neither."""
        return None

    def after_update(self, step: int, draw: Draw, logprobs: Callable[[Rollout], torch.Tensor]) -> None:
        """After `observe`: `logprobs(rollout)` gives (N, T) log-probs under the policy as the update left it (no
        gradient), for a sampler whose state follows how far the policy moved (SPO's trackers). Most need none."""
        return None

    @property
    def rng(self) -> np.random.Generator:
        """The sampler's own random source, seeded from the stream's seed; its state is saved with the rest."""
        if not hasattr(self, "_rng"):
            self._rng = np.random.default_rng([self.stream.seed % 2**32, 0x5A3])
            if "rng" in self.extra_state:
                self._rng.bit_generator.state = self.extra_state["rng"]
        return self._rng

    def state_dict(self) -> dict:
        if hasattr(self, "_rng"):
            self.extra_state["rng"] = self._rng.bit_generator.state
        return copy.deepcopy({"cursor": self.stream.cursor, **self.extra_state})

    def load_state_dict(self, state: dict) -> None:
        self.stream.cursor = state["cursor"]
        self.extra_state = copy.deepcopy({k: v for k, v in state.items() if k != "cursor"})
        if hasattr(self, "_rng"):
            del self._rng  # rebuilt from extra_state["rng"] on first use


def distinct_candidates(stream: PromptStream, size: int) -> tuple[list[Problem], int]:
    """The next `size` distinct prompts of the stream (a prompt met twice, across an epoch's end, is passed over
    the second time), and how many the stream gave; two passes of the pool meet every prompt."""
    candidates, seen, taken = [], set(), 0
    while len(candidates) < size and taken < 2 * len(stream.pool):
        (p,) = stream.take(1)
        taken += 1
        if p.prompt_id not in seen:
            seen.add(p.prompt_id)
            candidates.append(p)
    return candidates, taken


def use(groups: list[Group]) -> list[Group]:
    for g in groups:
        g.used = True
    return groups
