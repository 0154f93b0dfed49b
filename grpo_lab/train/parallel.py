"""The data-parallel strategy (dist.strategy): what differs between a full copy per rank (ddp) and FSDP2 shards
(fsdp), as one small interface the trainer and the update call at fixed points. Everything else (samplers, rounds,
reward gathers, budgets, normalisers) is global already, and the same under both.

| point          | ddp                               | fsdp                                                        |
|----------------|-----------------------------------|-------------------------------------------------------------|
| prepare        | nothing (a full copy per rank)    | policy and reference sharded (each its own shard set)       |
| rollout        | nothing                           | the full weights gathered once for the whole block          |
| pad            | nothing                           | micro-batches padded to the most over ranks: same passes    |
| reduce         | gradients summed in one all-reduce | nothing: FSDP's reduce-scatter summed them                 |
| clip           | clip_grad_norm_                   | the global norm of the sharded gradients                    |
| after_passes   | nothing                           | gathered units freed (a pass without backward keeps them)   |
"""

from __future__ import annotations

import contextlib
import logging

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

from grpo_lab import distributed
from grpo_lab.model import sharding
from grpo_lab.records import Rollout
from grpo_lab.train.microbatch import MicroBatch

log = logging.getLogger(__name__)


class DataParallel:
    """dist.strategy=ddp, and one process whatever the strategy."""

    name = "ddp"

    def prepare(self, model, ref):
        """The policy and reference as the passes use them (both hold rank 0's weights already)."""
        return model, ref

    def rollout(self, model) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def pad(self, micro: list[MicroBatch], rows, pad_id: int):
        return micro, rows

    def reduce(self, params: list[torch.nn.Parameter]) -> None:
        distributed.sum_gradients(params)  # one process: nothing

    def clip(self, params: list[torch.nn.Parameter], max_norm: float) -> float:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    def after_passes(self, *models) -> None:
        pass


class FullyShardedDataParallel(DataParallel):
    """dist.strategy=fsdp under torchrun: parameters, gradients, AdamW state and the reference in shards."""

    name = "fsdp"

    def __init__(self, device: torch.device, param_dtype: torch.dtype | None = None):
        self.device = device
        # under bf16 autocast the gathered weights travel and compute in bf16; shards and gradient sums stay fp32
        self.mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)

    def prepare(self, model, ref):
        mesh = distributed.mesh(self.device.type)
        return sharding.shard(model, mesh, self.mp), None if ref is None else sharding.shard(ref, mesh)

    def rollout(self, model) -> contextlib.AbstractContextManager:
        return sharding.gathered(model)

    def pad(self, micro: list[MicroBatch], rows, pad_id: int):
        """Every sharded pass is a collective: each rank runs as many micro-batches as the rank with the most.
        A padding micro-batch is one row whose mask is empty and whose training row (advantage, weight) is 0:
        its loss and statistics are exactly 0, and it runs every hook."""
        missing = distributed.max_over_ranks(len(micro)) - len(micro)
        if not missing:
            return micro, rows
        n = rows.weight.shape[0]
        device = rows.weight.device
        empty = [MicroBatch(_empty_rollout(pad_id, device), slice(n + i, n + i + 1)) for i in range(missing)]
        return micro + empty, rows.padded(missing)

    def reduce(self, params: list[torch.nn.Parameter]) -> None:
        pass

    def clip(self, params: list[torch.nn.Parameter], max_norm: float) -> float:
        """Clipped by the global norm (torchtitan's way): the norm of DTensor gradients is a DTensor of partial
        sums, whose full_tensor() all-reduces them."""
        params = [p for p in params if p.grad is not None]
        total = sharding.full(torch.nn.utils.get_total_norm([p.grad for p in params], 2.0))
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return float(total)

    def after_passes(self, *models) -> None:
        sharding.reshard(*models)


def build_parallel(strategy: str, device: torch.device, autocast: torch.dtype | None) -> DataParallel:
    """The strategy of this run. fsdp shards over torchrun's process group (of one rank too: the same code path, as
    on a single GPU); a process without torchrun has no group to shard over and keeps the model whole."""
    if strategy == "fsdp" and distributed.under_torchrun():
        return FullyShardedDataParallel(device, autocast)
    if strategy == "fsdp":
        log.info("dist.strategy=fsdp without torchrun: no process group to shard over, the model stays whole")
    return DataParallel()


def _empty_rollout(pad_id: int, device) -> Rollout:
    """One row, one prompt token, two completion columns (so the completion pass runs), nothing in the mask."""
    return Rollout(prompt_ids=torch.full((1, 1), pad_id, device=device),
                   prompt_mask=torch.ones(1, 1, dtype=torch.long, device=device),
                   completion_ids=torch.full((1, 2), pad_id, device=device),
                   completion_mask=torch.zeros(1, 2, dtype=torch.bool, device=device),
                   old_logp=torch.zeros(1, 2, device=device), texts=[""], lengths=torch.zeros(1, dtype=torch.long),
                   truncated=torch.zeros(1, dtype=torch.bool), group_size=1)
