"""The KV cache of a shared prompt: one prompt's keys and values serve all G rows of its group.

Two things transformers' DynamicCache does not do for us:
- under bf16 autocast with fp32 weights the rotary embedding promotes keys to fp32, so the cache
  would hold fp32 keys; attention casts them back to bf16 anyway, so storing them in the autocast
  dtype halves the cache and changes no result;
- gradient checkpointing replays each layer in the backward pass, and a cache that appends on every
  `update` would then hold the prompt twice. The training passes use the cache in two pure modes
  instead: "prefill" stores a layer's keys once (a replay stores nothing and returns the same
  tensors), "read" (a view taken after the prompt pass) returns the prompt's keys with the new
  ones appended and stores nothing.
"""

from __future__ import annotations

import copy

import torch
from transformers import DynamicCache

MODES = ("append", "prefill", "read")


class PromptCache(DynamicCache):
    """DynamicCache with a storage dtype and the modes above ("append" is DynamicCache's own)."""

    def __init__(self, config, dtype: torch.dtype | None = None, mode: str = "append"):
        super().__init__(config=config)
        self.dtype, self.mode = dtype, mode

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        if self.dtype is not None:
            key_states, value_states = key_states.to(self.dtype), value_states.to(self.dtype)
        layer = self.layers[layer_idx] if layer_idx < len(self.layers) else None
        if self.mode == "read":  # (R, h, P + T, d): the prompt, then this pass's tokens; nothing stored
            return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)
        if self.mode == "prefill" and layer is not None and layer.is_initialized:
            return key_states, value_states  # a checkpoint replay of the prompt pass: stored already
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def reader(self) -> PromptCache:
        """A read-mode view of the same layers. A view, not a mode switch: the prompt pass's checkpoint
        replay still sees its own cache in prefill mode."""
        view = copy.copy(self)
        view.mode = "read"
        return view


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype matmuls run in under the active autocast on `device`, or None without autocast."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None
