from grpo_lab.samplers.base import Draw, Sampler, use


class BandSampler(Sampler):
    """Train only on prompts whose running pass rate (their last group's) lies in [band_lo, band_hi];
    prompts never drawn yet are in. Skipped prompts cost no samples. A prompt outside the band is
    still drawn with probability `band_explore` (the sampler's seeded generator), so a prompt that
    tied once can be re-measured as the policy moves (GRESO keeps such a floor for the same reason);
    at 0 it is never drawn again. Scans at most one pass over the pool per step; if nothing
    qualifies it reports exhaustion."""

    def draw(self, draw_round, prompts: int) -> Draw:
        rates = self.extra_state.setdefault("pass_rate", {})
        lo, hi, explore = self.cfg.band_lo, self.cfg.band_hi, self.cfg.band_explore
        chosen, scanned = [], 0
        while len(chosen) < prompts and scanned < len(self.stream.pool):
            (p,) = self.stream.take(1)
            scanned += 1
            rate = rates.get(p.prompt_id)
            if any(p.prompt_id == c.prompt_id for c in chosen):  # a scan across epochs can meet it twice
                continue
            if rate is None or lo <= rate <= hi or (explore > 0 and self.rng.random() < explore):
                chosen.append(p)
        if not chosen:
            return Draw([], [], skipped=scanned, exhausted=(
                f"band sampler: no prompt of the pool has a pass rate in [{lo}, {hi}] (sampler.band_lo, "
                f"sampler.band_hi) and sampler.band_explore={explore} drew none of the others"))
        groups = use(draw_round(chosen, 0))
        for g in groups:
            rates[g.problem.prompt_id] = float(g.correct.mean())
        return Draw(groups, [[g] for g in groups], skipped=scanned - len(chosen))
