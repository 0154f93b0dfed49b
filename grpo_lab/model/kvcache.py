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
And two for speed: DynamicCache appends by concatenation, so every decoded token copies every layer's whole
cache. With `reserve` (the rollout's max_new_tokens) each layer's keys and values live in a buffer with room
for them, written in place, and attention reads a view: the same values, no copy (4% of a CPU rollout).
And a decode need not copy each prompt's keys to its G rows at all: after `split`, the cache keeps the B prompts'
keys and values once and each row's own new ones apart, and attention reads the two parts
(grpo_lab/model/attention.py): no expanded copy, and a finished row's removal copies only the rows' own tokens.
"""

from __future__ import annotations

import copy

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

MODES = ("append", "prefill", "read")


class PromptCache(DynamicCache):
    """DynamicCache with a storage dtype and the modes above ("append" is DynamicCache's own)."""

    def __init__(self, config, dtype: torch.dtype | None = None, mode: str = "append", reserve: int = 0,
                 longest: int | None = None):
        super().__init__(config=config)
        self.dtype, self.mode = dtype, mode
        self.index = None  # read mode: the rows a length bucket reads (rows()), None for all
        self.owner = None  # split: each row's prompt (N,), its slot among that prompt's rows, the slots a prompt has
        self.slot, self.slots, self.prompt_bias = None, 0, None
        if reserve:  # plain layers only: a sliding-window layer keeps its own bookkeeping, unless it drops nothing
            self.layers = [GrowLayer(reserve) if plain_within(layer, longest) else layer for layer in self.layers]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        if self.dtype is not None:
            key_states, value_states = key_states.to(self.dtype), value_states.to(self.dtype)
        layer = self.layers[layer_idx] if layer_idx < len(self.layers) else None
        if self.mode == "read":  # (R, h, P + T, d): the prompt, then this pass's tokens; nothing stored
            keys, values = layer.keys, layer.values
            if self.index is not None:  # each row's prompt (index_select: its backward adds, a cheap scatter)
                keys, values = keys.index_select(0, self.index), values.index_select(0, self.index)
            return torch.cat([keys, key_states], dim=-2), torch.cat([values, value_states], dim=-2)
        if self.mode == "prefill" and layer is not None and layer.is_initialized:
            return key_states, value_states  # a checkpoint replay of the prompt pass: stored already
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def split(self, prompt_mask: torch.Tensor, repeats) -> None:
        """After a prefill that kept the B prompts' rows (`expand_cache=False`): the decode's rows (prompt i's
        `repeats` rows, an int or a (B,) tensor) keep their own new keys and values apart from the prompts', which
        attention reads once for all of a prompt's rows. `prompt_mask` (B, L): the prompt positions the cache holds."""
        b = prompt_mask.shape[0]
        counts = torch.as_tensor(repeats, device=prompt_mask.device).expand(b)
        self.owner = torch.arange(b, device=prompt_mask.device).repeat_interleave(counts)  # (N,)
        first = counts.cumsum(0) - counts  # each prompt's first row
        self.slot = torch.arange(self.owner.shape[0], device=prompt_mask.device) - first[self.owner]
        self.slots = int(counts.max())
        # (B, 1, 1, L): the additive mask of eager attention, in fp32 as the scores are added to it
        self.prompt_bias = torch.zeros(prompt_mask.shape, dtype=torch.float32, device=prompt_mask.device)
        self.prompt_bias = self.prompt_bias.masked_fill(prompt_mask == 0, torch.finfo(torch.float32).min)[:, None, None]
        self.layers = [SplitLayer(layer, self.owner.shape[0]) for layer in self.layers]

    def to_slots(self, x: torch.Tensor) -> torch.Tensor:
        """Rows' (N, h, r, k) as their prompts' (B, h, slots * r, k), zero in the slots of no row."""
        grid = x.new_zeros(self.prompt_bias.shape[0], x.shape[1], self.slots, *x.shape[2:])
        grid[self.owner, :, self.slot] = x
        return grid.view(grid.shape[0], grid.shape[1], -1, grid.shape[-1])

    def from_slots(self, grid: torch.Tensor, r: int) -> torch.Tensor:
        """`to_slots`'s inverse: (B, h, slots * r, k) -> the rows' (N, h, r, k)."""
        return grid.view(grid.shape[0], grid.shape[1], self.slots, r, grid.shape[-1])[self.owner, :, self.slot]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        if self.owner is not None:
            self.owner, self.slot = self.owner[indices], self.slot[indices]

    def reader(self) -> PromptCache:
        """A read-mode view of the same layers. A view, not a mode switch: the prompt pass's checkpoint
        replay still sees its own cache in prefill mode."""
        view = copy.copy(self)
        view.mode = "read"
        return view

    def rows(self, index: torch.Tensor) -> PromptCache:
        """A read-mode view that reads rows `index` of the prompts' keys and values: the prompt of each row of a
        pass (all N rows, or one length bucket's: grpo_lab/model/buckets.py). Each layer's rows are gathered when
        that layer reads them, so no more than one layer's copy exists at a time, and gradients flow back through
        the gather to the prompt pass."""
        view = self.reader()
        view.index = index
        return view


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype matmuls run in under the active autocast on `device`, or None without autocast."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None


def plain_within(layer, longest: int | None) -> bool:
    """Whether `layer` keeps every position of sequences up to `longest` tokens (None: of any length): a plain layer,
    or a sliding-window one whose window holds them all (Gemma 3's 512 against a study's 100-odd tokens), which then
    attends as a plain one does: its mask is the causal mask, its cache drops nothing."""
    if type(layer) is DynamicLayer:
        return True
    return type(layer) is DynamicSlidingWindowLayer and longest is not None and longest < layer.sliding_window


class GrowLayer(DynamicLayer):
    """A DynamicLayer whose keys and values (R, h, L, d) are views of buffers with room for `reserve` more
    positions: an append writes in place. Growing past the room, or repeating rows, allocates anew."""

    def __init__(self, reserve: int):
        super().__init__()
        self.reserve = reserve
        self.key_buf = self.value_buf = None  # (R, h, L + room, d)

    def _set(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold copies of (R, h, L, d) keys and values in new buffers with `reserve` free positions."""
        n = keys.shape[-2]
        self.key_buf = keys.new_empty(*keys.shape[:2], n + self.reserve, keys.shape[-1])
        self.value_buf = values.new_empty(*values.shape[:2], n + self.reserve, values.shape[-1])
        self.key_buf[:, :, :n], self.value_buf[:, :, :n] = keys, values
        self.keys, self.values = self.key_buf[:, :, :n], self.value_buf[:, :, :n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.key_buf is None:  # the prompt: (R, h, P, d)
            self._set(key_states, value_states)
            return self.keys, self.values
        n, m = self.keys.shape[-2], key_states.shape[-2]
        if n + m > self.key_buf.shape[-2]:  # out of room: a new buffer (reserve more again)
            self._set(torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2))
            return self.keys, self.values
        self.key_buf[:, :, n:n + m], self.value_buf[:, :, n:n + m] = key_states, value_states
        self.keys, self.values = self.key_buf[:, :, :n + m], self.value_buf[:, :, :n + m]
        return self.keys, self.values

    def batch_repeat_interleave(self, repeats) -> None:
        if self.key_buf is not None:
            self._set(self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.key_buf is not None:  # the rows that go on generating; their room comes along
            n = self.keys.shape[-2]
            self.key_buf, self.value_buf = self.key_buf[indices], self.value_buf[indices]
            self.keys, self.values = self.key_buf[:, :, :n], self.value_buf[:, :, :n]


class SplitLayer(GrowLayer):
    """A GrowLayer of B prompts split off as the prompts' keys and values (`prompt_keys`, `prompt_values`, (B, h, P,
    d)) and the N rows' own new ones, which grow as a GrowLayer's do: `update` appends a token's and returns the rows'
    own (N, h, t, d); attention adds the prompts' (PromptCache.split)."""

    def __init__(self, prompts: GrowLayer, rows: int):
        super().__init__(prompts.reserve)
        self.prompt_keys, self.prompt_values = prompts.keys, prompts.values
        self.lazy_initialization(prompts.keys, prompts.values)
        self._set(prompts.keys.new_empty(rows, prompts.keys.shape[1], 0, prompts.keys.shape[-1]),
                  prompts.values.new_empty(rows, prompts.values.shape[1], 0, prompts.values.shape[-1]))

    def get_seq_length(self) -> int:
        return self.prompt_keys.shape[-2] + self.keys.shape[-2]
