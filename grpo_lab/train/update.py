"""One optimizer step's update: mu clipped updates with the k3 KL on a step's training rows, gradients
accumulated over micro-batches (and summed over ranks). The advantages come from grpo_lab/train/advantages.py;
RL-ZVP's per-token ones are shaped here, from the entropies of the first policy pass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from grpo_lab import distributed
from grpo_lab.advantage import rule as advantage_rule
from grpo_lab.advantage.ties import zero_gradient_steps
from grpo_lab.config import TrainConfig
from grpo_lab.model.logprobs import completion_logprobs
from grpo_lab.model.lora import adapters_off
from grpo_lab.rollout.generate import Rollout
from grpo_lab.train.microbatch import MicroBatch
from grpo_lab.train.objective import Normalisers, aggregate, grpo_loss, kl_k3, loss_normalisers
from grpo_lab.train.parallel import DataParallel
from grpo_lab.train.rollout_correction import correction_weights, mismatch_stats, mismatch_sums


@dataclass
class TrainingRows:
    """This rank's training rows, in the micro-batches' order (units, then groups)."""

    advantages: torch.Tensor  # (n,) the rule's per-sample advantage, or a replayed sample's stored one
    weight: torch.Tensor  # (n,) each sequence's weight in the loss (objective.sequence_weights)
    direction: torch.Tensor | None = None  # (n,) int8 RL-ZVP's sign on a tied unit's samples; None: per-sample rule
    behaviour: torch.Tensor | None = None  # (n,) bool: reused samples, whose ratio divides by their stored old_logp
    tied: torch.Tensor | None = None  # (n,) bool: rows of tied units (grpo_lab/advantage/ties.py); None: none

    @classmethod
    def plain(cls, advantages: torch.Tensor) -> TrainingRows:
        return cls(advantages, torch.ones(advantages.shape[0], device=advantages.device))

    def padded(self, k: int) -> TrainingRows:
        """These rows and `k` more that train on nothing: advantage, weight and direction 0, not reused."""
        def more(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else torch.cat([x, torch.zeros(k, dtype=x.dtype, device=x.device)])

        return TrainingRows(more(self.advantages), more(self.weight), more(self.direction), more(self.behaviour),
                            more(self.tied))


def update(model, ref, optimizer, micro: list[MicroBatch], rows: TrainingRows, cfg: TrainConfig,
           par: DataParallel | None = None, pad_id: int = 0, probe: bool = False) -> dict:
    """mu optimizer updates on one batch of samples, each accumulating the gradients of its micro-batches.

    Returns the step's loss statistics (means over mu); `informative`, the samples whose advantage is nonzero
    (over ranks); and per row of this rank: `advantages` (what the update used: the sample's advantage, the
    mean over its tokens for RL-ZVP's shaped ones), `entropy` ((n, 2) mean and max over its tokens; RL-ZVP
    only, else None) and `behaviour` (its log-probs in the first pass, (n, T), zero at padding: the policy that
    sampled a fresh sample); `opt_steps`, the optimizer steps taken; `passes`, the policy passes run and
    `backward`, whether they ran a backward (what the steps table's cost columns count); `tied_norm_share`, the
    share tied units take of the denominator that counts them (what algo.tied_norm=drop leaves out); with `probe`,
    `kl_grad_tied` and `kl_grad_untied`, the norms of the KL term's gradient from each (else NaN).

    Tied units (`rows.tied`: every advantage 0) enter as grpo_lab/advantage/ties.py says: their tokens' KL term kept
    or masked (algo.tied_kl), their rows counted in the denominator or not (algo.tied_norm). A batch whose every
    advantage is 0 (all tied) still takes its mu optimizer steps under algo.tied_batch=step (DeepSeekMath's
    objective, TRL, verl): on the beta x k3 KL's gradient, or with beta = 0 on a gradient exactly 0, where AdamW
    still moves the weights by its moments and weight decay. Under `skip` it runs one pass without gradients and
    takes none, AdamW's state untouched; under `zero` the same pass, then mu steps on a zero gradient.

    The ratio's denominator is the first pass's log-probs (the policy before this step's first update is the
    one that sampled; its own log-probs from this same pass make the first ratio exactly 1, where the sampler's
    cached decode matches only up to kernel rounding), except for reused samples (`rows.behaviour`): theirs are
    the log-probs of the earlier policy that sampled them, stored in their rollout's old_logp.

    Across processes `micro` holds this rank's share of the batch (possibly none): the normalisers and
    `informative` are summed over ranks, and so are the gradients after accumulation, before clipping,
    so every rank takes the step one process would take on the whole batch. `par`, the data-parallel strategy
    (default: a full copy per rank), pads the micro-batches with `pad_id` where every pass is a collective."""
    par = par or DataParallel()
    a = cfg.algo
    temp = cfg.rollout.temperature or 1.0
    keep = cfg.model.fast_math  # the output layer keeps its softmax for the backward (within float rounding)
    passes = dict(chunk=cfg.model.logprob_chunk, buckets=cfg.model.length_buckets)  # both models' passes
    policy = dict(passes, keep=keep)
    shaped = rows.direction is not None  # a per-token rule: entropies from the first pass
    device = rows.weight.device
    lengths = (torch.cat([mb.rollout.completion_mask.sum(-1) for mb in micro]) if micro
               else torch.zeros(0, dtype=torch.long, device=device))  # (n,) tokens in the loss
    tied = rows.tied if rows.tied is not None else torch.zeros(rows.weight.shape[0], dtype=torch.bool, device=device)
    whole = loss_normalisers(lengths, rows.weight, a.loss_agg, cfg.rollout.max_new_tokens)  # this rank's part
    untied = loss_normalisers(lengths, rows.weight, a.loss_agg, cfg.rollout.max_new_tokens, counted=~tied)
    total, tokens, counted = distributed.global_sum(torch.stack([whole.loss, whole.tokens, untied.loss]))  # over ranks
    share = float(1 - counted / total) if total > 0 else float("nan")  # of the paper's denominator, tied units'
    drop = a.tied_norm == "drop" and counted > 0  # a batch of tied units only keeps the denominator that counts them
    norm = Normalisers(loss=(counted if drop else total).to(device), tokens=tokens.to(device))  # the whole batch's
    signal = rows.advantages != 0
    if shaped:
        signal = signal | (rows.direction != 0)
    counts = distributed.global_sum(torch.tensor([int(signal.sum()), rows.weight.shape[0]]))  # over ranks
    can_learn = bool(counts[0] > 0)  # rows that may carry a gradient
    always = a.tied_batch == "step" and bool(counts[1] > 0)  # a batch with training rows takes its mu steps
    probe = probe and a.beta != 0 and (can_learn or always)  # measured where the passes run a backward
    grad = can_learn or always  # the passes run with gradients and backward
    n_real, n_rows = len(micro), rows.weight.shape[0]
    micro, rows = par.pad(micro, rows, pad_id)  # fsdp: the same passes on every rank
    if rows.tied is not None:
        tied = rows.tied  # its padding rows (fsdp) tie nothing
    kl_rows = ~tied if a.tied_kl == "mask" else None
    ref_logp = [None] * len(micro)
    if a.beta != 0:
        with torch.inference_mode(), adapters_off(ref) as reference:  # LoRA: the base, adapters switched off
            ref_logp = [completion_logprobs(reference, mb.rollout, temp, **passes) for mb in micro]
        par.after_passes(ref)
    stats, informative = [], 0
    old_logp, first, used = [None] * len(micro), [None] * len(micro), [None] * len(micro)
    entropy, weights = [None] * len(micro), [None] * len(micro)
    mismatch = torch.zeros(10, dtype=torch.float64, device=device)  # mismatch_sums of the fresh samples, max |d| last
    opt_steps = 0
    params = [p for p in model.parameters() if p.requires_grad]
    kl_grads = [[torch.zeros_like(p) for p in params] for _ in "tu"] if probe else None  # tied, untied: summed here
    for _ in range(a.mu if grad else 1):
        optimizer.zero_grad(set_to_none=True)
        sums = np.zeros(4)
        for k, mb in enumerate(micro):
            mask = mb.rollout.completion_mask
            with torch.set_grad_enabled(grad):
                if first[k] is None:  # the first pass: the denominators, and RL-ZVP's entropies
                    logp, ent = completion_logprobs(model, mb.rollout, temp, entropy=True, **policy) if shaped \
                        else (completion_logprobs(model, mb.rollout, temp, **policy), None)
                    first[k] = logp.detach()
                    old_logp[k] = first[k] if rows.behaviour is None else torch.where(
                        rows.behaviour[mb.rows, None], mb.rollout.old_logp, first[k])
                    used[k] = rows.advantages[mb.rows] if not shaped else advantage_rule(a.advantage).shape_tokens(
                        rows.advantages[mb.rows], rows.direction[mb.rows], ent, mask, a)  # (n,) | (n, T)
                    entropy[k] = None if ent is None else _token_stats(ent, mask)
                    weights[k], found = _rollout_correction(first[k], mb, rows, a.rollout_correction,
                                                            a.rollout_correction_cap)
                    mismatch[:9] += found[:9]
                    mismatch[9] = torch.maximum(mismatch[9], found[9])
                else:
                    logp = completion_logprobs(model, mb.rollout, temp, **policy)  # (n, T)
                loss, st = grpo_loss(logp, old_logp[k], used[k], mask, ref_logp=ref_logp[k], beta=a.beta,
                                     eps_low=a.eps_low, eps_high=a.eps_high, agg=a.loss_agg,
                                     max_len=cfg.rollout.max_new_tokens, seq_weight=rows.weight[mb.rows], norm=norm,
                                     is_weight=weights[k], kl_rows=None if kl_rows is None else kl_rows[mb.rows])
                if kl_grads is not None and not stats:  # the probe, on the first update's graph
                    _kl_gradients(kl_grads, params, logp, ref_logp[k], mask, tied[mb.rows], kl_rows is None, norm,
                                  rows.weight[mb.rows], cfg)
                if grad:  # (every pass's log-probs carry a graph: a zero advantage backs up zeros)
                    loss.backward()  # gradients accumulate: each micro-batch's loss is its share of the batch's
            sums += (st.loss, st.pg_loss, st.kl, st.clip_frac)
        sums = distributed.all_reduce_(torch.from_numpy(sums)).numpy()  # every rank's share of the batch's
        if not stats:  # the first update: what each row's advantage came to, and how many carry a gradient
            per_row = torch.cat([_row_advantage(u, mb, rows) for u, mb in zip(used, micro)])[:n_rows] if micro \
                else rows.advantages
            informative = int(distributed.global_sum(int((per_row != 0).sum())))
        grad_norm = float("nan")  # no gradient taken
        if grad and (informative or always):
            par.reduce([p for p in model.parameters() if p.requires_grad])  # ddp: summed over ranks
            grad_norm = par.clip(list(model.parameters()), a.max_grad_norm)
            optimizer.step()
            opt_steps += 1
        stats.append((*sums, grad_norm))
        if not (informative or always):
            break  # skip: a shaped tied unit whose every token came to 0 (one-token answers): nothing to learn
    if not opt_steps and a.tied_batch == "zero" and counts[1] > 0:  # nothing learned, and zero steps anyway
        zero_gradient_steps(model, optimizer, a.mu)
        opt_steps, stats[-1] = a.mu, (*stats[-1][:4], 0.0)
    par.after_passes(model)  # fsdp: a pass without backward leaves the root gathered
    top = distributed.max_over_ranks(float(mismatch[9]))  # the step's one read of the figures on the host
    mismatch = distributed.all_reduce_(mismatch).cpu()
    loss, pg, kl, clip, gn = np.mean(stats, axis=0).tolist()
    first, entropy = first[:n_real], entropy[:n_real]  # the real micro-batches'
    width = max((f.shape[1] for f in first), default=0)
    behaviour = (torch.cat([torch.nn.functional.pad(f, (0, width - f.shape[1])) for f in first]) if first
                 else torch.zeros(0, 0, device=device))  # (n, T)
    if shaped:  # a rank with no rows still answers (n, 2): every rank then takes part in the same gathers
        entropy = torch.cat(entropy) if entropy else torch.zeros(0, 2, device=device)
    kl_grad = [float("nan")] * 2
    if kl_grads is not None:
        for j, part in enumerate(kl_grads):  # summed over ranks (ddp) as the update's gradients are, then its norm
            flat = distributed.all_reduce_(torch.cat([g.flatten() for g in part]))
            kl_grad[j] = float(torch.linalg.vector_norm(flat))
    return dict(loss=loss, pg_loss=pg, kl=kl, clip_frac=clip, grad_norm=gn, informative=informative,
                tied_norm_share=share, kl_grad_tied=kl_grad[0], kl_grad_untied=kl_grad[1],
                opt_steps=opt_steps, passes=len(stats), backward=grad, advantages=per_row.detach(),
                behaviour=behaviour, entropy=entropy if shaped else None, mismatch=mismatch_stats(mismatch, top))


def _kl_gradients(into: list[list[torch.Tensor]], params: list, logp: torch.Tensor, ref_logp: torch.Tensor,
                  mask: torch.Tensor, tied: torch.Tensor, tied_carry: bool, norm: Normalisers, weight: torch.Tensor,
                  cfg: TrainConfig) -> None:
    """Add a micro-batch's gradients of the beta x KL term, as it enters the loss, from its tied rows and from
    its untied ones to `into` ([tied, untied], each per parameter). The tied part is 0 where the term is masked.
    torch.autograd.grad leaves the parameters' .grad alone, and the graph is kept for the update's backward."""
    a = cfg.algo
    kl = a.beta * kl_k3(logp, ref_logp)
    for part, rows in zip(into, (tied if tied_carry else torch.zeros_like(tied), ~tied)):
        if not bool(rows.any()):
            continue
        term = aggregate(torch.where(rows[:, None], kl, 0.0), mask, a.loss_agg, cfg.rollout.max_new_tokens,
                         seq_weight=weight, denominator=norm.loss)
        for acc, g in zip(part, torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)):
            if g is not None:
                acc += g


def _rollout_correction(train_logp: torch.Tensor, mb: MicroBatch, rows: TrainingRows, mode: str, cap: float):
    """The correction's (n, T) weights for a micro-batch (None under mode none) and its mismatch sums, over the
    samples drawn at this step only: a reused sample's old_logp is the policy that drew it, not an engine's."""
    mask = mb.rollout.completion_mask
    if rows.behaviour is not None:
        mask = mask & ~rows.behaviour[mb.rows, None]
    weight = correction_weights(train_logp, mb.rollout.old_logp, mask, mode, cap)
    if weight is not None and rows.behaviour is not None:  # reused rows: weight 1 on their tokens
        reused = rows.behaviour[mb.rows, None] & mb.rollout.completion_mask
        weight = torch.where(reused, torch.ones_like(weight), weight)
    return weight, mismatch_sums(train_logp, mb.rollout.old_logp, mask, mode, cap)


def _row_advantage(used: torch.Tensor, mb: MicroBatch, rows: TrainingRows) -> torch.Tensor:
    """What each row's update used, one number a row (n,): the advantage itself, or the mean over the row's
    tokens of a shaped one (0 for a row with no token in the loss)."""
    if used.dim() == 1:
        return used
    mask = mb.rollout.completion_mask
    mean = (used * mask).sum(-1) / mask.sum(-1).clamp_min(1)  # (n,)
    return torch.where(rows.direction[mb.rows] != 0, mean, rows.advantages[mb.rows].to(mean.dtype))


def _token_stats(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(n, 2): each row's mean and max token entropy over its tokens in the loss (NaN for a row with none)."""
    m = mask.bool()
    count = m.sum(-1)
    mean = (entropy * m).sum(-1) / count.clamp_min(1)
    top = entropy.masked_fill(~m, float("-inf")).amax(-1)
    nan = torch.full_like(mean, float("nan"))
    return torch.stack([torch.where(count > 0, mean, nan), torch.where(count > 0, top, nan)], -1)


def masked(ro: Rollout) -> Rollout:
    """algo.mask_truncated: completions cut at max_new_tokens leave the loss (and its token counts); they
    still count in their group's baseline, as in DAPO's overlong filtering."""
    return dataclasses.replace(ro, completion_mask=ro.completion_mask & ~ro.truncated[:, None])
