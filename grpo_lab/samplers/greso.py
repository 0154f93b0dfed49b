"""GRESO (Zheng et al. 2025, "Act Only When It Pays: Efficient Reinforcement Learning for LLM
Reasoning via Selective Rollouts", arXiv:2506.02177; code: Infini-AI-Lab/GRESO).

The paper's rule, as here: before sampling, a prompt whose last z visits were all tied the same way
is skipped with probability 1 - max(p^z, min_keep) (its code: floor 0.01), p = p_easy after
all-correct visits and p_hard after all-wrong ones, so a skip costs no samples and every prompt keeps
a minimum chance to be re-measured. After each step p_easy (p_hard) moves down by `step` when
the step's share of all-correct (all-wrong) groups is at or above its target (a third, resp. two
thirds, of `target`) and up otherwise, within [min_p, max_p]. Prompts kept are
sampled and filtered as DAPO's dynamic sampling (the paper's base): tied groups are dropped and more
rounds drawn, up to `max_rounds`, until `prompts` untied groups fill the batch.

Here: the skip decisions use the sampler's own seeded generator, the streaks and both bases are its
state, and the prompts skipped are counted in the steps table (`skipped_prompts`). A round scans at
most one pass over the pool; a round that keeps nothing (all skipped) still counts as a round.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings, use


@dataclass
class GresoSettings(SamplerSettings):
    """Its code's defaults: p_easy = p_hard = 0.5, bounds 0.05..0.95, step 0.01, target 0.25."""

    p_easy: float = 0.5  # initial keep-probability base after all-correct visits (keep = base^streak)
    p_hard: float = 0.5  # initial keep-probability base after all-wrong visits
    min_p: float = 0.05  # lowest the adapted bases may go (the exploration they always keep)
    max_p: float = 0.95  # highest the adapted bases may go
    step: float = 0.01  # change of a base per step toward its target tie share
    target: float = 0.25  # target share of tied groups a step (a third all-correct, two thirds all-wrong)
    min_keep: float = 0.01  # a prompt is never skipped with probability above 1 - this
    max_rounds: int = 4  # generation rounds a step (DAPO's dynamic sampling after the skips); then the run stops

    def check(self, key: str) -> None:
        for name in ("p_easy", "p_hard", "min_p", "max_p", "target", "min_keep"):
            require(0 <= getattr(self, name) <= 1, f"{key}.{name}", getattr(self, name), "must lie in [0, 1]")
        require(self.min_p <= self.max_p, f"{key}.max_p", self.max_p, f"must be >= {key}.min_p")
        require(self.step >= 0, f"{key}.step", self.step, "must be >= 0")
        require(self.min_keep > 0, f"{key}.min_keep", self.min_keep,
                "must be > 0 (a prompt that can never be drawn again is never re-measured)")
        require(self.max_rounds >= 1, f"{key}.max_rounds", self.max_rounds, "must be >= 1")


def keep_probability(streak: int, base: float, floor: float) -> float:
    """Chance a prompt is sampled after `streak` consecutive tied visits of one kind: max(base^streak, floor)."""
    return max(base**streak, floor) if streak else 1.0


class GresoSampler(Sampler):
    name = "greso"
    settings_type = GresoSettings

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        return prompts * cfg.group_size, prompts * cfg.group_size * cfg.greso.max_rounds

    def draw(self, draw_round, prompts: int) -> Draw:
        c, st = self.settings, self.extra_state
        streaks = st.setdefault("streaks", {})  # prompt_id -> [all-correct streak, all-wrong streak]
        st.setdefault("p_easy", c.p_easy)
        st.setdefault("p_hard", c.p_hard)
        every, kept, skipped = [], [], 0
        rounds = c.max_rounds
        for _ in range(rounds):
            chosen = []
            for _ in range(len(self.stream.pool)):
                if len(chosen) == prompts:
                    break
                (p,) = self.stream.take(1)
                easy, hard = streaks.get(p.prompt_id, (0, 0))
                keep = min(keep_probability(easy, st["p_easy"], c.min_keep),
                           keep_probability(hard, st["p_hard"], c.min_keep))
                if keep < 1 and self.rng.random() >= keep:
                    skipped += 1
                else:
                    chosen.append(p)
            fresh = draw_round(chosen, 0) if chosen else []
            every += fresh
            for g in fresh:
                right = bool(g.correct.all())
                wrong = bool(not g.correct.any())
                easy, hard = streaks.get(g.problem.prompt_id, (0, 0))
                streaks[g.problem.prompt_id] = [easy + 1 if g.tie and right else 0, hard + 1 if g.tie and wrong else 0]
            kept += [g for g in fresh if not g.tie]
            if len(kept) >= prompts:
                break
        self._adapt(every)
        if len(kept) < prompts:
            return Draw(every, [], skipped=skipped, exhausted=(
                f"greso sampler: {rounds} generation rounds (sampler.greso.max_rounds) found only {len(kept)} of "
                f"{prompts} untied groups ({skipped} prompts skipped); the prompts are too easy or too hard"))
        return Draw(every, [[g] for g in use(kept[:prompts])], skipped=skipped)

    def _adapt(self, groups) -> None:
        """Move each base toward its target share of tied groups (the code's +-step, clipped)."""
        c, st = self.settings, self.extra_state
        if not groups:
            return
        easy = sum(g.tie and bool(g.correct.all()) for g in groups) / len(groups)
        hard = sum(g.tie and not g.correct.any() for g in groups) / len(groups)
        for key, share, target in (("p_easy", easy, c.target / 3), ("p_hard", hard, c.target * 2 / 3)):
            step = -c.step if share >= target else c.step
            st[key] = min(max(st[key] + step, c.min_p), c.max_p)
