"""One optimizer step's update: mu clipped updates with the k3 KL on a step's training rows, gradients
accumulated over micro-batches (and summed over ranks). The advantages come from grpo_lab/train/advantages.py;
RL-ZVP's per-token ones are shaped here, from the entropies of the first policy pass.

`update` is a loop over the mu updates; each concern is a helper: the batch's denominators and whether it learns
(`_plan`, a `BatchPlan`), the reference's pass, a micro-batch's first pass (`_first_pass`: what it fixes for the
step, a `FirstPass`), one update's accumulation (`_accumulate`, its named sums an `UpdateStats`), the loss, the
optimizer step, the KL-gradient probe (`KlProbe`) and the rollout mismatch (rollout_correction.Mismatch).

Tied units (`rows.tied`: every advantage 0) enter as grpo_lab/advantage/ties.py says: their tokens' KL term kept
or masked (algo.tied_kl), their rows counted in the denominator or not (algo.tied_norm). A batch whose every
advantage is 0 (all tied) still takes its mu optimizer steps under algo.tied_batch=step (DeepSeekMath's
objective, TRL, verl): on the beta x k3 KL's gradient, or with beta = 0 on a gradient exactly 0, where AdamW
still moves the weights by its moments and weight decay. Under `skip` it runs one pass without gradients and
takes none, AdamW's state untouched; under `zero` the same pass, then mu steps on a zero gradient.

The ratio's denominator is the first pass's log-probs (the policy before this step's first update is the
one that sampled; its own log-probs from this same pass make the first ratio exactly 1, where the sampler's
cached decode matches only up to kernel rounding), except for reused samples (`rows.behaviour`): theirs are
the log-probs of the earlier policy that sampled them, stored in their rollout's old_logp."""

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
from grpo_lab.records import Rollout
from grpo_lab.train.microbatch import MicroBatch
from grpo_lab.train.objective import LossStats, Normalisers, aggregate, grpo_loss, kl_k3, kl_on, loss_normalisers
from grpo_lab.train.parallel import DataParallel
from grpo_lab.train.rollout_correction import Mismatch, correction_weights, mismatch_sums


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


@dataclass
class BatchPlan:
    """What the whole batch, every rank's rows, decides before any pass."""

    norm: Normalisers  # the loss's denominators over every rank's rows, algo.tied_norm applied
    tied_norm_share: float  # tied units' share of the denominator that counts them (NaN: no training row)
    has_rows: bool  # some rank holds a training row
    can_learn: bool  # some row carries a signal: a nonzero advantage or a shaped direction
    always: bool  # algo.tied_batch=step on a batch with training rows: its mu steps whatever the signal

    @property
    def backward(self) -> bool:
        """Whether the passes run with gradients and a backward."""
        return self.can_learn or self.always


@dataclass
class FirstPass:
    """What a micro-batch's first policy pass fixes for every update of the step."""

    logp: torch.Tensor  # (n, T) detached: the policy before the step's first update, which sampled a fresh row
    old_logp: torch.Tensor  # (n, T) the ratio's denominator: `logp`, or a reused row's stored behaviour log-probs
    advantages: torch.Tensor  # (n,) the rows' advantages, or (n, T) a per-token rule's shaped ones
    entropy: torch.Tensor | None  # (n, 2) each row's mean and max token entropy (a per-token rule), else None
    correction: torch.Tensor | None  # (n, T) the rollout correction's weights; None under `none`


@dataclass
class UpdateStats:
    """One optimizer update's loss statistics, each micro-batch's share of the batch's summed (then over ranks),
    and the gradient's norm before clipping (NaN where the update took no optimizer step)."""

    loss: float = 0.0
    pg_loss: float = 0.0
    kl: float = 0.0
    clip_frac: float = 0.0
    grad_norm: float = float("nan")

    def add(self, st: LossStats) -> None:
        self.loss, self.pg_loss = self.loss + st.loss, self.pg_loss + st.pg_loss
        self.kl, self.clip_frac = self.kl + st.kl, self.clip_frac + st.clip_frac

    def over_ranks(self) -> None:
        """Every rank's share added: the whole batch's statistics."""
        sums = distributed.all_reduce_(torch.tensor([self.loss, self.pg_loss, self.kl, self.clip_frac],
                                                    dtype=torch.float64))
        self.loss, self.pg_loss, self.kl, self.clip_frac = sums.tolist()


