"""Sampling whole groups of completions with a shared prompt cache.

The G completions of a group share their prompt, so the prompt is run through the model once, and every pass reads
each prompt's keys and values from the B prompts' cache: the decode here through a split cache (each row's own new
keys apart, grpo_lab/model/kvcache.py), the policy and reference passes by a gather (grpo_lab/model/logprobs.py).
The prompt costs B forward rows instead of B*G, and its cache is never copied to the G rows. That is exact up to
float rounding, gradients included. Attentions other than gqa_eager (sdpa off CPU, the built-in model's eager) and
sliding-window layers whose window is shorter than the prompt and reply expand the prompt's cache G-fold instead.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from grpo_lab.model.attention import NAME as GQA_EAGER
from grpo_lab.model.forward import cache_kwarg, prefill_shared, token_logprobs
from grpo_lab.model.kvcache import GrowLayer, PromptCache, autocast_dtype
from grpo_lab.records import Rollout

_TENSORS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "old_logp", "lengths", "truncated")


def draw_with_logp(logits: torch.Tensor, temperature: float, generator: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """`_draw` from softmax(logits / temperature) and the drawn token's log-prob, from one exp pass (the plain path
    takes a softmax and a logsumexp): (R, V) -> (R,), (R,). model.fast_math: the same tokens from the same uniforms
    but where a uniform falls within rounding of a boundary; log-probs within 1e-5 (tests/test_speed.py)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    top = logits.amax(-1, keepdim=True)  # (R, 1)
    cdf = (logits - top).exp_().cumsum_(-1)  # (R, V) unnormalised
    total = cdf[:, -1:]
    u = (1 - torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device)) * total  # in (0, total]
    tok = torch.searchsorted(cdf, u).squeeze(-1).clamp_max(cdf.shape[-1] - 1)  # (R,)
    return tok, (logits.gather(-1, tok[:, None]) - top - total.log()).squeeze(-1)


def _draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One sample per row of probs (R, V) by inverse CDF: a single uniform per row, several times
    cheaper on CPU than torch.multinomial's exponential race over the whole vocabulary."""
    cdf = probs.cumsum(-1)  # (R, V)
    u = (1 - torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device)) * cdf[:, -1:]  # in (0, total]
    return torch.searchsorted(cdf, u).squeeze(-1).clamp_max(cdf.shape[-1] - 1)  # (R,)


def sample_groups(
    model,
    tokenizer,
    prompts: list[str],
    group_size: int,
    *,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    end_ids: list[int],
    max_rows: int | None = None,
    stop: list[str] | tuple[str, ...] = (),
    fast: bool = False,
) -> Rollout:
    """Sample `group_size` completions for each prompt with a KV cache. temperature 0 is greedy.

    max_rows caps the rows (prompts x samples) of one generation call, so the KV cache of a large
    batch never exists at once; a group may be split across calls. Greedy outputs do not depend on
    the cap. Sampled ones do: the calls draw from `generator` one after another, so a cap changes
    which uniform each token gets (a run is still reproducible, and resumes exactly, for one cap).

    A completion ends at an end token or at the token that completes a `stop` string; its text is
    cut before the first stop string (as vLLM does), while the tokens keep the one that completed it.
    fast (model.fast_math): the one-pass sampler (`draw_with_logp`).
    """
    with torch.inference_mode():  # the cheapest mode for the decode loop
        device = next(model.parameters()).device
        enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        prompt_ids, prompt_mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
        pad = tokenizer.pad_token_id
        ends = torch.tensor(end_ids, device=device)
        n = len(prompts) * group_size
        step = min(max_rows or n, n)
        pieces = []  # (tokens, log-probs) of each call, (rows, t) each
        for start in range(0, n, step):
            end = min(start + step, n)
            lo, hi = start // group_size, (end - 1) // group_size + 1  # the prompts these rows belong to
            counts = [min(end, (i + 1) * group_size) - max(start, i * group_size) for i in range(lo, hi)]
            repeats = group_size if step == n else torch.tensor(counts, device=device)
            pieces.append(_generate(model, prompt_ids[lo:hi], prompt_mask[lo:hi], repeats, end - start,
                                    max_new_tokens=max_new_tokens, temperature=temperature, generator=generator,
                                    ends=ends, pad=pad, tokenizer=tokenizer, stop=stop, fast=fast))
        width = max(t.shape[1] for t, _, _ in pieces)

        def join(i, value):  # the calls' (rows, t) tensors, right-padded to one width: (N, T)
            return torch.cat([torch.nn.functional.pad(p[i], (0, width - p[i].shape[1]), value=value) for p in pieces])

        ro = assemble(prompt_ids, prompt_mask, join(0, pad), join(1, 0.0), join(2, False), group_size,
                      tokenizer=tokenizer, ends=ends, stop=stop)
    # The policy pass, which needs autograd, reads these: clone them out of inference mode.
    return dataclasses.replace(ro, **{f: getattr(ro, f).clone() for f in _TENSORS})


