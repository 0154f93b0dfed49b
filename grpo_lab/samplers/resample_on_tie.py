from __future__ import annotations

from dataclasses import dataclass

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings, use


@dataclass
class ResampleOnTieSettings(SamplerSettings):
    max_rounds: int = 4  # rounds a prompt gets in all, the first included: a tied round is followed by another
    pool: str = "all"  # all: the update pools every round of a prompt into one baseline; last: the last round only

    def check(self, key: str) -> None:
        require(self.max_rounds >= 1, f"{key}.max_rounds", self.max_rounds, "must be >= 1")
        require(self.pool in ("all", "last"), f"{key}.pool", self.pool, "must be one of 'all', 'last'")


class ResampleOnTieSampler(Sampler):
    """After a tied group, draw another round of G for the same prompt, up to `max_rounds` rounds
    in all. `pool=all`: the update pools every round of the prompt into one baseline;
    `pool=last`: only the last round trains (earlier rounds are drawn, counted, unused)."""

    name = "resample_on_tie"
    settings_type = ResampleOnTieSettings

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        return prompts * cfg.group_size, prompts * cfg.group_size * cfg.resample_on_tie.max_rounds

    def draw(self, draw_round, prompts: int) -> Draw:
        own = self.settings
        first = draw_round(self.stream.take(prompts), 0)
        history = [[g] for g in first]  # per prompt, its rounds
        every = list(first)
        pending = [i for i, g in enumerate(first) if g.tie]
        for rnd in range(1, own.max_rounds):
            if not pending:
                break
            again = draw_round([first[i].problem for i in pending], rnd)
            every += again
            for i, g in zip(pending, again):
                history[i].append(g)
            pending = [i for i, g in zip(pending, again) if g.tie]
        units = [use(h if own.pool == "all" else h[-1:]) for h in history]
        return Draw(every, units)
