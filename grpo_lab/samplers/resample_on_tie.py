from grpo_lab.samplers.base import Draw, Sampler, use


class ResampleOnTieSampler(Sampler):
    """After a tied group, draw another round of G for the same prompt, up to `max_rounds` rounds
    in all. `pool=all`: the update pools every round of the prompt into one baseline;
    `pool=last`: only the last round trains (earlier rounds are drawn, counted, unused)."""

    def draw(self, draw_round, prompts: int) -> Draw:
        first = draw_round(self.stream.take(prompts), 0)
        history = [[g] for g in first]  # per prompt, its rounds
        every = list(first)
        pending = [i for i, g in enumerate(first) if g.tie]
        for rnd in range(1, self.cfg.max_rounds):
            if not pending:
                break
            again = draw_round([first[i].problem for i in pending], rnd)
            every += again
            for i, g in zip(pending, again):
                history[i].append(g)
            pending = [i for i, g in zip(pending, again) if g.tie]
        units = [use(h if self.cfg.pool == "all" else h[-1:]) for h in history]
        return Draw(every, units)
