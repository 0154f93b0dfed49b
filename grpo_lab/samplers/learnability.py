"""Learnability sampling: draw the prompts whose groups are least likely to tie. The learnability arm of
marin-community/marin issue #8765 (Qwen3-0.6B, graded bins, arms differing only in which prompts are drawn; code:
MarinSkyRL skyrl-train/skyrl_train/curriculum.py, the `learnability` kind with `weighting=group-informative`); the
weight p(1 - p) it generalises is Sampling For Learnability's (Rutherford et al. 2024) and Foster & Foerster 2025's
("Learning to reason at the frontier of learnability").

The reference's rule, per difficulty bin: a pass rate p is drawn from each bin's Beta(prior_alpha + solved,
prior_beta + unsolved) over its decayed answer counts (Thompson), pushed through the group-informative curve
1 - p^G - (1 - p)^G (the chance a group of G does not tie: neither all right, p^G, nor all wrong, (1 - p)^G), and the
curve's values, normalised, floored at epsilon / bins and renormalised, are the bins' sampling probabilities. It also
keeps the same evidence per prompt (`RowStats`: counts decayed by `instance_decay` at each new visit, not per step),
which no rule of its own reads yet.

Here, per prompt (this sampler's point: the rule at the finest grain the reference records): each prompt's counts,
right answers and answers drawn, decay by `decay` (the reference's `instance_decay`) at each visit before the new
group's are added. A step takes a candidate set as MoPPS does (the next `candidates` x `prompts` prompts of the run's
prompt stream, capped at the pool's distinct prompts; a prompt met twice while filling it is passed over the second
time), estimates each candidate's p from its Beta(prior_alpha + right, prior_beta + wrong) (`estimate=thompson`: one
draw, the reference's; `mean`: the posterior mean, no randomness), weighs it by the curve (`curve=group_informative`,
the #8765 arm's; `pass_variance`: p(1 - p), the reference's default and SFL's), floors the weights as the reference
does (normalised, raised to epsilon / candidates, renormalised), and draws `prompts` distinct candidates without
replacement with probability proportional to the weights: one uniform number from the sampler's generator per pick,
taken against the cumulative weights of the candidates not yet picked (`weighted_picks`). The draws come in a fixed
order, the Thompson draws over the candidates in stream order, then one uniform a pick, so a run replays from its
tables and its seed. Groups are drawn in pick order; every one trains (ties included: DAPO's filter is another
arm, sampler=dynamic); candidates not picked cost no samples and are counted in the steps table (`skipped_prompts`).

A prompt never seen has no counts: its prior is Beta(prior_alpha, prior_beta), Beta(1, 1) by default (the
reference's flat prior), whose mean 1/2 sits at the curve's peak, so an unseen prompt is about as likely to be drawn as
the best seen one and every prompt is tried early; a prior at the seen prompts' mean would tie an unseen prompt's
chance to how the others fare (a pool that starts hard would starve its unseen prompts). Each drawn group records
its prompt's posterior mean before the draw (`predicted_rate`), whichever estimate weighed it. A step whose prompts
outnumber the pool's distinct prompts cannot draw that many distinct ones: the run stops there, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings, distinct_candidates, use

CURVES = ("group_informative", "pass_variance")
ESTIMATES = ("thompson", "mean")


@dataclass
class LearnabilitySettings(SamplerSettings):
    """The reference's defaults (curriculum.py's CurriculumConfig) where it has the key; `candidates` is MoPPS's."""

    candidates: int = 8  # candidate set as a multiple of prompts (no reference value: it weighs every bin; MoPPS's 8)
    prior_alpha: float = 1.0  # Beta prior of an unseen prompt's pass rate (reference prior_alpha 1.0: flat)
    prior_beta: float = 1.0  # (reference prior_beta 1.0)
    # how much of a prompt's counts survive each new visit (reference instance_decay 0.7: its per-prompt evidence
    # decays per visit, not per step, as a prompt is drawn far less often than a bin); 1 forgets nothing
    decay: float = 0.7
    epsilon: float = 0.05  # weight floor: each candidate keeps at least epsilon / candidates of the mass (reference)
    curve: str = "group_informative"  # group_informative: 1 - p^G - (1 - p)^G (the #8765 arm) | pass_variance: p(1-p)
    estimate: str = "thompson"  # thompson: p drawn from the posterior (the reference's) | mean: its mean

    def check(self, key: str) -> None:
        require(self.candidates >= 1, f"{key}.candidates", self.candidates,
                "must be >= 1 (a multiple of prompts_per_step; 1 draws every candidate)")
        for name in ("prior_alpha", "prior_beta"):
            require(getattr(self, name) > 0, f"{key}.{name}", getattr(self, name), "must be > 0 (a Beta parameter)")
        require(0 <= self.decay <= 1, f"{key}.decay", self.decay, "must lie in [0, 1]")
        require(0 <= self.epsilon <= 1, f"{key}.epsilon", self.epsilon, "must lie in [0, 1]")
        require(self.curve in CURVES, f"{key}.curve", self.curve, f"must be one of {', '.join(map(repr, CURVES))}")
        require(self.estimate in ESTIMATES, f"{key}.estimate", self.estimate,
                f"must be one of {', '.join(map(repr, ESTIMATES))}")


