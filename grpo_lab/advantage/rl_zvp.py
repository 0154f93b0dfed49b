"""`rl_zvp` (Le et al. 2025, arXiv:2509.21880, sections 3.2-3.3): GRPO where the unit's rewards differ; in a
zero-variance unit each token t of response i gets alpha * H_it when every answer is right and
-alpha * (max_k H_ik - H_it) when none is (k over the response's own tokens), H the detached entropy of the
policy's next-token distribution at the sampling temperature (the paper's is 1.0). The advantages are known before
the update from the rewards alone, but the token part needs the entropies of the update's first policy pass: a
tied unit carries its `direction` there (grpo_lab/train/update.py)."""

from __future__ import annotations

import torch

from grpo_lab.advantage.base import AdvantageRule
from grpo_lab.advantage.grpo import group_advantages
from grpo_lab.advantage.ties import reward_ties
from grpo_lab.errors import require

MAX_ALPHA = 1.0  # algo.zvp_alpha's largest value


def zvp_direction(rewards: torch.Tensor, correct: torch.Tensor, *, eps: float = 1e-8) -> torch.Tensor:
    """RL-ZVP's direction [B, G] int8: +1 for every sample of a zero-variance group whose answers are all right
    (a positive prompt), -1 where all are wrong (a negative prompt), 0 elsewhere (a group whose rewards differ,
    or a tie on a non-binary reward with mixed correctness, which the paper's binary rewards never make). Zero
    variance is a tie (ties.reward_ties): a group of one answer is none."""
    tied = reward_ties(rewards, eps)[:, None]  # (B, 1)
    right, wrong = tied & correct.all(-1, keepdim=True), tied & (~correct).all(-1, keepdim=True)  # (B, 1)
    return (right.to(torch.int8) - wrong.to(torch.int8)).expand_as(rewards).contiguous()


def rl_zvp_advantages(advantages: torch.Tensor, direction: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor,
                      alpha: float) -> torch.Tensor:
    """RL-ZVP's token advantages (N, T): GRPO's `advantages` (N,) on every token where direction is 0; alpha * H
    where it is +1; -alpha * (max over the response's tokens of H - H) where it is -1. `entropy` (N, T) is
    treated as a constant; `mask` (N, T) marks the response's tokens (0 elsewhere)."""
    h = entropy.detach().float() * mask  # (N, T)
    top = h.masked_fill(~mask.bool(), float("-inf")).amax(-1, keepdim=True).clamp_min(0)  # (N, 1) 0 for no tokens
    d = direction.to(h.device)[:, None]  # (N, 1)
    shaped = torch.where(d > 0, alpha * h, -alpha * (top - h))  # (N, T)
    return torch.where(d != 0, shaped, advantages.to(h.dtype)[:, None].expand_as(h)) * mask


class RlZvpRule(AdvantageRule):
    name = "rl_zvp"
    keys = ("algo.zvp_alpha",)
    token_level = True

    @classmethod
    def check(cls, algo) -> None:
        require(0 < algo.zvp_alpha <= MAX_ALPHA, "algo.zvp_alpha", algo.zvp_alpha,
                f"must be in (0, {MAX_ALPHA:g}]: RL-ZVP tested 0.05-0.3; a tied token's advantage is alpha x its "
                "entropy (nats), which at 1 already matches a scored answer's, so past it ties outweigh the rewards")

    @classmethod
    def advantages(cls, rewards: torch.Tensor, correct: torch.Tensor, *, std: str, eps: float,
                   max_reward: float) -> tuple[torch.Tensor, torch.Tensor]:
        return group_advantages(rewards, std=std, eps=eps), zvp_direction(rewards, correct, eps=eps)

    @classmethod
    def shape_tokens(cls, advantages: torch.Tensor, direction: torch.Tensor, entropy: torch.Tensor,
                     mask: torch.Tensor, algo) -> torch.Tensor:
        return rl_zvp_advantages(advantages, direction, entropy, mask, algo.zvp_alpha)
