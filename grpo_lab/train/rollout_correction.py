"""The rollout/train mismatch: an inference engine samples with its own kernels (vLLM's, in bf16 perhaps), so the
log-probs it drew a token with differ from the trainer's own for the same weights. The trainer's first pass is the
ratio's denominator (grpo_lab/train/update.py), so the clipped ratio is exact; what the mismatch biases is the
sample itself: drawn from pi_rollout, treated as drawn from pi_train. `algo.rollout_correction` reweights each
fresh sample's policy-gradient term by r = pi_train / pi_rollout, capped (TRL's `vllm_importance_sampling_*`):

- token_truncate: min(r_t, cap) a token; token_mask: r_t, or 0 where r_t > cap;
- sequence_truncate: min(prod_t r_t, cap) for every token of the sequence; sequence_mask: that product, or 0.

As TRL does, the weight multiplies the clipped surrogate only (the KL to the reference is not a sampled
estimate of the rollout policy), and a masked token still counts in the loss's normaliser. Unlike TRL, only a
sample drawn at this step is reweighted: a replayed one's denominator is the policy that drew it
(sampler=replay), its mismatch measured when it was drawn. verl's `rollout_correction` offers the same four
(its `rollout_is` token/sequence with a threshold, `rollout_rs` for masking) and a geometric-mean variant not
built here. Every step measures the mismatch whatever the mode (`mismatch_sums`, the steps table's rollout_*).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from grpo_lab import distributed
from grpo_lab.config import ROLLOUT_CORRECTIONS as MODES  # noqa: F401 - the modes, named where they are checked
from grpo_lab.run.tables import MISMATCH as COLUMNS  # the steps table's columns `mismatch_stats` fills


def correction_weights(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, mode: str,
                       cap: float) -> torch.Tensor | None:
    """(N, T) weights on the policy-gradient term of each token (0 at padding), or None for mode none (the loss
    then is exactly the uncorrected one). train_logp, rollout_logp, mask: (N, T)."""
    if mode == "none":
        return None
    fmask = mask.to(train_logp.dtype)
    diff = (train_logp - rollout_logp).double() * fmask  # (N, T) log r_t, 0 at padding
    if mode.startswith("token"):
        ratio = diff.exp()
    else:  # one ratio a sequence, on each of its tokens
        ratio = diff.sum(-1, keepdim=True).exp().expand_as(diff)  # exp of a sum past ~700 is inf: capped below
    weight = ratio.clamp_max(cap) if mode.endswith("truncate") else ratio.masked_fill(ratio > cap, 0.0)
    return weight.to(train_logp.dtype) * fmask


def mismatch_sums(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, mode: str,
                  cap: float) -> torch.Tensor:
    """What the steps table's mismatch figures are made of, as float64 sums that add over micro-batches and ranks:
    (tokens, sum |d|, sum k3, sum r, sequences, units over the cap, units, sum w, sum w^2) and last the max |d|
    (d = log r_t = train - rollout; w = exp(sum_t d), a sequence's ratio). A w past float64's range makes the ESS
    NaN in `mismatch_stats`, never a wrong number. On the tensors' device, without a sync to the host: the update
    reads them once a step."""
    fmask = mask.double()
    d = (train_logp.double() - rollout_logp.double()) * fmask  # (N, T)
    rows = fmask.sum(-1) > 0  # (N,) sequences with tokens
    r = d.exp() * fmask
    k3 = (r - 1 - d) * fmask  # KL(rollout || train) per token: the sample is from the rollout, r = p_train / p_roll
    w = d.sum(-1).exp() * rows  # (N,) each sequence's ratio; 0 for a row without tokens
    if mode.startswith("sequence"):
        over, units = (w > cap).sum(), rows.sum()
    else:  # tokens (what token_truncate would cap, under none)
        over, units = ((r > cap) & mask.bool()).sum(), fmask.sum()
    top = d.abs().amax() if d.numel() else d.new_zeros(())
    return torch.stack([fmask.sum(), d.abs().sum(), k3.sum(), r.sum(), rows.sum().double(), over.double(),
                        units.double(), w.sum(), (w * w).sum(), top])


def mismatch_stats(sums: torch.Tensor, max_diff: float) -> dict[str, float]:
    """The steps table's rollout_* figures from summed `mismatch_sums` (its last entry replaced by the max over
    micro-batches and ranks, `max_diff`): mean and max |log r_t|, the mean k3 of KL(rollout || train), the mean
    token ratio, the sequences' effective sample size as a share ((sum w)^2 / (n sum w^2), 1: no mismatch), the
    share of the correction's units (tokens, or sequences for the sequence modes) whose ratio is over the cap.
    NaN where no fresh token was drawn this step."""
    tokens, absd, k3, r, seqs, over, units, w, w2 = sums[:9].tolist()
    if tokens == 0:
        return dict.fromkeys(COLUMNS, float("nan"))
    ess = w * w / (seqs * w2) if seqs and w2 > 0 and math.isfinite(w2) else float("nan")
    return dict(zip(COLUMNS, (absd / tokens, max_diff, k3 / tokens, r / tokens, ess, over / units if units else
                              float("nan"))))


@dataclass
class Mismatch:
    """A step's mismatch so far, on the samples' device until `figures` reads it: the sums of `mismatch_sums`
    added over micro-batches, its largest |d| kept apart (a max, not a sum)."""

    sums: torch.Tensor  # (9,) float64: tokens, sum |d|, sum k3, sum r, sequences, units over the cap, units, sum w, w^2
    max_diff: torch.Tensor  # () float64: the largest |d| so far

    @classmethod
    def none(cls, device) -> Mismatch:
        return cls(torch.zeros(9, dtype=torch.float64, device=device),
                   torch.zeros((), dtype=torch.float64, device=device))

    def add(self, found: torch.Tensor) -> None:
        """Add a micro-batch's `mismatch_sums`."""
        self.sums += found[:9]
        self.max_diff = torch.maximum(self.max_diff, found[9])

    def figures(self) -> dict[str, float]:
        """The steps table's rollout_* figures over every rank's fresh samples (`mismatch_stats`)."""
        top = distributed.max_over_ranks(float(self.max_diff))
        return mismatch_stats(distributed.all_reduce_(self.sums).cpu(), top)
