"""GRESO (Zheng et al. 2025, "Act Only When It Pays: Efficient Reinforcement Learning for LLM
Reasoning via Selective Rollouts", arXiv:2506.02177; code: Infini-AI-Lab/GRESO).

The paper's rule, as here: before sampling, a prompt whose last z visits were all tied the same way
is skipped with probability 1 - max(p^z, greso_min_keep) (its code: floor 0.01), p = p_easy after
all-correct visits and p_hard after all-wrong ones, so a skip costs no samples and every prompt keeps
a minimum chance to be re-measured. After each step p_easy (p_hard) moves down by `greso_step` when
the step's share of all-correct (all-wrong) groups is at or above its target (a third, resp. two
thirds, of `greso_target`) and up otherwise, within [greso_min_p, greso_max_p]. Prompts kept are
sampled and filtered as DAPO's dynamic sampling (the paper's base): tied groups are dropped and more
rounds drawn, up to `max_gen_rounds` (`max_rounds` when unset), until `prompts` untied groups fill the batch.

Here: the skip decisions use the sampler's own seeded generator, the streaks and both bases are its
state, and the prompts skipped are counted in the steps table (`skipped_prompts`). A round scans at
most one pass over the pool; a round that keeps nothing (all skipped) still counts as a round.
"""

from grpo_lab.config import gen_rounds
from grpo_lab.samplers.base import Draw, Sampler, use


def keep_probability(streak: int, base: float, floor: float) -> float:
    """Chance a prompt is sampled after `streak` consecutive tied visits of one kind: max(base^streak, floor)."""
    return max(base**streak, floor) if streak else 1.0


class GresoSampler(Sampler):
    def draw(self, draw_round, prompts: int) -> Draw:
        c, st = self.cfg, self.extra_state
        streaks = st.setdefault("streaks", {})  # prompt_id -> [all-correct streak, all-wrong streak]
        st.setdefault("p_easy", c.greso_p_easy)
        st.setdefault("p_hard", c.greso_p_hard)
        every, kept, skipped = [], [], 0
        rounds, key = gen_rounds(c)
        for _ in range(rounds):
            chosen = []
            for _ in range(len(self.stream.pool)):
                if len(chosen) == prompts:
                    break
                (p,) = self.stream.take(1)
                easy, hard = streaks.get(p.prompt_id, (0, 0))
                keep = min(keep_probability(easy, st["p_easy"], c.greso_min_keep),
                           keep_probability(hard, st["p_hard"], c.greso_min_keep))
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
                f"greso sampler: {rounds} generation rounds ({key}) found only {len(kept)} of "
                f"{prompts} untied groups ({skipped} prompts skipped); the prompts are too easy or too hard"))
        return Draw(every, [[g] for g in use(kept[:prompts])], skipped=skipped)

    def _adapt(self, groups) -> None:
        """Move each base toward its target share of tied groups (the code's +-step, clipped)."""
        c, st = self.cfg, self.extra_state
        if not groups:
            return
        easy = sum(g.tie and bool(g.correct.all()) for g in groups) / len(groups)
        hard = sum(g.tie and not g.correct.any() for g in groups) / len(groups)
        for key, share, target in (("p_easy", easy, c.greso_target / 3), ("p_hard", hard, c.greso_target * 2 / 3)):
            step = -c.greso_step if share >= target else c.greso_step
            st[key] = min(max(st[key] + step, c.greso_min_p), c.greso_max_p)
