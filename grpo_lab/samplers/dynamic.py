from grpo_lab.config import gen_rounds
from grpo_lab.samplers.base import Draw, Sampler, use


class DynamicSampler(Sampler):
    """DAPO's dynamic sampling: draw rounds of fresh prompts, drop tied groups, until the batch has
    `prompts` informative groups (extras beyond it are dropped too). After `max_gen_rounds` rounds
    (`max_rounds` when unset) without a full batch it reports exhaustion instead of looping or
    crashing: the drawn groups are still returned, so the tables stay whole."""

    def draw(self, draw_round, prompts: int) -> Draw:
        every, kept = [], []
        rounds, key = gen_rounds(self.cfg)
        for _ in range(rounds):
            fresh = draw_round(self.stream.take(prompts), 0)
            every += fresh
            kept += [g for g in fresh if not g.tie]
            if len(kept) >= prompts:
                return Draw(every, [[g] for g in use(kept[:prompts])])
        return Draw(every, [], exhausted=(
            f"dynamic sampler: {rounds} generation rounds ({key}) found only "
            f"{len(kept)} of {prompts} untied groups; the prompts are too easy or too hard for this model"))
