from __future__ import annotations

from dataclasses import dataclass

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings, use


@dataclass
class BandSettings(SamplerSettings):
    lo: float = 0.1  # keep prompts whose last pass rate is >= this ...
    hi: float = 0.9  # ... and <= this (prompts never drawn are in)
    # chance a prompt outside the band is drawn anyway and re-measured; 0: never, so a prompt that tied once is
    # never seen again and the pool can run dry (within 60 steps in the samplers study, which sets 0.1)
    explore: float = 0.0

    def check(self, key: str) -> None:
        require(0 <= self.lo <= 1, f"{key}.lo", self.lo, "must lie in [0, 1]")
        require(self.lo <= self.hi <= 1, f"{key}.hi", self.hi, f"must lie in [{key}.lo, 1]")
        require(0 <= self.explore <= 1, f"{key}.explore", self.explore, "must lie in [0, 1]")


class BandSampler(Sampler):
    """Train only on prompts whose running pass rate (their last group's) lies in [lo, hi];
    prompts never drawn yet are in. Skipped prompts cost no samples. A prompt outside the band is
    still drawn with probability `explore` (the sampler's seeded generator), so a prompt that
    tied once can be re-measured as the policy moves (GRESO keeps such a floor for the same reason);
    at 0 it is never drawn again. Scans at most one pass over the pool per step; if nothing
    qualifies it reports exhaustion."""

    name = "band"
    settings_type = BandSettings

    def draw(self, draw_round, prompts: int) -> Draw:
        rates = self.extra_state.setdefault("pass_rate", {})
        lo, hi, explore = self.settings.lo, self.settings.hi, self.settings.explore
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
                f"band sampler: no prompt of the pool has a pass rate in [{lo}, {hi}] (sampler.band.lo, "
                f"sampler.band.hi) and sampler.band.explore={explore} drew none of the others"))
        groups = use(draw_round(chosen, 0))
        for g in groups:
            rates[g.problem.prompt_id] = float(g.correct.mean())
        return Draw(groups, [[g] for g in groups], skipped=scanned - len(chosen))
