"""Training batches from units of any size: a unit is one prompt's pooled samples (one advantage
baseline); only the samples a sampler marks as training enter the batch.

Each group keeps its own size: the batch's passes prefill each group's prompt once and expand its cache to the
group's rows (`Rollout.group_size` a tensor of counts where sizes differ). With equal units (fixed groups) the batch is
exactly the concatenation of the groups. (Cutting unequal groups into chunks of their greatest common size, as
this once did, prefilled a prompt once per chunk: with sizes 8 and 11, once per answer, ten times the memory
and time of a SmolLM2 step of DARS.)
"""

from __future__ import annotations

import numpy as np

from grpo_lab.records import Rollout
from grpo_lab.rollout.generate import concat_groups, join_rollouts, take_rows


def training_units(units: list[list], pad_id: int) -> tuple[list[list[Rollout]], np.ndarray]:
    """(per unit that trains: its training samples as one-prompt Rollouts, mask over the units' pooled samples of
    those that train).

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
    return pieces, np.concatenate(masks)


def training_batch(units: list[list], pad_id: int) -> tuple[Rollout, np.ndarray]:
    """`training_units` as one batch: (the training samples, their mask over the pooled samples)."""
    pieces, mask = training_units(units, pad_id)
    return concat_groups([ro for p in pieces for ro in p], pad_id), mask