@dataclass
class KlProbe:
    """algo.kl_grad_every's measure: the gradients of the beta x KL term, as it enters the loss, from tied rows and from
    untied ones (`_kl_gradients`), summed over the first update's micro-batches (whole parameters, never fsdp's)."""

    params: list[torch.nn.Parameter]  # the trained ones
    tied_grads: list[torch.Tensor]  # per parameter
    untied_grads: list[torch.Tensor]  # per parameter
    tied: torch.Tensor  # (n,) bool: the rows of tied units
    tied_carry: bool  # tied rows carry the KL term (algo.tied_kl=keep)

    @classmethod
    def of(cls, model, tied: torch.Tensor, tied_carry: bool) -> KlProbe:
        params = [p for p in model.parameters() if p.requires_grad]
        return cls(params, *([torch.zeros_like(p) for p in params] for _ in "tu"), tied, tied_carry)

    def add(self, logp: torch.Tensor, ref_logp: torch.Tensor, mb: MicroBatch, rows: TrainingRows, norm: Normalisers,
            cfg: TrainConfig) -> None:
        _kl_gradients([self.tied_grads, self.untied_grads], self.params, logp, ref_logp, mb.rollout.completion_mask,
                      self.tied[mb.rows], self.tied_carry, norm, rows.weight[mb.rows], cfg)

    def norms(self) -> list[float]:
        """[tied, untied]: each part summed over ranks (ddp) as the update's gradients are, then its norm."""
        return [float(torch.linalg.vector_norm(distributed.all_reduce_(torch.cat([g.flatten() for g in part]))))
                for part in (self.tied_grads, self.untied_grads)]


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

    Across processes `micro` holds this rank's share of the batch (possibly none): the normalisers and
    `informative` are summed over ranks, and so are the gradients after accumulation, before clipping,
    so every rank takes the step one process would take on the whole batch. `par`, the data-parallel strategy
    (default: a full copy per rank), pads the micro-batches with `pad_id` where every pass is a collective."""
    par = par or DataParallel()
    a = cfg.algo
    device = rows.weight.device
    plan = _plan(micro, rows, cfg)
    n_real, n_rows = len(micro), rows.weight.shape[0]
    micro, rows = par.pad(micro, rows, pad_id)  # fsdp: the same passes on every rank
    tied = rows.tied if rows.tied is not None else torch.zeros(n_rows, dtype=torch.bool, device=device)
    kl_rows = ~tied if a.tied_kl == "mask" else None  # (padding rows, fsdp's, tie nothing)
    probe = probe and kl_on(a.beta) and plan.backward  # measured where the passes run a backward
    kl_probe = KlProbe.of(model, tied, kl_rows is None) if probe else None
    ref_logp = _reference_logprobs(ref, micro, cfg, par) if kl_on(a.beta) else [None] * len(micro)
    first: list[FirstPass | None] = [None] * len(micro)  # each micro-batch's, from the first update's passes
    mismatch = Mismatch.none(device)  # of the fresh samples
    updates: list[UpdateStats] = []
    informative, opt_steps = 0, 0
    for _ in range(a.mu if plan.backward else 1):
        optimizer.zero_grad(set_to_none=True)
        stats = _accumulate(model, micro, rows, first, ref_logp, kl_rows, plan, cfg, mismatch,
                            None if updates else kl_probe)  # the probe, on the first update's graph
        if not updates:  # the first update: what each row's advantage came to, and how many carry a gradient
            per_row = torch.cat([_row_advantage(f.advantages, mb, rows) for f, mb in zip(first, micro)])[:n_rows] \
                if micro else rows.advantages
            informative = int(distributed.global_sum(int((per_row != 0).sum())))
        if plan.backward and (informative or plan.always):
            stats.grad_norm = _optimizer_step(model, optimizer, par, a.max_grad_norm)
            opt_steps += 1
        updates.append(stats)
        if not (informative or plan.always):
            break  # skip: a shaped tied unit whose every token came to 0 (one-token answers): nothing to learn
    if not opt_steps and a.tied_batch == "zero" and plan.has_rows:  # nothing learned, and zero steps anyway
        zero_gradient_steps(model, optimizer, a.mu)
        opt_steps, updates[-1].grad_norm = a.mu, 0.0
    par.after_passes(model)  # fsdp: a pass without backward leaves the root gathered
    figures = mismatch.figures()  # the step's one read of the mismatch on the host
    # a (mu, 5) array's mean over its first axis: the order numpy has always summed the updates' statistics in
    loss, pg, kl, clip, gn = np.mean([dataclasses.astuple(s) for s in updates], axis=0).tolist()
    behaviour, entropy = _first_pass_rows(first[:n_real], rows.direction is not None, device)
    kl_grad = kl_probe.norms() if kl_probe is not None else [float("nan")] * 2
    return dict(loss=loss, pg_loss=pg, kl=kl, clip_frac=clip, grad_norm=gn, informative=informative,
                tied_norm_share=plan.tied_norm_share, kl_grad_tied=kl_grad[0], kl_grad_untied=kl_grad[1],
                opt_steps=opt_steps, passes=len(updates), backward=plan.backward, advantages=per_row.detach(),
                behaviour=behaviour, entropy=entropy, mismatch=figures)


def _accumulate(model, micro: list[MicroBatch], rows: TrainingRows, first: list[FirstPass | None],
                ref_logp: list[torch.Tensor | None], kl_rows: torch.Tensor | None, plan: BatchPlan,
                cfg: TrainConfig, mismatch: Mismatch, probe: KlProbe | None) -> UpdateStats:
    """One update's passes over the micro-batches, their gradients accumulated (each micro-batch's loss is its share
    of the batch's). A micro-batch's first pass fills in `first` and adds its fresh samples to `mismatch`; `probe`
    adds the KL term's gradients. Returns the loss statistics summed over micro-batches and ranks."""
    stats = UpdateStats()
    for k, mb in enumerate(micro):
        with torch.set_grad_enabled(plan.backward):
            if first[k] is None:  # the first pass: the denominators, RL-ZVP's entropies, the mismatch
                logp, first[k], found = _first_pass(model, mb, rows, cfg)
                mismatch.add(found)
            else:
                logp = completion_logprobs(model, mb.rollout, cfg.rollout.temperature or 1.0,
                                           **_pass_options(cfg, policy=True))  # (n, T)
            loss, st = _loss(logp, first[k], mb, rows, ref_logp[k], kl_rows, plan.norm, cfg)
            if probe is not None:
                probe.add(logp, ref_logp[k], mb, rows, plan.norm, cfg)
            if plan.backward:  # (every pass's log-probs carry a graph: a zero advantage backs up zeros)
                loss.backward()
        stats.add(st)
    stats.over_ranks()
    return stats


