"""Advantage rules beside eq. 3 (`algo.advantage`): what each sample of a training unit learns from the unit's
rewards, tied units included. Each rule is one pure function, named as its paper names things.

- `grpo`: eq. 3, `objective.group_advantages` (a tied unit learns nothing).
- `ngrpo` (Nan et al. 2025, arXiv:2509.18851; its code, verl/trainer/ppo/core_algos.py): one virtual sample
  of the maximum reward joins every group's mean and Bessel std, A_i = (r_i - mu') / (sigma' + 1e-6). An
  all-wrong group of 8 gets -1/3 each, an all-right one 0, one right of eight +1.7638 / -0.5040.
- `rl_zvp` (Le et al. 2025, arXiv:2509.21880, sections 3.2-3.3): GRPO where the unit's rewards differ; in a
  zero-variance unit each token t of response i gets alpha * H_it when every answer is right and
  -alpha * (max_k H_ik - H_it) when none is (k over the response's own tokens), H the detached entropy of
  the policy's next-token distribution at the sampling temperature (the paper's is 1.0).

A step's advantages for its units (`unit_advantages`) are computed before the update from the rewards alone;
RL-ZVP's per-token part needs the entropies of the update's first policy pass, so a tied unit carries its
`direction` (+1 all right, -1 all wrong) and `rl_zvp_advantages` shapes it there (grpo_lab/train/update.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from grpo_lab.config import ADVANTAGE_RULES
from grpo_lab.samplers import Group
from grpo_lab.train.objective import _check, group_advantages


def ngrpo_advantages(rewards: torch.Tensor, *, max_reward: float = 1.0, virtual: int = 1,
                     eps: float = 1e-6) -> torch.Tensor:
    """NGRPO: rewards [B, G] -> advantages [B, G] against the mean and sample std of the G rewards plus
    `virtual` samples of `max_reward` (the official code: torch.std, divisor G + virtual - 1, plus eps)."""
    r = rewards.double()
    both = torch.cat([r, torch.full((r.shape[0], virtual), float(max_reward), dtype=r.dtype, device=r.device)], -1)
    mean = both.mean(-1, keepdim=True)  # (B, 1)
    std = both.std(-1, correction=1, keepdim=True)  # (B, 1)
    return ((r - mean) / (std + eps)).to(rewards.dtype)


def zvp_direction(rewards: torch.Tensor, correct: torch.Tensor, *, eps: float = 1e-8) -> torch.Tensor:
    """RL-ZVP's direction [B, G] int8: +1 for every sample of a zero-variance group whose answers are all right
    (a positive prompt), -1 where all are wrong (a negative prompt), 0 elsewhere (a group whose rewards differ,
    or a tie on a non-binary reward with mixed correctness, which the paper's binary rewards never make)."""
    tied = rewards.double().std(-1, correction=0, keepdim=True) <= eps  # (B, 1)
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


def rule_advantages(rule: str, rewards: torch.Tensor, correct: torch.Tensor, *, std: str = "population",
                    eps: float = 1e-8, max_reward: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages [B, G], RL-ZVP direction [B, G] int8, zero for the other rules) of groups of rewards."""
    _check("advantage", rule, ADVANTAGE_RULES)
    if rule == "ngrpo":
        adv = ngrpo_advantages(rewards, max_reward=max_reward)
    else:
        adv = group_advantages(rewards, std=std, eps=eps)
    direction = zvp_direction(rewards, correct, eps=eps) if rule == "rl_zvp" else torch.zeros_like(rewards, dtype=torch.int8)
    return adv, direction


@dataclass
class StepAdvantages:
    """A step's advantages over its units' pooled samples (units in order, groups in order, P samples)."""

    advantages: torch.Tensor  # (P,) the rule's, 0 outside a unit's baseline; a replayed group's are the ones it had
    direction: torch.Tensor  # (P,) int8: RL-ZVP's sign where a tied unit is shaped token by token, else 0
    replayed: np.ndarray  # (P,) bool: samples of replayed groups (their ratio's denominator: their behaviour log-probs)


def unit_advantages(units: list[list[Group]], rule: str = "grpo", *, std: str = "population", eps: float = 1e-8,
                    max_reward: float = 1.0, device="cpu") -> StepAdvantages:
    """Each unit's pooled baseline samples are one group of the rule (units of equal baseline size in one
    batched call); a replayed group keeps its stored advantages."""
    pooled = [np.concatenate([g.rewards for g in u]) for u in units]
    right = [np.concatenate([g.correct for g in u]) for u in units]
    base = [np.concatenate([np.ones(len(g.rewards), bool) if g.baseline is None else g.baseline for g in u])
            for u in units]  # which samples make each unit's baseline
    adv = [np.zeros(len(r), np.float32) for r in pooled]
    direction = [np.zeros(len(r), np.int8) for r in pooled]
    by_size: dict[int, list[int]] = defaultdict(list)
    for k, unit in enumerate(units):
        if unit[0].reused:  # a replayed group is a unit of its own
            adv[k] = unit[0].advantages.astype(np.float32)
        else:
            by_size[int(base[k].sum())].append(k)
    for idx in by_size.values():
        rewards = torch.from_numpy(np.stack([pooled[k][base[k]] for k in idx]))  # (B, n)
        correct = torch.from_numpy(np.stack([right[k][base[k]] for k in idx]))  # (B, n)
        a, d = rule_advantages(rule, rewards, correct, std=std, eps=eps, max_reward=max_reward)
        for row, k in enumerate(idx):
            adv[k][base[k]], direction[k][base[k]] = a[row].numpy(), d[row].numpy()
    replayed = np.concatenate([np.full(len(r), u[0].reused) for r, u in zip(pooled, units)]) if units else np.zeros(0, bool)
    cat = (lambda xs, dt: torch.from_numpy(np.concatenate(xs) if xs else np.zeros(0, dt)).to(device))
    return StepAdvantages(cat(adv, np.float32), cat(direction, np.int8), replayed)
