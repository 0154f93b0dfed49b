"""`ngrpo` (Nan et al. 2025, arXiv:2509.18851; its code, verl/trainer/ppo/core_algos.py): one virtual sample of the
maximum reward joins every group's mean and Bessel std, A_i = (r_i - mu') / (sigma' + 1e-6). An all-wrong group
of 8 gets -1/3 each, an all-right one 0, one right of eight +1.7638 / -0.5040. `algo.std` is not used."""

from __future__ import annotations

import torch

from grpo_lab.advantage.base import AdvantageRule, no_direction


def ngrpo_advantages(rewards: torch.Tensor, *, max_reward: float = 1.0, virtual: int = 1,
                     eps: float = 1e-6) -> torch.Tensor:
    """NGRPO: rewards [B, G] -> advantages [B, G] against the mean and sample std of the G rewards plus
    `virtual` samples of `max_reward` (the official code: torch.std, divisor G + virtual - 1, plus eps)."""
    r = rewards.double()
    both = torch.cat([r, torch.full((r.shape[0], virtual), float(max_reward), dtype=r.dtype, device=r.device)], -1)
    mean = both.mean(-1, keepdim=True)  # (B, 1)
    std = both.std(-1, correction=1, keepdim=True)  # (B, 1)
    return ((r - mean) / (std + eps)).to(rewards.dtype)


class NgrpoRule(AdvantageRule):
    name = "ngrpo"
    reads_std = False  # it divides by its own std (Bessel's, over the group and its virtual right answer)

    @classmethod
    def advice(cls, cfg) -> list[str]:
        if cfg.algo.std == "population":
            return []
        return [f"algo.std={cfg.algo.std} is not used by algo.advantage=ngrpo: its advantages divide by its own "
                "std (Bessel's, over the group and its virtual right answer, + 1e-6)"]

    @classmethod
    def advantages(cls, rewards: torch.Tensor, correct: torch.Tensor, *, std: str, eps: float,
                   max_reward: float) -> tuple[torch.Tensor, torch.Tensor]:
        return ngrpo_advantages(rewards, max_reward=max_reward), no_direction(rewards)
