"""`grpo`: eq. 3 (DeepSeekMath), the group's mean and `algo.std` (population by default) as the baseline: a tied
unit learns nothing."""

from __future__ import annotations

import torch

from grpo_lab.advantage.base import AdvantageRule, no_direction
from grpo_lab.advantage.ties import reward_ties

STD_MODES = ("population", "sample", "none")  # algo.std


def group_advantages(rewards: torch.Tensor, *, std: str = "population", eps: float = 1e-8) -> torch.Tensor:
    """Group-relative advantages: rewards [B, G] -> advantages [B, G].

    - "population": (r - mean) / population std, the paper's eq. 3; a group whose std <= eps
      (a tie: ties.reward_ties) gets exactly 0 for every member, never eps-amplified noise.
    - "sample": (r - mean) / (Bessel std + eps), as TRL and verl compute it.
    - "none": r - mean, as Dr. GRPO does.
    """
    if std not in STD_MODES:
        raise ValueError(f"std={std!r} is not supported. Must be one of {', '.join(map(repr, STD_MODES))}.")
    # float64: equal float32 rewards (0.1 x 12, say) then give a std of exactly 0, not rounding noise
    # that a float32 division would blow up to advantages of +-1.
    r = rewards.double()
    centered = r - r.mean(dim=-1, keepdim=True)  # (B, G)
    if std == "none":
        adv = centered
    elif std == "sample":
        adv = centered / (r.std(dim=-1, correction=1, keepdim=True) + eps)
    else:
        sd = r.std(dim=-1, correction=0, keepdim=True)  # (B, 1)
        flat = reward_ties(r, eps)[:, None] | (r.shape[-1] < 2)  # a tie, or a lone answer (r - mean = 0 / std 0)
        adv = torch.where(flat, torch.zeros_like(centered), centered / sd.clamp_min(eps))
    return adv.to(rewards.dtype)


class GrpoRule(AdvantageRule):
    name = "grpo"

    @classmethod
    def advantages(cls, rewards: torch.Tensor, correct: torch.Tensor, *, std: str, eps: float,
                   max_reward: float) -> tuple[torch.Tensor, torch.Tensor]:
        return group_advantages(rewards, std=std, eps=eps), no_direction(rewards)
