"""Eager attention without the K/V copy of grouped-query models, for CPU.

transformers' eager attention repeats each key/value head for the query heads that share it (`repeat_kv`):
SmolLM2 has 9 query heads on 3 KV heads, so every layer copies K and V 3-fold at every decoded token, 15% of
a CPU rollout's time. Here the `rep` query heads of a KV group are stacked along the query axis instead and
multiplied against the group's keys directly: the same products in other GEMM shapes, without the copy.
Measured against eager (tests/test_speed.py): the training pass's log-probs bitwise, its gradients within
1e-6 relative, rollouts the same tokens with log-probs within 1e-6. Rollouts of SmolLM2 are 1.24x faster with it on CPU
(benchmarks/RESULTS.md); models without grouped KV heads (the built-in one) keep plain eager.

A decode on a split cache (grpo_lab/model/kvcache.py: `PromptCache.split`, passed as `split_cache`) reads each
prompt's keys once for all its rows: the rows' queries are laid out by prompt (`to_slots`), scored against their
prompt's keys in one product per prompt and against their own new keys in one per row, and one softmax runs over
both. The same scores and weights as attention over each row's whole cache, summed in two parts (float rounding).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

NAME = "gqa_eager"


def gqa_eager_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0, **kwargs):
    """transformers' eager_attention_forward for (R, H, q, d) queries on (R, Hkv, L, d) keys and values, H = rep x
    Hkv, without repeat_kv. Returns ((R, q, H, d) outputs, None)."""
    split = kwargs.get("split_cache")
    if split is not None:
        return _split_attention(split, module.layer_idx, query, key, value, scaling)
    r, h, q, d = query.shape
    hkv, length = key.shape[1], key.shape[-2]
    rep = h // hkv
    grouped = query.reshape(r, hkv, rep * q, d)  # query head g*rep + j is head j of KV group g (repeat_kv's order)
    w = torch.matmul(grouped, key.transpose(2, 3)) * scaling  # (R, Hkv, rep*q, L)
    if attention_mask is not None:  # (R, 1, q, L) broadcast over the rep heads of each group
        w = (w.view(r, hkv, rep, q, length) + attention_mask[:, :, None, :, :length]).view(r, hkv, rep * q, length)
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    out = torch.matmul(w, value)  # (R, Hkv, rep*q, d)
    return out.view(r, h, q, d).transpose(1, 2).contiguous(), None


def _split_attention(cache, layer: int, query: torch.Tensor, own_keys: torch.Tensor, own_values: torch.Tensor,
                     scaling: float):
    """gqa_eager_attention on a split cache: (N, H, q, d) queries, the rows' own (N, Hkv, t, d) keys and values, their
    prompts' from `cache`. Every query sees its whole prompt and all of its row's own tokens (a decode's: q = 1)."""
    n, h, q, d = query.shape
    prompt_keys, prompt_values = cache.layers[layer].prompt_keys, cache.layers[layer].prompt_values
    hkv, length = prompt_keys.shape[1], prompt_keys.shape[-2]
    rep = h // hkv
    grouped = query.reshape(n, hkv, rep * q, d)
    by_prompt = torch.matmul(cache.to_slots(grouped), prompt_keys.transpose(2, 3)) * scaling + cache.prompt_bias
    w = torch.cat([cache.from_slots(by_prompt, rep * q), torch.matmul(grouped, own_keys.transpose(2, 3)) * scaling], -1)
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)  # (N, Hkv, rep*q, P + t)
    out = cache.from_slots(torch.matmul(cache.to_slots(w[..., :length]), prompt_values), rep * q).float()
    out = (out + torch.matmul(w[..., length:], own_values)).to(query.dtype)  # the parts summed in fp32 (bf16 autocast)
    return out.view(n, h, q, d).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, gqa_eager_attention)
# A custom attention name gets no mask at all unless a mask function is registered for it too (masking_utils
# skips unknown names): without this line the log-probs were off by up to 7.5.
AttentionMaskInterface.register(NAME, eager_mask)


def attention_for(config, device: torch.device) -> str:
    """The attention a model runs with: sdpa off CPU; on CPU eager (at a few dozen tokens it beats SDPA's
    dispatch), without the K/V copy where query heads share KV heads."""
    if device.type != "cpu":
        return "sdpa"
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    return NAME if heads and kv and kv < heads and heads % kv == 0 else "eager"
