"""FSDP2 sharding of a causal LM (dist.strategy=fsdp): each decoder layer its own unit, the root (embedding,
final norm, the output layer tied to the embedding) another; and the contexts every pass needs around it.

What the rest of grpo_lab relies on (each measured in the FSDP2 prototype, torch 2.13):
- gradients are summed over ranks, not averaged: the losses are normalised over the global batch already;
- the first all-gather runs outside inference mode (`shard` warms the model up), else FSDP2's reused
  gather buffers are inference tensors and the first training pass fails;
- `gathered(model)`: the full weights once for a whole rollout, so ranks may decode different lengths,
  rounds and batches with no collective inside;
- `model.backbone(...)`: the backbone entered through the root's hooks (the chunked log-prob head needs
  hidden states; calling model.model directly would skip the root's all-gather);
- after a pass without backward the root stays gathered: `reshard(model)` frees it.
"""

from __future__ import annotations

import contextlib

import torch
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor


def decoder_layers(model) -> torch.nn.ModuleList:
    layers = getattr(model.base_model, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"dist.strategy=fsdp: {type(model).__name__} has no decoder layers at base_model.layers; "
                         "use dist.strategy=ddp")
    return layers


def shard(model, mesh, mp: MixedPrecisionPolicy | None = None):
    """Shard `model` in place over `mesh` and warm it up; returns it. A frozen model (the reference) is sharded
    the same way: its own shard set, never a full copy per rank."""
    kw = dict(mesh=mesh, mp_policy=mp or MixedPrecisionPolicy())
    for layer in decoder_layers(model):
        fully_shard(layer, reshard_after_forward=True, **kw)
    # The root keeps its weights after a forward (the backward needs them at once, and the chunked head reads
    # the output layer's weight after the backbone's forward). FSDP2 does so only when the argument is left
    # None; an explicit True would reshard the root too. Tied weights must share this one unit.
    fully_shard(model, reshard_after_forward=False, **kw)
    for m in units(model):  # neither setter is recursive
        m.set_gradient_divide_factor(1.0)  # a sum over ranks
        m.set_force_sum_reduction_for_comms(True)  # factor 1 alone asks gloo for PREMUL_SUM, which it lacks
    model.backbone = model.base_model.forward
    register_fsdp_forward_method(model, "backbone")
    with torch.no_grad():  # the warm-up: the first all-gather allocates buffers that every later one reuses
        model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=local(next(model.parameters())).device))
    reshard(model)
    return model


def is_sharded(model) -> bool:
    return isinstance(model, FSDPModule)


def units(model) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def reshard(*models) -> None:
    """Free every gathered unit of each sharded model (a no-op for others)."""
    for model in models:
        if model is not None and is_sharded(model):
            for m in units(model):
                m.reshard()


@contextlib.contextmanager
def gathered(model):
    """The full weights for the whole block: one all-gather per unit on entry (on every rank at the same
    point), then any number of forwards with no collective; freed on exit. A no-op for an unsharded model."""
    if model is None or not is_sharded(model):
        yield
        return
    model.set_reshard_after_forward(False)  # recursive: no unit frees its weights after a forward
    for m in units(model):
        m.unshard()
    try:
        yield
    finally:
        reshard(model)
        model.set_reshard_after_forward(True)  # the layers as `shard` left them; the root keeps its weights
        model.set_reshard_after_forward(False, recurse=False)


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded tensor, the tensor itself otherwise."""
    return t.to_local() if isinstance(t, DTensor) else t


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor (all-gathered from its shards: a collective on every rank)."""
    return t.full_tensor() if isinstance(t, DTensor) else t


class Backbone:
    """The sharded model's backbone as `prefill` and the log-prob passes call it: through the root's hooks.
    `base_model` is the backbone module itself (its signature names the cache keyword)."""

    def __init__(self, model):
        self.model, self.config, self.base_model = model, model.config, model.base_model

    def __call__(self, **kw):
        return self.model.backbone(**kw)
