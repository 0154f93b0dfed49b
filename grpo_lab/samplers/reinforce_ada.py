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

import numpy as np

from grpo_lab.samplers.base import Draw, Group, Sampler


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
    def draw(self, draw_round, prompts: int) -> Draw:
        c = self.cfg
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
                done = len(correct) >= c.group_size and exit_rule_holds(
                    n_right, len(correct) - n_right, c.exit_rule, c.min_pos, c.min_neg)
                if not done and len(correct) < c.max_per_prompt:
                    still.append(i)
            active, rnd = still, rnd + 1
        for unit in history:
            train = balanced_selection(np.concatenate([g.correct for g in unit]), c.group_size)
            bounds = np.cumsum([0] + [len(g.rewards) for g in unit])
            for g, lo, hi in zip(unit, bounds[:-1], bounds[1:]):
                g.train = train[lo:hi]
                g.used = bool(g.train.any())
        return Draw(every, history)
