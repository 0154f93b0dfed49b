"""The GRPO objective as pure tensor functions (DeepSeekMath: the PPO-style loss; eq. 3, its advantages, is
grpo_lab/advantage/grpo.py).

Shapes: B prompts, G samples per prompt, N = B*G sequences, T completion tokens.
Every function here is differentiable where it should be and has no state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

AGG_MODES = ("sequence", "token", "constant")


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported. Must be one of {', '.join(map(repr, allowed))}.")


def kl_on(beta: float) -> bool:
    """Whether the loss carries the beta x k3 KL to the frozen reference, so that a reference is kept, passed over
    the training rows and counted in a step's cost: the one place `algo.beta = 0` is decided."""
    return beta != 0


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 (>= 0, unbiased)."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> torch.Tensor:
    """Per-token PPO loss -min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A), rho = exp(logp - old_logp).

    logp, old_logp: (N, T); advantages: (N,) or (N, T), broadcast over tokens.
    """
    if advantages.dim() == logp.dim() - 1:
        advantages = advantages.unsqueeze(-1)  # (N, 1)
    ratio = torch.exp(logp - old_logp)  # (N, T)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    return torch.maximum(pg_loss1, pg_loss2)


UNIT_WEIGHTS = ("prompt", "sample")


def sequence_weights(unit_sizes: list[int], group_size: int, mode: str = "prompt") -> torch.Tensor:
    """Each sequence's weight in the loss (N,), for training units of `unit_sizes` samples each.

    - "prompt": a unit (one prompt's pooled rounds) weighs as one group of `group_size`, whatever
      its rounds: each of its sequences weighs group_size / size. The paper averages per prompt.
    - "sample": every sequence weighs 1, so a prompt pooled over three rounds weighs 3x.
    Units of one group each (fixed groups, pool=last) weigh 1 per sequence either way.
    """
    _check("unit_weight", mode, UNIT_WEIGHTS)
    sizes = torch.tensor(unit_sizes, dtype=torch.float64)  # (U,)
    per_unit = group_size / sizes if mode == "prompt" else torch.ones_like(sizes)
    return per_unit.repeat_interleave(sizes.long()).float()  # (N,)


@dataclass
class Normalisers:
    """The loss's batch-wide denominators. Both are sums over sequences, so the parts of a batch
    (micro-batches, ranks) add theirs up: every part's loss is then its share of the whole batch's."""

    loss: torch.Tensor  # the aggregation's denominator (scalar)
    tokens: torch.Tensor  # unmasked tokens (scalar), for the KL and clip statistics


