from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, use


class FixedSampler(Sampler):
    """G samples per prompt, one round: the paper's fixed groups. Tied groups still train (their
    policy gradient is zero; the KL term still acts)."""

    name = "fixed"

    def draw(self, draw_round, prompts: int) -> Draw:
        groups = use(draw_round(self.stream.take(prompts), 0))
        return Draw(groups, [[g] for g in groups])
