"""The model passes that sampling and training share: a prefill that runs each prompt once and expands
its KV cache to the prompt's G rows, and log-probs of chosen tokens at a temperature."""

from __future__ import annotations

import functools
import inspect

import torch

from grpo_lab.model.sharding import Backbone


@functools.cache
def _cache_kwarg_of(model_class: type) -> str:
    # transformers renamed `past_key_values` to `cache` (5.x); accept models of either vintage.
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_kwarg(model) -> str:
    """The cache keyword of a model's forward (a sharded backbone's: that of the backbone module it calls)."""
    return _cache_kwarg_of(type(model.base_model if isinstance(model, Backbone) else model))


def prefill(module, prompt_ids, prompt_mask, repeats, cache, *, logits: bool = True, expand_cache: bool = True):
    """Run the B prompts once, then expand the last position and the cache to their rows: prompt i
    gets `repeats` rows (an int, or a (B,) tensor of counts). Returns (the last position's logits
    (N, V), or with logits=False, `module` being the model's backbone, its hidden state (N, H);
    the position of each row's next token (N, 1)). The cache then holds N rows; with expand_cache=False it keeps
    the B prompts' rows (a reader gathers each row's prompt as attention reads it: PromptCache.rows)."""
    positions = (prompt_mask.cumsum(-1) - 1).clamp_min(0)  # (B, P) left padding shifts positions
    extra = {"logits_to_keep": 1} if logits else {}
    out = module(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                 use_cache=True, **extra, **{cache_kwarg(module): cache})
    if expand_cache:
        cache.batch_repeat_interleave(repeats)
    last = (out.logits if logits else out.last_hidden_state)[:, -1]  # (B, V) or (B, H)
    next_pos = positions[:, -1:].repeat_interleave(repeats, dim=0) + 1  # (N, 1)
    return last.repeat_interleave(repeats, dim=0), next_pos  # (N, V) or (N, H)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / temperature) at `tokens`: (..., V), (...) -> (...), in fp32."""
    logits = logits.float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    return logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


@torch.no_grad()
def token_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) over the vocabulary: (..., V) -> (...), fp32, detached:
    log-sum-exp minus the expected logit, H = lse - sum(p * z)."""
    z = logits.float()
    if temperature not in (0.0, 1.0):
        z = z / temperature
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    return (lse - (torch.exp(z - lse) * z).sum(-1, keepdim=True)).squeeze(-1)