def assemble(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, ids: torch.Tensor, logps: torch.Tensor,
             stopped: torch.Tensor, group_size: int, *, tokenizer, ends: torch.Tensor,
             stop: list[str] | tuple[str, ...] = ()) -> Rollout:
    """A Rollout from an engine's drawn tokens, their log-probs and where a stop string completed ((N, T) each,
    padded after the end): every engine's samples end, count and decode by this one rule."""
    pad = tokenizer.pad_token_id
    is_eos = torch.isin(ids, ends)
    is_end = is_eos | stopped
    # A token counts while no end token came strictly before it: the end token itself is scored.
    mask = (is_end.cumsum(1) - is_end.long()) == 0
    finished = is_end.any(1)
    cpu_ids = ids.masked_fill(~mask | is_eos, pad).tolist()
    texts = tokenizer.batch_decode(cpu_ids, skip_special_tokens=True)
    if stop:
        texts = [cut_at_stop(text, stop) for text in texts]
    return Rollout(prompt_ids, prompt_mask, ids, mask, logps.masked_fill(~mask, 0.0), texts, mask.sum(1),
                   ~finished, group_size)


def _generate(model, prompt_ids, prompt_mask, repeats, n: int, *, max_new_tokens: int, temperature: float,
              generator: torch.Generator, ends: torch.Tensor, pad: int, tokenizer=None,
              stop: list[str] | tuple[str, ...] = (),
              fast: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One generation call: `n` rows from the given prompts (prompt i repeated `repeats` times).
    Returns the tokens, their log-probs and where a stop string completed, (n, t) each; t < max_new_tokens
    when every row ended."""
    device = prompt_ids.device
    cache = PromptCache(model.config, dtype=autocast_dtype(device), reserve=max_new_tokens,
                        longest=prompt_ids.shape[1] + max_new_tokens)
    # each prompt's keys read once for its rows (kvcache.py: split), where the attention and the cache's layers can
    split = getattr(model.config, "_attn_implementation", None) == GQA_EAGER and all(
        isinstance(layer, GrowLayer) for layer in cache.layers)
    logits, pos, cached = prefill_shared(model, prompt_ids, prompt_mask, repeats, cache, expand_cache=not split)
    extra = {cache_kwarg(model): cache}
    if split:
        cache.split(cached, repeats)
        extra["split_cache"] = cache
    width = cached.shape[1]  # the mask's columns so far: a view of (n, L + max_new_tokens), one more a token
    attn = torch.cat([cached, torch.ones_like(cached[:, :1]).expand(-1, max_new_tokens)], dim=1)
    attn = attn.repeat_interleave(repeats, dim=0)
    tokens = torch.full((n, max_new_tokens), pad, device=device)
    logps = torch.zeros(n, max_new_tokens, device=device)
    live = torch.arange(n, device=device)  # the original row of each row still generating
    stopped = torch.zeros(n, max_new_tokens, dtype=torch.bool, device=device)  # a stop string completed here
    for t in range(max_new_tokens):
        if fast and temperature != 0:
            tok, logp = draw_with_logp(logits, temperature, generator)
        else:
            logits = logits.float()
            tok = logits.argmax(-1) if temperature == 0 else _draw(torch.softmax(logits / temperature, -1), generator)
            logp = token_logprobs(logits, tok, temperature or 1.0)
        tokens[live, t] = tok
        logps[live, t] = logp
        ended = torch.isin(tok, ends)
        if stop:
            hit = completes_stop(tokenizer, tokens[live, : t + 1], stop)  # (R,)
            stopped[live[hit], t] = True
            ended |= hit
        if t == max_new_tokens - 1 or bool(ended.all()):
            break
        if bool(ended.any()):  # finished rows leave the batch: later steps cost only the live ones
            keep = (~ended).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            live, tok, attn, pos = live[keep], tok[keep], attn[keep], pos[keep]
        width += 1
        out = model(input_ids=tok[:, None], attention_mask=attn[:, :width], position_ids=pos, use_cache=True, **extra)
        logits, pos = out.logits[:, -1], pos + 1
    return tokens[:, : t + 1], logps[:, : t + 1], stopped[:, : t + 1]


def completes_stop(tokenizer, generated: torch.Tensor, stop: list[str] | tuple[str, ...]) -> torch.Tensor:
    """(R,) bool: the rows of `generated` (R, t) whose text contains a stop string, read off the last few
    tokens only (a stop string of L characters spans at most L tokens; a few more for partial bytes)."""
    window = max(map(len, stop)) + 4
    tails = tokenizer.batch_decode(generated[:, -window:].tolist(), skip_special_tokens=True)
    return torch.tensor([any(s in tail for s in stop) for tail in tails], device=generated.device)


def cut_at_stop(text: str, stop: list[str] | tuple[str, ...]) -> str:
    """`text` up to (not including) its first stop string."""
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(cuts)] if cuts else text


def split_groups(ro: Rollout) -> list[Rollout]:
    """One Rollout per prompt (its G samples), for samplers that keep, drop or pool groups."""
    g = ro.group_size
    assert isinstance(g, int), "split_groups takes a sampled rollout (one G), not a training batch"
    out = []
    for i in range(ro.prompt_ids.shape[0]):
        rows = slice(i * g, (i + 1) * g)
        out.append(Rollout(ro.prompt_ids[i:i + 1], ro.prompt_mask[i:i + 1], ro.completion_ids[rows],
                           ro.completion_mask[rows], ro.old_logp[rows], ro.texts[rows], ro.lengths[rows],
                           ro.truncated[rows], g))
    return out


def concat_groups(chunks: list[Rollout], pad_id: int) -> Rollout:
    """Join per-group Rollouts into one batch: prompts re-padded on the left, completions on the right, to
    the longest completion (columns of padding only are dropped). Extra left padding changes nothing
    (positions come from the mask). Groups of one size keep it as an int; of several, the batch's
    `group_size` is each prompt's count (every prompt is still prefilled once, its cache expanded to its
    own rows)."""
    width = max(c.prompt_ids.shape[1] for c in chunks)
    length = max(int(c.lengths.max()) for c in chunks)

    def left(x, value):
        return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

    def right(x, value):
        return torch.nn.functional.pad(x[:, :length], (0, length - min(length, x.shape[1])), value=value)

    return Rollout(
        prompt_ids=torch.cat([left(c.prompt_ids, pad_id) for c in chunks]),
        prompt_mask=torch.cat([left(c.prompt_mask, 0) for c in chunks]),
        completion_ids=torch.cat([right(c.completion_ids, pad_id) for c in chunks]),
        completion_mask=torch.cat([right(c.completion_mask, False) for c in chunks]),
        old_logp=torch.cat([right(c.old_logp, 0.0) for c in chunks]),
        texts=[t for c in chunks for t in c.texts],
        lengths=torch.cat([c.lengths for c in chunks]),
        truncated=torch.cat([c.truncated for c in chunks]),
        group_size=_joined_sizes(chunks),
    )


def _joined_sizes(chunks: list[Rollout]) -> int | torch.Tensor:
    """The group size of `chunks` joined: their common size as an int, else a (B,) tensor of each prompt's count."""
    counts = [int(n) for c in chunks for n in (c.group_size.tolist() if isinstance(c.group_size, torch.Tensor)
                                               else [c.group_size] * c.prompt_ids.shape[0])]
    if len(set(counts)) == 1:
        return counts[0]
    return torch.tensor(counts, dtype=torch.long, device=chunks[0].completion_ids.device)


def join_rollouts(chunks: list[Rollout], pad_id: int) -> Rollout:
    """Rollouts of one prompt as one Rollout of all their samples (completions right-padded)."""
    if len(chunks) == 1:
        return chunks[0]
    joined = concat_groups(chunks, pad_id)
    return dataclasses.replace(joined, prompt_ids=joined.prompt_ids[:1], prompt_mask=joined.prompt_mask[:1],
                               group_size=len(joined.texts))


def take_rows(ro: Rollout, rows: np.ndarray) -> Rollout:
    """The samples `rows` (indices) of a one-prompt Rollout."""
    idx = torch.as_tensor(rows, dtype=torch.long, device=ro.completion_ids.device)
    return dataclasses.replace(
        ro, completion_ids=ro.completion_ids[idx], completion_mask=ro.completion_mask[idx], old_logp=ro.old_logp[idx],
        texts=[ro.texts[i] for i in rows.tolist()], lengths=ro.lengths[idx], truncated=ro.truncated[idx],
        group_size=len(rows))
