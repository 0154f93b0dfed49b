from grpo_lab.samplers.base import Draw, Sampler, use


class BandSampler(Sampler):
    """Train only on prompts whose running pass rate (their last group's) lies in [band_lo, band_hi];
    prompts never drawn yet are in. Skipped prompts cost no samples. Scans at most one pass over
    the pool per step; if nothing qualifies it reports exhaustion."""

    def draw(self, draw_round, prompts: int) -> Draw:
        rates = self.extra_state.setdefault("pass_rate", {})
        chosen, scanned = [], 0
        while len(chosen) < prompts and scanned < len(self.stream.pool):
            (p,) = self.stream.take(1)
            scanned += 1
            rate = rates.get(p.prompt_id)
            fresh = all(p.prompt_id != c.prompt_id for c in chosen)  # a scan across epochs can meet it twice
            if fresh and (rate is None or self.cfg.band_lo <= rate <= self.cfg.band_hi):
                chosen.append(p)
        if not chosen:
            return Draw([], [], skipped=scanned, exhausted=(
                f"band sampler: no prompt of the pool has a pass rate in [{self.cfg.band_lo}, {self.cfg.band_hi}] "
                "(sampler.band_lo, sampler.band_hi)"))
        groups = use(draw_round(chosen, 0))
        for g in groups:
            rates[g.problem.prompt_id] = float(g.correct.mean())
        return Draw(groups, [[g] for g in groups], skipped=scanned - len(chosen))