def _plan(micro: list[MicroBatch], rows: TrainingRows, cfg: TrainConfig) -> BatchPlan:
    """The batch's denominators (over ranks) and whether it learns, decided once, before the passes."""
    a = cfg.algo
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
    if rows.direction is not None:
        signal = signal | (rows.direction != 0)
    counts = distributed.global_sum(torch.tensor([int(signal.sum()), rows.weight.shape[0]]))  # over ranks
    has_rows = bool(counts[1] > 0)
    return BatchPlan(norm, share, has_rows, can_learn=bool(counts[0] > 0), always=a.tied_batch == "step" and has_rows)


def _pass_options(cfg: TrainConfig, policy: bool) -> dict:
    """completion_logprobs' options for both models' passes; the policy's output layer also keeps its softmax for
    the backward under model.fast_math (within float rounding)."""
    options = dict(chunk=cfg.model.logprob_chunk, buckets=cfg.model.length_buckets)
    return dict(options, keep=cfg.model.fast_math) if policy else options


def _reference_logprobs(ref, micro: list[MicroBatch], cfg: TrainConfig, par: DataParallel) -> list[torch.Tensor]:
    """The frozen reference's log-probs (n, T) of each micro-batch, without gradients (LoRA: the base model, its
    adapters switched off)."""
    with torch.inference_mode(), adapters_off(ref) as reference:
        out = [completion_logprobs(reference, mb.rollout, cfg.rollout.temperature or 1.0,
                                   **_pass_options(cfg, policy=False)) for mb in micro]
    par.after_passes(ref)
    return out


