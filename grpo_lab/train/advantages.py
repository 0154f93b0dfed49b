"""A step's advantages over its training units: each unit's pooled baseline samples are one group of the run's
advantage rule (`algo.advantage`, grpo_lab/advantage/), units of equal baseline size in one batched call; a
replayed group keeps the advantages it trained with."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from grpo_lab.advantage import rule as advantage_rule
from grpo_lab.records import Group


def rule_advantages(rule: str, rewards: torch.Tensor, correct: torch.Tensor, *, std: str = "population",
                    eps: float = 1e-8, max_reward: float = 1.0, algo=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages [B, G], token-level direction [B, G] int8, zero for rules without one) of groups of rewards; a
    rule with keys of its own reads them from `algo` (the run's AlgoConfig), its defaults where None."""
    kind = advantage_rule(rule)
    own = {} if kind.settings_type is None else {
        "settings": kind.settings_type() if algo is None else getattr(algo, rule)}
    return kind.advantages(rewards, correct, std=std, eps=eps, max_reward=max_reward, **own)


@dataclass
class StepAdvantages:
    """A step's advantages over its units' pooled samples (units in order, groups in order, P samples)."""

    advantages: torch.Tensor  # (P,) the rule's, 0 outside a unit's baseline; a replayed group's are the ones it had
    direction: torch.Tensor  # (P,) int8: RL-ZVP's sign where a tied unit is shaped token by token, else 0
    replayed: np.ndarray  # (P,) bool: samples of replayed groups (their ratio's denominator: their behaviour log-probs)


def unit_advantages(units: list[list[Group]], rule: str = "grpo", *, std: str = "population", eps: float = 1e-8,
                    max_reward: float = 1.0, device="cpu", algo=None) -> StepAdvantages:
    """Each unit's pooled baseline samples are one group of the rule (units of equal baseline size in one
    batched call); a replayed group keeps its stored advantages. `algo`: the run's AlgoConfig, for a rule's own
    keys."""
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
    if advantage_rule(rule).predicted:  # one baseline a prompt (its predicted rate), one scale for the whole step
        fresh = [k for idx in by_size.values() for k in idx]
        predicted = [np.concatenate([np.full(len(g.rewards), np.nan if g.predicted_rate is None else g.predicted_rate)
                                     for g in units[k]])[base[k]] for k in fresh]
        if fresh and np.isnan(np.concatenate(predicted)).any():
            raise ValueError(f"algo.advantage={rule} needs each group's predicted pass rate: this sampler sets none")
        a = advantage_rule(rule).step_advantages(np.concatenate([pooled[k][base[k]] for k in fresh]) if fresh
                                                 else np.zeros(0), np.concatenate(predicted) if fresh else np.zeros(0))
        for k, piece in zip(fresh, np.split(a, np.cumsum([len(p) for p in predicted])[:-1]) if fresh else []):
            adv[k][base[k]] = piece
        by_size = {}
    for idx in by_size.values():
        rewards = torch.from_numpy(np.stack([pooled[k][base[k]] for k in idx]))  # (B, n)
        correct = torch.from_numpy(np.stack([right[k][base[k]] for k in idx]))  # (B, n)
        a, d = rule_advantages(rule, rewards, correct, std=std, eps=eps, max_reward=max_reward, algo=algo)
        for row, k in enumerate(idx):
            adv[k][base[k]], direction[k][base[k]] = a[row].numpy(), d[row].numpy()
    # per group: a reused answer pooled with fresh ones (sampler=ar3po) divides by its own behaviour log-probs
    replayed = np.concatenate([np.full(len(g.rewards), g.reused) for u in units for g in u]) if units \
        else np.zeros(0, bool)

    def cat(parts: list[np.ndarray], dtype) -> torch.Tensor:
        return torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0, dtype)).to(device)

    return StepAdvantages(cat(adv, np.float32), cat(direction, np.int8), replayed)