def loss_normalisers(lengths: torch.Tensor, seq_weight: torch.Tensor, mode: str, max_len: int,
                     counted: torch.Tensor | None = None) -> Normalisers:
    """Denominators of `aggregate` over sequences of `lengths` (N,) tokens with weights (N,):
    sequence: sum of weights; token: weighted token count; constant: sum of weights x max_len.
    `counted` (N,) bool: the rows the loss's denominator counts (algo.tied_norm=drop: all but tied units');
    None: every row. The token count, which the KL and clip statistics divide by, counts every row."""
    _check("loss_agg", mode, AGG_MODES)
    w, n = seq_weight.double(), lengths.double()
    tokens = n.sum()
    if counted is not None:
        w, n = w[counted], n[counted]
    denominator = w.sum() if mode == "sequence" else (w * n).sum() if mode == "token" else w.sum() * max_len
    return Normalisers(loss=denominator, tokens=tokens)


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    max_len: int | None = None,
    *,
    seq_weight: torch.Tensor | None = None,
    denominator: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss (N, T) under a 0/1 mask (N, T) to a scalar.

    - "sequence": mean over sequences of each sequence's token mean (the paper's 1/G sum 1/|o_i| sum).
    - "token": sum over all unmasked tokens / their count (DAPO): long answers weigh more.
    - "constant": sum / (N * max_len) (Dr. GRPO): no length normalisation at all.
    seq_weight (N,) weighs each sequence (`sequence_weights`; default 1 each). `denominator` is
    `loss_normalisers(...).loss` of the whole batch when this is one micro-batch of it (default:
    this batch's own), so the micro-batches' losses sum to the whole batch's.
    """
    _check("loss_agg", mode, AGG_MODES)
    mask = mask.to(per_token.dtype)
    per_seq = (per_token * mask).sum(-1)  # (N,)
    lengths = mask.sum(-1)  # (N,)
    if mode == "sequence":
        per_seq = per_seq / lengths.clamp_min(1)
    weight = torch.ones_like(per_seq) if seq_weight is None else seq_weight.to(per_seq.dtype)
    if denominator is None:
        denominator = loss_normalisers(lengths, weight, mode, max_len or per_token.shape[-1]).loss
    return (per_seq * weight).sum() / denominator.clamp_min(1e-12).to(per_seq.dtype)


@dataclass
class LossStats:
    """Detached statistics of one loss evaluation (plain floats, ready for the steps table)."""

    loss: float
    pg_loss: float
    kl: float
    clip_low: float  # fraction of tokens whose ratio was clipped below (A < 0)
    clip_high: float  # fraction of tokens whose ratio was clipped above (A > 0)

    @property
    def clip_frac(self) -> float:
        return self.clip_low + self.clip_high


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.04,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    agg: str = "sequence",
    max_len: int | None = None,
    seq_weight: torch.Tensor | None = None,
    norm: Normalisers | None = None,
    is_weight: torch.Tensor | None = None,
    kl_rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The GRPO loss: aggregate(clipped surrogate + beta * k3 KL). The KL term is skipped when beta == 0
    (its statistic is then NaN: nothing measured). `is_weight` (N, T): the rollout correction's weight on each
    token's surrogate (grpo_lab/train/rollout_correction.py); None leaves the loss untouched. `kl_rows` (N,)
    bool: the rows whose tokens carry the KL term (algo.tied_kl=mask: all but tied units'); None: every row.
    The `kl` statistic measures the policy's distance on every row's tokens either way.

    logp, old_logp, ref_logp, mask: (N, T); advantages, seq_weight: (N,). `norm`: the whole batch's
    `loss_normalisers` when this is a micro-batch (default: this batch's own); the loss and every
    statistic are then this micro-batch's share, so they sum over micro-batches to the batch's.
    """
    fmask = mask.to(logp.dtype)
    if norm is None:
        weight = torch.ones(logp.shape[0], device=logp.device) if seq_weight is None else seq_weight
        norm = loss_normalisers(fmask.sum(-1), weight, agg, max_len or logp.shape[-1])
    n_tokens = norm.tokens.clamp_min(1).to(logp.dtype)
    pg = clipped_surrogate(logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high)  # (N, T)
    if is_weight is not None:
        pg = pg * is_weight
    per_token = pg
    kl_mean = float("nan")  # beta == 0: no reference, no KL measured (0.0 would claim the policy never moved)
    if kl_on(beta):
        if ref_logp is None:
            raise ValueError("beta != 0 needs ref_logp (log-probs of the frozen reference model)")
        kl = kl_k3(logp, ref_logp)
        per_token = pg + beta * (kl if kl_rows is None else torch.where(kl_rows[:, None], kl, 0.0))  # exactly 0 there
        kl_mean = float(((kl * fmask).sum() / n_tokens).detach())
    loss = aggregate(per_token, mask, agg, max_len, seq_weight=seq_weight, denominator=norm.loss)
    with torch.no_grad():
        ratio = torch.exp(logp - old_logp)
        adv = advantages.unsqueeze(-1) if advantages.dim() == logp.dim() - 1 else advantages
        low = ((ratio < 1 - eps_low) & (adv < 0)).to(fmask.dtype)
        high = ((ratio > 1 + eps_high) & (adv > 0)).to(fmask.dtype)
        stats = LossStats(
            loss=float(loss),
            pg_loss=float(aggregate(pg, mask, agg, max_len, seq_weight=seq_weight, denominator=norm.loss)),
            kl=kl_mean,
            clip_low=float((low * fmask).sum() / n_tokens),
            clip_high=float((high * fmask).sum() / n_tokens),
        )
    return loss, stats
