"""Training batches from units of any size: a unit is one prompt's pooled samples (one advantage
baseline); only the samples a sampler marks as training enter the batch.

The rollout passes expand each prompt's cache to a whole group, so a batch's chunks must share one
size: units of unequal size are cut into chunks of their greatest common size (one prompt each). With
equal units (fixed groups) the batch is exactly the concatenation of the groups, as before.
"""

from __future__ import annotations

import dataclasses
from math import gcd

import numpy as np

from grpo_lab.rollout.generate import Rollout, concat_groups, join_rollouts, take_rows


def chunk_rows(ro: Rollout, size: int) -> list[Rollout]:
    """A one-prompt Rollout cut into consecutive chunks of `size` samples (size divides its samples);
    the chunks are views, the batch's concatenation copies once."""
    n = len(ro.texts)
    if size == n:
        return [ro]
    return [dataclasses.replace(
        ro, completion_ids=ro.completion_ids[i:i + size], completion_mask=ro.completion_mask[i:i + size],
        old_logp=ro.old_logp[i:i + size], texts=ro.texts[i:i + size], lengths=ro.lengths[i:i + size],
        truncated=ro.truncated[i:i + size], group_size=size) for i in range(0, n, size)]


def training_units(units: list[list], pad_id: int) -> tuple[list[list[Rollout]], np.ndarray]:
    """(per unit that trains: its training samples as one-prompt chunks of one common size, mask over the
    units' pooled samples of those that train).

    `units`: lists of samplers' Groups, each list one prompt. The mask is in pooled order (unit by unit,
    group by group), the order of `unit_advantages`, so `advantages[mask]` lines up with the chunks' rows.
    A unit that trains no sample only lends its rewards to nothing: it is left out.
    """
    pieces, masks = [], []
    for unit in units:
        mask = np.concatenate([np.ones(len(g.rewards), bool) if g.train is None else g.train for g in unit])
        masks.append(mask)
        if mask.all():
            pieces.append([g.samples for g in unit])
        elif mask.any():
            pieces.append([take_rows(join_rollouts([g.samples for g in unit], pad_id), np.flatnonzero(mask))])
    size = 0
    for p in pieces:
        for ro in p:
            size = gcd(size, len(ro.texts))
    if any(len(ro.texts) != size for p in pieces for ro in p):
        pieces = [[c for ro in p for c in chunk_rows(ro, size)] for p in pieces]
    return pieces, np.concatenate(masks)


def training_batch(units: list[list], pad_id: int) -> tuple[Rollout, np.ndarray]:
    """`training_units` as one batch: (the training samples, their mask over the pooled samples)."""
    pieces, mask = training_units(units, pad_id)
    return concat_groups([ro for p in pieces for ro in p], pad_id), mask
