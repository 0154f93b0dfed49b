"""What a step learns from its draw: the units' advantages (grpo_lab/train/advantages.py), this rank's training
rows in micro-batches, the update, and what every sample trained with, gathered from every rank for the tables
(and for a sampler that keeps what trained: the replay buffer)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from grpo_lab import distributed
from grpo_lab.advantage import rule as advantage_rule
from grpo_lab.advantage.ties import tied_units
from grpo_lab.config import TrainConfig
from grpo_lab.records import Draw, Group, Rollout, Trained
from grpo_lab.run.rows import unit_columns
from grpo_lab.train.advantages import unit_advantages
from grpo_lab.train.batching import training_units
from grpo_lab.train.microbatch import micro_batches
from grpo_lab.train.objective import sequence_weights
from grpo_lab.train.parallel import DataParallel
from grpo_lab.train.rollout_correction import COLUMNS as MISMATCH
from grpo_lab.train.update import TrainingRows, masked, update

LOSSES = ("loss", "pg_loss", "kl", "clip_frac", "grad_norm")
TIES = ("tied_norm_share", "kl_grad_tied", "kl_grad_untied")  # how tied units entered it (grpo_lab/advantage/ties.py)
NO_UPDATE = dict.fromkeys(LOSSES + TIES + MISMATCH, float("nan"))  # no sample entered an update: nothing measured
NO_WORK = dict(positions=0, passes=0, backward=False)


@dataclass
class Learned:
    # the steps table's loss and rollout-mismatch columns (NaN: no update), `informative` and `opt_steps`
    losses: dict
    trained: dict[int, Trained] = field(default_factory=dict)  # per group (by id) that trained: unit, advantages
    # per group of this rank whose every sample trained: its samples' log-probs under the policy that drew them (the
    # update's first pass), (G, T) like its rollout's old_logp. What a replayed group's ratio divides by
    behaviour: dict[int, torch.Tensor] = field(default_factory=dict)
    # what the update ran, over every rank: the training rows' positions (completion tokens, each prompt once a pass
    # prefills it), the policy passes, whether they ran a backward (grpo_lab/train/costs.py counts the cost)
    work: dict = field(default_factory=lambda: dict(NO_WORK))


def learn(model, ref, optimizer, draw: Draw, cfg: TrainConfig, pad_id: int, device, amp,
          par: DataParallel | None = None, probe: bool = False) -> Learned:
    """One update on `draw.units` (the same on every rank: samplers decide from global rounds); `amp` is the
    context every model pass runs in; `par` the data-parallel strategy (default: a full copy per rank); `probe`:
    measure the KL term's gradient from tied and untied units (algo.kl_grad_every)."""
    if not draw.units:
        return Learned(dict(NO_UPDATE, informative=0, opt_steps=0))
    a = cfg.algo
    units = [[_on_device(g, device) for g in u] for u in draw.units]  # a replayed group's samples wait on the CPU
    groups = [g for u in units for g in u]
    trains = np.concatenate([np.ones(len(g.rewards), bool) if g.train is None else g.train for g in groups])  # (P,)
    owner = np.concatenate([np.full(len(g.rewards), g.rank) for g in groups])  # (P,) the rank holding each sample
    adv = unit_advantages(units, a.advantage, std=a.std, eps=a.std_eps, device=device, algo=a,
                          max_reward=cfg.reward.accuracy + cfg.reward.format)  # (P,) every rank's samples
    rows = np.flatnonzero(trains)  # (N,) the training rows, in the pooled order
    mine = owner[rows] == distributed.rank()  # (N,) the training rows this rank holds
    pieces, _ = training_units([v for v in ([g for g in u if g.samples is not None] for u in units) if v], pad_id)
    if a.mask_truncated:
        pieces = [[masked(ro) for ro in unit] for unit in pieces]
    micro = micro_batches(pieces, pad_id, a.micro_batch_groups, a.micro_batch_tokens)
    rollouts = [ro for unit in pieces for ro in unit]  # each prefills its prompt once a pass
    positions = int(torch.stack([ro.prompt_mask.sum() + ro.lengths.sum() for ro in rollouts]).sum()) if rollouts else 0
    sizes = [n for u in units if (n := sum(g.n_trained for g in u))]  # samples that train, per unit
    weight = sequence_weights(sizes, cfg.sampler.group_size, a.unit_weight).to(device)  # (N,)
    take = torch.from_numpy(rows[mine]).to(device)  # this rank's rows, in the micro-batches' order (units, groups)
    reused = torch.from_numpy(adv.replayed[rows[mine]]).to(device)
    token_level = advantage_rule(a.advantage).token_level
    tied = tied_units(sizes, adv.advantages[torch.from_numpy(rows).to(device)].cpu().numpy(),
                      adv.direction[torch.from_numpy(rows).to(device)].cpu().numpy() if token_level else None)  # (N,)
    rank_rows = TrainingRows(adv.advantages[take], weight[torch.from_numpy(mine).to(device)],
                             direction=adv.direction[take] if token_level else None,
                             behaviour=reused if adv.replayed.any() else None,
                             tied=torch.from_numpy(tied[mine]).to(device))
    with amp:
        out = update(model, ref, optimizer, micro, rank_rows, cfg, par, pad_id, probe)
    used, positions = _gather(rows, owner, out["advantages"].float().cpu().numpy(), len(trains),
                              positions)  # (P,) NaN: not trained; every rank's positions
    entropy = None if out["entropy"] is None else _gather(rows, owner, out["entropy"].float().cpu().numpy(),
                                                          len(trains))[0]  # (P, 2)
    losses = {**{k: out[k] for k in (*LOSSES, *TIES, "informative", "opt_steps")}, **out["mismatch"]}
    return Learned(losses, unit_columns(units, used, entropy), _behaviour(groups, trains, owner, out["behaviour"]),
                   dict(positions=positions, passes=out["passes"], backward=out["backward"]))


def _gather(rows: np.ndarray, owner: np.ndarray, mine: np.ndarray, pooled: int, count: int = 0) -> tuple:
    """Every rank's per-row values (its training rows, in order) as one (P, ...) array, NaN where no row trained,
    and the sum over ranks of `count` (in the same gather)."""
    out = np.full((pooled, *mine.shape[1:]), np.nan, np.float32)
    total = 0
    for r, (values, n) in enumerate(distributed.gather_objects((mine, count))):
        out[rows[owner[rows] == r]] = values
        total += n
    return out, total


def _behaviour(groups: list[Group], trains: np.ndarray, owner: np.ndarray, first: torch.Tensor) -> dict:
    """The first pass's log-probs of each group of this rank whose every sample trained, (G, T) at its width."""
    out, row, start = {}, 0, 0
    for g in groups:
        n = len(g.rewards)
        k = int(trains[start:start + n].sum()) if owner[start] == distributed.rank() else 0
        if k == n and g.samples is not None:
            width = g.samples.completion_ids.shape[1]
            lp = first[row:row + n, :width]
            out[id(g)] = torch.nn.functional.pad(lp, (0, width - lp.shape[1])).detach()
        row, start = row + k, start + n
    return out


def _on_device(g: Group, device) -> Group:
    """The group with its samples on `device` (a replayed group's are kept on the CPU between steps)."""
    ro: Rollout | None = g.samples
    if ro is not None and g.reused:
        g.samples = dataclasses.replace(ro, **{f.name: getattr(ro, f.name).to(device) for f in dataclasses.fields(ro)
                                               if isinstance(getattr(ro, f.name), torch.Tensor)})
    return g