def _first_pass(model, mb: MicroBatch, rows: TrainingRows,
                cfg: TrainConfig) -> tuple[torch.Tensor, FirstPass, torch.Tensor]:
    """A micro-batch's first policy pass: its log-probs (n, T), with their graph for the first update's loss; what
    they fix for the step (the ratio's denominator, a per-token rule's shaped advantages from their entropies, the
    rollout correction's weights); and the mismatch sums of its fresh samples (`mismatch_sums`)."""
    a = cfg.algo
    temp, options = cfg.rollout.temperature or 1.0, _pass_options(cfg, policy=True)
    mask = mb.rollout.completion_mask
    shaped = rows.direction is not None  # a per-token rule: entropies from this pass
    logp, ent = completion_logprobs(model, mb.rollout, temp, entropy=True, **options) if shaped \
        else (completion_logprobs(model, mb.rollout, temp, **options), None)
    behaviour = logp.detach()
    old_logp = behaviour if rows.behaviour is None else torch.where(rows.behaviour[mb.rows, None],
                                                                    mb.rollout.old_logp, behaviour)
    used = rows.advantages[mb.rows] if not shaped else advantage_rule(a.advantage).shape_tokens(
        rows.advantages[mb.rows], rows.direction[mb.rows], ent, mask, a)  # (n,) | (n, T)
    entropy = None if ent is None else _token_stats(ent, mask)
    weights, found = _rollout_correction(behaviour, mb, rows, a.rollout_correction, a.rollout_correction_cap)
    return logp, FirstPass(behaviour, old_logp, used, entropy, weights), found


def _loss(logp: torch.Tensor, first: FirstPass, mb: MicroBatch, rows: TrainingRows, ref_logp: torch.Tensor | None,
          kl_rows: torch.Tensor | None, norm: Normalisers, cfg: TrainConfig) -> tuple[torch.Tensor, LossStats]:
    """A micro-batch's share of the batch's loss (objective.grpo_loss) and its statistics."""
    a = cfg.algo
    return grpo_loss(logp, first.old_logp, first.advantages, mb.rollout.completion_mask, ref_logp=ref_logp,
                     beta=a.beta, eps_low=a.eps_low, eps_high=a.eps_high, agg=a.loss_agg,
                     max_len=cfg.rollout.max_new_tokens, seq_weight=rows.weight[mb.rows], norm=norm,
                     is_weight=first.correction, kl_rows=None if kl_rows is None else kl_rows[mb.rows])


def _optimizer_step(model, optimizer, par: DataParallel, max_grad_norm: float) -> float:
    """The accumulated gradients summed over ranks (ddp), clipped, stepped. Returns their norm before clipping."""
    par.reduce([p for p in model.parameters() if p.requires_grad])
    grad_norm = par.clip(list(model.parameters()), max_grad_norm)
    optimizer.step()
    return grad_norm


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


def _first_pass_rows(first: list[FirstPass], shaped: bool, device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """This rank's rows' behaviour log-probs (n, T), each micro-batch's padded to the widest, and under a per-token
    rule their entropies (n, 2), else None; a rank with no rows still answers (0, 2), so every rank takes part in the
    same gathers."""
    width = max((f.logp.shape[1] for f in first), default=0)
    behaviour = (torch.cat([torch.nn.functional.pad(f.logp, (0, width - f.logp.shape[1])) for f in first]) if first
                 else torch.zeros(0, 0, device=device))  # (n, T)
    if not shaped:
        return behaviour, None
    return behaviour, torch.cat([f.entropy for f in first]) if first else torch.zeros(0, 2, device=device)


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
