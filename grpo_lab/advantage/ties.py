"""What a tie is, and how a tied unit enters the update (grpo_lab/train/update.py reads these keys).

A group's rewards tie when their population std, in float64, is at most algo.std_eps (`reward_ties`: the one test the
groups table's `tie`, eq. 3's zero advantages and RL-ZVP's zero-variance groups all make); a group of one answer ties
with nothing.

A unit is tied for the loss when every advantage its training rows carry is 0 (and, under a per-token rule, no token
is shaped): its rewards tied under a rule that gives a tie nothing (eq. 3, Dr. GRPO; TRL's "zero-std group"), so the
policy gradient takes nothing from it. Three keys say what it still does, each defaulting to DeepSeekMath's objective
(grpo_lab/config/schema.py, AlgoConfig):

- algo.tied_kl: its tokens carry the beta x k3 KL term (keep), or not (mask);
- algo.tied_norm: its rows count in the loss's denominator (count), or not (drop);
- algo.tied_batch: a batch of tied units only takes its mu optimizer steps (step), takes none (skip: AdamW's state
  untouched), or takes them on a zero gradient (zero: no backward; AdamW's moments decay and move the weights).

`algo.kl_grad_every` measures what the first key decides: the norm of the KL term's gradient from tied units and
from untied ones, on a sample of steps.
"""

from __future__ import annotations

import numpy as np
import torch

from grpo_lab.errors import require

TIED_KL = ("keep", "mask")
TIED_NORM = ("count", "drop")
TIED_BATCHES = ("step", "skip", "zero")


def check_ties(algo, strategy: str) -> None:
    """The keys' values, in one line naming the key."""
    for key, allowed in (("tied_kl", TIED_KL), ("tied_norm", TIED_NORM), ("tied_batch", TIED_BATCHES)):
        value = getattr(algo, key)
        require(value in allowed, f"algo.{key}", value, f"must be one of {', '.join(map(repr, allowed))}")
    require(algo.kl_grad_every >= 0, "algo.kl_grad_every", algo.kl_grad_every, "must be >= 0 (0: never)")
    require(not algo.kl_grad_every or algo.beta != 0, "algo.kl_grad_every", algo.kl_grad_every,
            "measures the KL term's gradient, and algo.beta=0 has none: set it to 0")
    require(not algo.kl_grad_every or strategy != "fsdp", "algo.kl_grad_every", algo.kl_grad_every,
            "is measured on whole parameters: not under dist.strategy=fsdp (set it to 0)")


def reward_ties(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """(B,) bool: which groups of `rewards` [B, G] tie, their population std <= `eps` (algo.std_eps). In float64:
    equal float32 rewards (0.1 x 12, say) then have a std of exactly 0, not rounding noise over a small eps. A group
    of one answer (SPO's) has nothing to tie with: never a tie."""
    return (rewards.double().std(dim=-1, correction=0) <= eps) & (rewards.shape[-1] > 1)


def tied_units(unit_sizes: list[int], advantages: np.ndarray, direction: np.ndarray | None = None) -> np.ndarray:
    """(N,) bool over training rows in unit order (`unit_sizes` rows each): the rows of units whose every
    advantage is 0 and (per-token rules) whose every direction is 0."""
    signal = advantages != 0 if direction is None else (advantages != 0) | (direction != 0)
    unit = np.repeat(np.arange(len(unit_sizes)), unit_sizes)
    carries = np.zeros(len(unit_sizes), bool)
    np.logical_or.at(carries, unit, signal)
    return ~carries[unit]


def zero_gradient_steps(model, optimizer, n: int) -> None:
    """`n` optimizer steps on a gradient of exact zeros (algo.tied_batch=zero): AdamW's step count advances, its
    moments decay and still move the weights, as a trainer whose loss has no gradient does."""
    params = [p for p in model.parameters() if p.requires_grad]
    for _ in range(n):
        optimizer.zero_grad(set_to_none=True)
        for p in params:
            p.grad = torch.zeros_like(p)  # a None gradient would make AdamW pass the parameter over
        optimizer.step()
