"""One optimizer step's update: each training unit's advantages (eq. 3 over its pooled rewards), then mu
clipped updates with the k3 KL, gradients accumulated over micro-batches (and summed over ranks)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from grpo_lab import distributed
from grpo_lab.config import TrainConfig
from grpo_lab.model.logprobs import completion_logprobs
from grpo_lab.rollout.generate import Rollout
from grpo_lab.samplers import Group
from grpo_lab.train.microbatch import MicroBatch
from grpo_lab.train.objective import Normalisers, group_advantages, grpo_loss, loss_normalisers


def unit_advantages(units: list[list[Group]], std: str, eps: float, device) -> torch.Tensor:
    """Advantages (N,) for the training batch: each unit's pooled rewards are one baseline group."""
    sizes = {sum(len(g.rewards) for g in u) for u in units}
    pooled = [np.concatenate([g.rewards for g in u]) for u in units]
    if len(sizes) == 1:  # the common case, one batched call
        return group_advantages(torch.from_numpy(np.stack(pooled)).to(device), std=std, eps=eps).reshape(-1)
    return torch.cat([group_advantages(torch.from_numpy(r)[None].to(device), std=std, eps=eps)[0] for r in pooled])


def update(model, ref, optimizer, micro: list[MicroBatch], advantages: torch.Tensor, seq_weight: torch.Tensor,
           cfg: TrainConfig) -> dict:
    """mu optimizer updates on one batch of samples, each accumulating the gradients of its micro-batches;
    returns the step's loss statistics (means over mu) and `informative`, the samples whose advantage is
    nonzero. With none, the policy gradient is exactly zero: no optimizer step is taken (Adam would turn the
    KL term's near-zero gradient into a full-size step) and the statistics come from one pass without grad.

    Across processes `micro` holds this rank's share of the batch (possibly none): the normalisers and
    `informative` are summed over ranks, and so are the gradients after accumulation, before clipping,
    so every rank takes the step one process would take on the whole batch."""
    a = cfg.algo
    temp = cfg.rollout.temperature or 1.0
    chunk = cfg.model.logprob_chunk
    lengths = (torch.cat([mb.rollout.completion_mask.sum(-1) for mb in micro]) if micro
               else torch.zeros(0, dtype=torch.long, device=seq_weight.device))  # (N,) tokens in the loss
    norm = loss_normalisers(lengths, seq_weight, a.loss_agg, cfg.rollout.max_new_tokens)  # this rank's part
    device = seq_weight.device
    norm = Normalisers(loss=distributed.global_sum(norm.loss).to(device),  # the whole batch's, over ranks
                       tokens=distributed.global_sum(norm.tokens).to(device))
    informative = int(distributed.global_sum(int((advantages != 0).sum())))
    ref_logp = [None] * len(micro)
    if a.beta != 0:
        with torch.inference_mode():
            ref_logp = [completion_logprobs(ref, mb.rollout, temp, chunk=chunk) for mb in micro]
    stats = []
    old_logp = [None] * len(micro)
    for _ in range(a.mu if informative else 1):
        optimizer.zero_grad(set_to_none=True)
        sums = np.zeros(4)
        for k, mb in enumerate(micro):
            with torch.set_grad_enabled(informative > 0):
                logp = completion_logprobs(model, mb.rollout, temp, chunk=chunk)  # (n, T)
                if old_logp[k] is None:
                    # The policy before this step's first update is the one that sampled: its log-probs from
                    # this same pass make the first ratio exactly 1. The sampler's own (ro.old_logp) equal
                    # them only up to kernel rounding (cached decode vs full pass; visible in bf16).
                    old_logp[k] = logp.detach()
                loss, st = grpo_loss(logp, old_logp[k], advantages[mb.rows], mb.rollout.completion_mask,
                                     ref_logp=ref_logp[k], beta=a.beta, eps_low=a.eps_low, eps_high=a.eps_high,
                                     agg=a.loss_agg, max_len=cfg.rollout.max_new_tokens,
                                     seq_weight=seq_weight[mb.rows], norm=norm)
                if informative:
                    loss.backward()  # gradients accumulate: each micro-batch's loss is its share of the batch's
            sums += (st.loss, st.pg_loss, st.kl, st.clip_frac)
        sums = distributed.all_reduce_(torch.from_numpy(sums)).numpy()  # every rank's share of the batch's
        grad_norm = float("nan")  # no gradient taken
        if informative:
            distributed.sum_gradients([p for p in model.parameters() if p.requires_grad])  # one process: nothing
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm))
            optimizer.step()
        stats.append((*sums, grad_norm))
    loss, pg, kl, clip, gn = np.mean(stats, axis=0).tolist()
    return dict(loss=loss, pg_loss=pg, kl=kl, clip_frac=clip, grad_norm=gn, informative=informative)


def _masked(ro: Rollout) -> Rollout:
    """algo.mask_truncated: completions cut at max_new_tokens leave the loss (and its token counts); they
    still count in their group's baseline, as in DAPO's overlong filtering."""
    return dataclasses.replace(ro, completion_mask=ro.completion_mask & ~ro.truncated[:, None])
