"""PODS (Xu et al. 2025, "Not All Rollouts are Useful: Down-Sampling Rollouts in LLM Reinforcement Learning",
arXiv:2504.13818; code: YixuanEvenXu/pods, trainer/maxvargrpo_trainer.py).

The paper's rule, as its code: draw n answers per prompt and train on the m of largest reward variance; the
advantages use the kept m only (its code: mean and sample std of the m, plus 1e-4: `algo.std=sample
algo.std_eps=1e-4`), and the other n - m get no gradient. The largest-variance m are the i highest rewards
and the m - i lowest for some i: its code sorts the rewards, tries the top m first, then i = 0, 1, ..., m - 1,
and keeps a candidate only when its sample variance is strictly larger. For binary rewards that is k right
answers with k as close to m/2 as the group allows, the rest wrong.

Here: m is `sampler.group_size`, n is `sampler.pods.n`. The group drawn is one groups-table row (group_size n,
n_trained m); its kept samples are both the ones that train (`Group.train`) and the unit's baseline
(`Group.baseline`), so `algo.advantage` applies to them alone. Among equal rewards the earliest are "highest"
(a stable sort; answers of one prompt are exchangeable).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings


@dataclass
class PodsSettings(SamplerSettings):
    # answers drawn per prompt, of which group_size train. The paper's 32 (for m = 8) costs four fixed steps of
    # samples per step; at an equal sample budget on the tiny model (CPU: sampling is no cheaper than training,
    # the paper's premise on GPUs) 16 buys most of the ties that can be bought (a level-3 prompt at p = 0.16
    # ties in 25% of groups of 8, 6% of 16, 0.4% of 32; level 4, p = 0.01: 92%, 85%, 72%) at half the steps
    n: int = 16

    def check(self, key: str) -> None:
        require(self.n >= 2, f"{key}.n", self.n, "must be >= 2")


def max_variance_subset(rewards: np.ndarray, m: int) -> np.ndarray:
    """Which m of the rewards (n,) have the largest sample variance, as PODS's code finds them: (n,) bool."""
    n = len(rewards)
    order = np.argsort(-np.asarray(rewards, np.float64), kind="stable")  # highest first; among equals the earliest
    values = np.asarray(rewards, np.float64)[order]
    best, best_var = order[:m], np.var(values[:m], ddof=1)  # the code's first candidate: the top m
    for i in range(m):  # then the i highest and the m - i lowest
        var = np.var(np.concatenate([values[:i], values[n - (m - i):]]), ddof=1)
        if var > best_var:
            best, best_var = np.concatenate([order[:i], order[n - (m - i):]]), var
    mask = np.zeros(n, bool)
    mask[best] = True
    return mask


class PodsSampler(Sampler):
    name = "pods"
    settings_type = PodsSettings

    @classmethod
    def check(cls, cfg) -> None:
        require(cfg.pods.n >= cfg.group_size, "sampler.pods.n", cfg.pods.n,
                f"must be >= sampler.group_size={cfg.group_size} (the group that trains is taken from the n drawn)")

    @classmethod
    def advice(cls, cfg) -> list[str]:
        if cfg.sampler.pods.n == cfg.sampler.group_size:
            return [f"sampler.pods.n={cfg.sampler.pods.n} equals sampler.group_size: every answer drawn trains, "
                    "which is sampler=fixed; PODS draws more than it trains"]
        return []

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        return prompts * cfg.pods.n, prompts * cfg.pods.n

    def draw(self, draw_round, prompts: int) -> Draw:
        groups = draw_round(self.stream.take(prompts), 0, self.settings.n)
        for g in groups:
            g.train = g.baseline = max_variance_subset(g.rewards, self.cfg.group_size)
            g.used = True
        return Draw(groups, [[g] for g in groups])