def learnability_weight(p, group_size: int, curve: str = "group_informative") -> np.ndarray:
    """1 - p^G - (1 - p)^G, the chance that a group of G answers, each right with probability p, does not tie
    (curve=group_informative); p(1 - p), one answer's reward variance (curve=pass_variance)."""
    p = np.asarray(p, dtype=np.float64)
    if curve == "pass_variance":
        return p * (1.0 - p)
    return 1.0 - p**group_size - (1.0 - p) ** group_size


def floored(weights, epsilon: float) -> np.ndarray:
    """The reference's floor (curriculum.py `floored_normalized`): normalise, raise each to epsilon / n, renormalise.
    All-zero weights (every p exactly 0 or 1) are uniform here (the reference divides by zero)."""
    w = np.asarray(weights, dtype=np.float64)
    total = w.sum()
    if not total > 0:
        return np.full(len(w), 1.0 / len(w))
    w = np.maximum(w / total, epsilon / len(w))
    return w / w.sum()


def weighted_picks(weights, keep: int, rng: np.random.Generator) -> list[int]:
    """`keep` distinct indices drawn one at a time with probability proportional to `weights` among those not yet
    drawn: one `rng.random()` a pick, against the remaining weights' running sum (uniform where those are all 0)."""
    w = np.array(weights, dtype=np.float64)
    picks: list[int] = []
    for _ in range(keep):
        if not w.sum() > 0:  # only zero weights left: uniform over the indices not yet drawn
            w = np.ones(len(w))
            w[picks] = 0.0
        cum = np.cumsum(w)  # a slot of weight 0 adds nothing, so the first running sum above u x total is never one
        i = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
        if i == len(w):  # u x total rounded up to the total: the last slot of positive weight
            i = int(np.flatnonzero(w > 0)[-1])
        picks.append(i)
        w[i] = 0.0
    return picks


class LearnabilitySampler(Sampler):
    name = "learnability"
    settings_type = LearnabilitySettings

    def draw(self, draw_round, prompts: int) -> Draw:
        c, size_g = self.settings, self.cfg.group_size
        counts = self.extra_state.setdefault("counts", {})  # prompt_id -> [right, drawn], decayed per visit
        size = min(c.candidates * prompts, len({p.prompt_id for p in self.stream.pool}))
        if size < prompts:
            return Draw([], [], exhausted=(
                f"learnability sampler: prompts_per_step={prompts} is more than the training pool's {size} distinct "
                "prompts; a step draws that many distinct prompts"))
        candidates, taken = distinct_candidates(self.stream, size)
        right, drawn = (np.array([counts.get(p.prompt_id, (0.0, 0.0))[k] for p in candidates], dtype=np.float64)
                        for k in (0, 1))
        a, b = c.prior_alpha + right, c.prior_beta + (drawn - right)
        p_hat = self.rng.beta(a, b) if c.estimate == "thompson" else a / (a + b)
        weights = floored(learnability_weight(p_hat, size_g, c.curve), c.epsilon)
        picks = weighted_picks(weights, prompts, self.rng)
        groups = draw_round([candidates[i] for i in picks], 0)
        for i, g in zip(picks, groups):
            g.predicted_rate = float(a[i] / (a[i] + b[i]))  # the posterior mean, whichever estimate weighed it
            counts[g.problem.prompt_id] = [float(c.decay * right[i] + int(g.correct.sum())),
                                           float(c.decay * drawn[i] + len(g.correct))]
        return Draw(groups, [[g] for g in use(groups)], skipped=taken - len(picks))
