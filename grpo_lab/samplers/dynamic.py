from __future__ import annotations

from dataclasses import dataclass

from grpo_lab.errors import require
from grpo_lab.records import Draw, Group
from grpo_lab.samplers.base import Sampler, SamplerSettings, use

# tied: DAPO's filter, a group whose rewards are all equal goes (both kinds) | all_correct: NGRPO's script
# (filter_groups.strategy=all_correct), only a group whose every answer is right goes; an all-wrong one trains
DROPS = ("tied", "all_correct")
KEPT = {"tied": "untied groups", "all_correct": "groups not all correct"}  # what a step looks for, in words


@dataclass
class DynamicSettings(SamplerSettings):
    # generation rounds a step (DAPO's max_num_gen_batches); a step that has not filled its batch by then
    # stops the run, saying so (at 3, most jobs of the samplers study stopped early; it sets 8)
    max_rounds: int = 4
    drop: str = "tied"  # which groups are dropped and replaced by fresh prompts (DROPS)

    def check(self, key: str) -> None:
        require(self.max_rounds >= 1, f"{key}.max_rounds", self.max_rounds, "must be >= 1")
        require(self.drop in DROPS, f"{key}.drop", self.drop, f"must be one of {', '.join(map(repr, DROPS))}")


def dropped(group: Group, drop: str) -> bool:
    """Whether `drop` (DROPS) leaves `group` out of the batch."""
    return group.tie if drop == "tied" else bool(group.correct.all())


class DynamicSampler(Sampler):
    """DAPO's dynamic sampling: draw rounds of fresh prompts, drop tied groups (`drop=all_correct`: only the
    all-correct ones), until the batch has `prompts` kept groups (extras beyond it are dropped too). After
    `max_rounds` generation rounds without a full batch it reports exhaustion instead of looping or crashing:
    the drawn groups are still returned, so the tables stay whole."""

    name = "dynamic"
    settings_type = DynamicSettings

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        return prompts * cfg.group_size, prompts * cfg.group_size * cfg.dynamic.max_rounds

    def draw(self, draw_round, prompts: int) -> Draw:
        every, kept = [], []
        rounds = self.settings.max_rounds
        for _ in range(rounds):
            fresh = draw_round(self.stream.take(prompts), 0)
            every += fresh
            kept += [g for g in fresh if not dropped(g, self.settings.drop)]
            if len(kept) >= prompts:
                return Draw(every, [[g] for g in use(kept[:prompts])])
        return Draw(every, [], exhausted=(
            f"dynamic sampler: {rounds} generation rounds (sampler.dynamic.max_rounds) found only "
            f"{len(kept)} of {prompts} {KEPT[self.settings.drop]}; the prompts are too easy or too hard "
            "for this model"))
