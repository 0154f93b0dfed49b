"""The model passes that sampling and training share: a prefill that runs each prompt once and expands
its KV cache to the prompt's G rows, and log-probs of chosen tokens at a temperature. For sampling, a prefill that
also runs the prompts' common beginning once (a chat template's system turn and few-shot examples)."""

from __future__ import annotations

import functools
import inspect

import torch

from grpo_lab.model.kvcache import GrowLayer
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
    the B prompts' rows (a reader gathers each row's prompt as attention reads it: PromptCache.rows).
    `prompt_mask` may be wider than `prompt_ids` (B, P): its first columns are positions the cache holds already
    (`prefill_shared`'s common beginning)."""
    # (B, P) left padding shifts positions; the ids are the mask's last P columns
    positions = (prompt_mask.cumsum(-1) - 1).clamp_min(0)[:, prompt_mask.shape[1] - prompt_ids.shape[1]:]
    extra = {"logits_to_keep": 1} if logits else {}
    out = module(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                 use_cache=True, **extra, **{cache_kwarg(module): cache})
    if expand_cache:
        cache.batch_repeat_interleave(repeats)
    last = (out.logits if logits else out.last_hidden_state)[:, -1]  # (B, V) or (B, H)
    next_pos = positions[:, -1:].repeat_interleave(repeats, dim=0) + 1  # (N, 1)
    return last.repeat_interleave(repeats, dim=0), next_pos  # (N, V) or (N, H)


MIN_SHARED = 8  # a common beginning shorter than this is not worth a second model call


def shared_length(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> int:
    """How many leading tokens every one of the left-padded prompts (B, P) shares, at most the shortest prompt's
    length less one (each prompt keeps a token of its own, whose logits start its reply); 0 for one prompt."""
    lengths = prompt_mask.sum(1)
    room = int(lengths.min()) - 1
    if prompt_ids.shape[0] < 2 or room < 1:
        return 0
    start = prompt_ids.shape[1] - lengths  # each row's first real token (left padding)
    heads = prompt_ids.gather(1, start[:, None] + torch.arange(room, device=prompt_ids.device))  # (B, room)
    same = (heads == heads[:1]).all(0)
    return int(same.long().cumprod(0).sum())


def prefill_shared(model, prompt_ids, prompt_mask, repeats, cache, *, expand_cache: bool = True
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`prefill` for sampling, with the prompts' common beginning (`shared_length`, when MIN_SHARED or more tokens)
    run once as one row, its cache then copied to the B prompts, which run only their own ends. Returns prefill's
    (logits (N, V), next positions (N, 1)) and the (B, L) mask of the cache's prompt positions, which the decode
    extends: the common beginning, then each prompt's end left-padded. The same keys and values as `prefill`'s up to
    float rounding (other matrix shapes): the sampled tokens are the same but where a uniform falls within rounding of
    a boundary (tests/test_rollout.py). Caches with other layers than plain ones (a sliding window shorter than the
    sequences: kvcache.plain_within) take `prefill`.
    expand_cache=False: as `prefill`'s, the cache then holds the B prompts' rows."""
    shared = shared_length(prompt_ids, prompt_mask)
    plain = all(isinstance(layer, GrowLayer) for layer in getattr(cache, "layers", ()))
    if shared < MIN_SHARED or not plain:
        logits, pos = prefill(model, prompt_ids, prompt_mask, repeats, cache, expand_cache=expand_cache)
        return logits, pos, prompt_mask
    lengths = prompt_mask.sum(1)
    first = prompt_ids[:1, prompt_ids.shape[1] - int(lengths[0]):][:, :shared]  # (1, L)
    prefill(model, first, torch.ones_like(first), prompt_ids.shape[0], cache)  # the beginning, its cache to B rows
    width = int(lengths.max()) - shared  # the longest end; a shorter one's first columns are masked
    ends = prompt_ids[:, -width:]
    columns = torch.arange(prompt_ids.shape[1] - width, prompt_ids.shape[1], device=prompt_ids.device)
    own = (columns[None] >= (prompt_ids.shape[1] - lengths + shared)[:, None]).to(prompt_mask.dtype)  # (B, width)
    mask = torch.cat([torch.ones_like(prompt_mask[:, :shared]), own], dim=1)  # (B, L + width)
    return *prefill(model, ends, mask, repeats, cache, expand_cache=expand_cache), mask


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
