"""Reinforce-Ada (Xiong et al. 2025, "Reinforce-Ada: An Adaptive Sampling Framework for Reinforce-Style
LLM Training", arXiv:2510.04996; code: RLHFlow/Reinforce-Ada).

The paper's rule, as here: every prompt of the step starts active; each round draws `round_size` more
answers for every active prompt (one batched rollout) and retires the prompts whose exit rule holds
(online successive elimination), up to `max_per_prompt` answers a prompt. Exit rules: *balanced*, at
least `min_pos` right and `min_neg` wrong answers (the paper's Reinforce-Ada-balance: half the final
group each); *positive*, at least one right answer (Reinforce-Ada-pos). The group that trains has a
fixed size, `group_size`, drawn from the prompt's answers with balance enforced (half right, half
wrong where there are enough, the rest from the other side), while the advantage baseline uses the
statistics of *all* the prompt's answers (the paper's global normalisation). A prompt that reaches its
cap without meeting its rule trains the same way (the paper's fallback); if it never mixed, its group
is tied and its gradient is zero.

Here: a prompt retires only once it also has `group_size` answers, so every trained group has exactly
`group_size` samples. Each round is a groups-table row (round k = the prompt's (k+1)-th round, size
`round_size`, the last round cut to the cap); all rows of a prompt form one training unit. Of each side,
the earliest answers are taken: answers of one prompt are exchangeable, so this is as good as random.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw, Group
from grpo_lab.samplers.base import Sampler, SamplerSettings


@dataclass
class ReinforceAdaSettings(SamplerSettings):
    round_size: int = 4  # samples per prompt a round
    exit_rule: str = "balanced"  # balanced: min_pos right and min_neg wrong | positive: one right
    min_pos: int = 4  # balanced: right answers to retire a prompt (the paper: half the group)
    min_neg: int = 4  # balanced: wrong answers to retire a prompt (the paper: half the group)
    max_per_prompt: int = 32  # a prompt's cap a step (the paper: 4 rounds of 8)

    def check(self, key: str) -> None:
        require(self.round_size >= 1, f"{key}.round_size", self.round_size, "must be >= 1")
        require(self.exit_rule in ("balanced", "positive"), f"{key}.exit_rule", self.exit_rule,
                "must be one of 'balanced', 'positive'")
        require(self.min_pos >= 1, f"{key}.min_pos", self.min_pos, "must be >= 1")
        require(self.min_neg >= 1, f"{key}.min_neg", self.min_neg, "must be >= 1")


def exit_rule_holds(n_right: int, n_wrong: int, rule: str, min_pos: int, min_neg: int) -> bool:
    """Whether a prompt with these answers has enough signal to stop sampling."""
    if rule == "positive":
        return n_right >= 1
    return n_right >= min_pos and n_wrong >= min_neg


def balanced_selection(correct: np.ndarray, size: int) -> np.ndarray:
    """Which of a prompt's answers train: (n,) bool with min(size, n) True, half right and half wrong
    where there are enough of each, the shortfall of one side filled from the other; earliest first."""
    right, wrong = np.flatnonzero(correct), np.flatnonzero(~correct)
    total = min(size, len(correct))
    take_right = min(total // 2, len(right))
    take_wrong = min(total - take_right, len(wrong))
    take_right = min(total - take_wrong, len(right))  # wrong answers ran short: more right ones
    mask = np.zeros(len(correct), bool)
    mask[right[:take_right]] = True
    mask[wrong[:take_wrong]] = True
    return mask


class ReinforceAdaSampler(Sampler):
    name = "reinforce_ada"
    settings_type = ReinforceAdaSettings

    @classmethod
    def check(cls, cfg) -> None:
        own, key = cfg.reinforce_ada, "sampler.reinforce_ada"
        require(own.max_per_prompt >= cfg.group_size, f"{key}.max_per_prompt", own.max_per_prompt,
                f"must be >= sampler.group_size={cfg.group_size} (the group that trains is drawn from its answers)")
        larger = "min_pos" if own.min_pos >= own.min_neg else "min_neg"  # the one to name
        require(own.exit_rule != "balanced" or own.min_pos + own.min_neg <= own.max_per_prompt, f"{key}.{larger}",
                getattr(own, larger), f"min_pos + min_neg must be <= {key}.max_per_prompt={own.max_per_prompt}")

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        own = cfg.reinforce_ada  # a prompt retires once it has group_size answers and its exit rule holds
        least = min(-(-cfg.group_size // own.round_size) * own.round_size, own.max_per_prompt)
        return prompts * least, prompts * own.max_per_prompt

    def draw(self, draw_round, prompts: int) -> Draw:
        c, group_size = self.settings, self.cfg.group_size
        problems = self.stream.take(prompts)
        history: list[list[Group]] = [[] for _ in problems]  # each prompt's rounds
        every: list[Group] = []
        active = list(range(len(problems)))
        rnd = 0
        while active:
            seen = sum(len(g.rewards) for g in history[active[0]])  # all active prompts have drawn alike
            size = min(c.round_size, c.max_per_prompt - seen)
            fresh = draw_round([problems[i] for i in active], rnd, size)
            every += fresh
            still = []
            for i, g in zip(active, fresh):
                history[i].append(g)
                correct = np.concatenate([h.correct for h in history[i]])
                n_right = int(correct.sum())
                done = len(correct) >= group_size and exit_rule_holds(
                    n_right, len(correct) - n_right, c.exit_rule, c.min_pos, c.min_neg)
                if not done and len(correct) < c.max_per_prompt:
                    still.append(i)
            active, rnd = still, rnd + 1
        for unit in history:
            train = balanced_selection(np.concatenate([g.correct for g in unit]), group_size)
            bounds = np.cumsum([0] + [len(g.rewards) for g in unit])
            for g, lo, hi in zip(unit, bounds[:-1], bounds[1:]):
                g.train = train[lo:hi]
                g.used = bool(g.train.any())
        return Draw(every, history)
