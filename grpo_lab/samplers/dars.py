"""DARS (Yang et al. 2025, "Depth-Breadth Synergy in RLVR: Unlocking LLM Reasoning Gains with Adaptive
Exploration", arXiv:2508.13755; code: yangzhch6/DARS, verl/trainer/ppo/ray_dars_trainer.py).

The paper's rule, as its code (`schedule_ET`, `schedule_HW`; its runs: N = 8, N_max = 32, ET): after N first
answers a prompt with accuracy acc < 0.5 gets more, so that hard prompts get as much advantage mass as the
easiest mixed ones; acc = 0 counts as 0.5 / N. With S = 2 acc (1 - acc):
  ET (equal treatment):      ceil((N/2 - N S) / S) = ceil(N / (4 acc (1 - acc)) - N) more;
  HW (hardness weighted):    ceil((2 (1 - acc) N/2 - N S) / S) = ceil(N / (2 acc) - N) more;
capped at N_max - N (N_max in all). The extra answers are one more round for the prompt; its advantages use
all its answers (the code pools them by prompt), and a prompt whose answers are still all alike is dropped.

Here: N is `sampler.group_size`; acc is the share right; the extra answers are a groups-table row of their own
(round 1), pooled with the first round into one training unit; the extra rounds of a step are drawn in one
rollout per distinct size. The code's loss weighs every answer alike (token mean), which is how the extra
answers add weight to hard prompts: run it with `algo.unit_weight=sample` (the default weighs a prompt's
pooled answers as one group of G).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings

SCHEDULES = ("et", "hw")


@dataclass
class DarsSettings(SamplerSettings):
    max_per_prompt: int = 32  # N_max: a prompt's answers in all, its first group_size included (the paper's 32)
    schedule: str = "et"  # et: equal treatment (the paper's main runs) | hw: hardness weighted

    def check(self, key: str) -> None:
        require(self.schedule in SCHEDULES, f"{key}.schedule", self.schedule,
                f"must be one of {', '.join(map(repr, SCHEDULES))}")


def extra_answers(acc: float, n: int, n_max: int, schedule: str = "et") -> int:
    """More answers for a prompt whose first n had accuracy acc: the code's schedule_ET / schedule_HW (std=False),
    in the code's order of operations."""
    if acc <= 1e-6:
        acc = 0.5 / n
    if acc >= 0.5:
        return 0
    s = 2 * acc * (1 - acc)
    peak = 0.5 * n
    current = n * s
    delta = (peak - current) if schedule == "et" else (2 * (1 - acc) * peak - current)
    delta /= s
    return min(math.ceil(delta), n_max - n)


class DarsSampler(Sampler):
    name = "dars"
    settings_type = DarsSettings

    @classmethod
    def check(cls, cfg) -> None:
        require(cfg.dars.max_per_prompt >= cfg.group_size, "sampler.dars.max_per_prompt", cfg.dars.max_per_prompt,
                f"must be >= sampler.group_size={cfg.group_size} (the first round draws group_size)")

    @classmethod
    def advice(cls, cfg) -> list[str]:
        if cfg.algo.unit_weight == "prompt":
            return ["sampler=dars with algo.unit_weight=prompt: a prompt's extra answers share one group's weight, so "
                    "hard prompts gain none (DARS's point); algo.unit_weight=sample weighs every answer alike, as its "
                    "code"]
        return []

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        return prompts * cfg.group_size, prompts * cfg.dars.max_per_prompt

    def draw(self, draw_round, prompts: int) -> Draw:
        own, n = self.settings, self.cfg.group_size
        first = draw_round(self.stream.take(prompts), 0)
        more = [extra_answers(float(g.correct.mean()), n, own.max_per_prompt, own.schedule) for g in first]
        units = [[g] for g in first]
        every = list(first)
        for size in dict.fromkeys(m for m in more if m > 0):  # one rollout per distinct size, in first-seen order
            which = [i for i, m in enumerate(more) if m == size]
            for i, g in zip(which, draw_round([first[i].problem for i in which], 1, size)):
                units[i].append(g)
                every.append(g)
        kept = []
        for unit in units:
            acc = float(np.concatenate([g.correct for g in unit]).mean())
            if 0 < acc < 1:  # the code's filter: a prompt whose answers are still all right or all wrong is dropped
                for g in unit:
                    g.used = True
                kept.append(unit)
        return Draw(every, kept)
