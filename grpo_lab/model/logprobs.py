"""Per-token log-probs of sampled completions under a model: the policy and reference passes.

Two memory levers at real shapes (vocabulary V = 151,936, thousands of tokens):
- no (N, T, V) logits: the backbone's hidden states go through the output layer and the
  log-softmax a chunk of positions at a time, in a custom autograd function that recomputes each
  chunk's logits in the backward pass, so neither pass holds more than (chunk, V) logits; padding
  positions are skipped altogether. Exact to fp32 rounding against the full-logits path.
- gradient checkpointing that keeps the shared prompt: transformers' own drops the KV cache under
  checkpointing; here every decoder layer is checkpointed with the cache kept, which is correct
  because the training passes use the cache in pure modes (grpo_lab/model/kvcache.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.modeling_layers import GradientCheckpointingLayer

from grpo_lab.model.buckets import cut, inverse, needed_widths
from grpo_lab.model.forward import cache_kwarg, prefill, token_entropy, token_logprobs
from grpo_lab.model.kvcache import PromptCache, autocast_dtype
from grpo_lab.model.sharding import Backbone, is_sharded
from grpo_lab.records import Rollout

KEEP_BYTES = 256 * 2**20  # model.fast_math keeps at most this much softmax: SmolLM2 5,461 tokens, Qwen2.5 441
# Model types whose logits are exactly hidden @ lm_head.weight.T (no bias, scaling or soft-capping);
# others take the full-logits path, which is exact for every causal LM.
PLAIN_HEAD_TYPES = ("llama", "qwen2", "qwen3", "mistral", "qwen2_moe", "qwen3_moe", "phi3", "smollm3", "olmo2")


class _HeadLogprobs(torch.autograd.Function):
    """log softmax(hidden @ weight.T / temperature) at `tokens`, `chunk` rows at a time, forward and
    backward: (M, H), (V, H), (M,) -> (M,) fp32. Matmuls run in `dtype` (the autocast dtype, as
    the model's own output layer would), softmax and gradients of the logits in fp32. With `entropy`,
    also each row's entropy over the vocabulary (M,), from the same chunk's logits: detached (no
    gradient flows through it), and no more than (chunk, V) logits exist at once for it either."""

    @staticmethod
    def forward(ctx, hidden, weight, tokens, temperature: float, chunk: int, dtype: torch.dtype, entropy: bool,
                keep: bool = False):
        w = weight.to(dtype)
        m = hidden.shape[0]
        out = torch.empty(m, dtype=torch.float32, device=hidden.device)  # (M,)
        ent = torch.empty(m if entropy else 0, dtype=torch.float32, device=hidden.device)  # (M,) | (0,)
        # keep: the (M, V) softmax is kept for the backward, which then skips recomputing the logits (model.fast_math;
        # only when a backward will come and it fits KEEP_BYTES)
        keep = keep and any(ctx.needs_input_grad[:2]) and m * weight.shape[0] * 4 <= KEEP_BYTES
        kept = torch.empty(m, weight.shape[0], device=hidden.device) if keep else None  # (M, V) | None
        for s in range(0, m, chunk):
            logits = (hidden[s:s + chunk].to(dtype) @ w.T).float() / temperature  # (c, V)
            tok = tokens[s:s + chunk, None]
            lse = torch.logsumexp(logits, -1, keepdim=True)  # (c, 1)
            out[s:s + chunk] = (logits.gather(-1, tok) - lse).squeeze(-1)
            if keep:
                torch.exp(logits - lse, out=kept[s:s + chunk])
            if entropy:  # H = lse - sum(p * z), in place on one more (c, V) buffer
                ent[s:s + chunk] = (lse - (logits - lse).exp_().mul_(logits).sum(-1, keepdim=True)).squeeze(-1)
        ctx.save_for_backward(hidden, weight, tokens)
        ctx.temperature, ctx.chunk, ctx.dtype, ctx.kept = temperature, chunk, dtype, kept
        ctx.mark_non_differentiable(ent)
        return out, ent

    @staticmethod
    def backward(ctx, grad_out, grad_ent):  # grad_out (M,); the entropy is a constant: grad_ent is ignored
        hidden, weight, tokens = ctx.saved_tensors
        temperature, chunk, dtype = ctx.temperature, ctx.chunk, ctx.dtype
        w = weight.to(dtype)
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s:s + chunk].to(dtype)  # (c, H)
            g = grad_out[s:s + chunk, None].float()  # (c, 1)
            # d logp[tok] / d logits = onehot(tok) - softmax(logits), then the 1/temperature of the logits
            probs = torch.softmax((h @ w.T).float() / temperature, -1) if ctx.kept is None else ctx.kept[s:s + chunk]
            d = probs.mul_(-g)  # (c, V)
            d.scatter_add_(-1, tokens[s:s + chunk, None], g)
            d = d.div_(temperature).to(dtype)
            if grad_h is not None:
                grad_h[s:s + chunk] = d @ w
            if grad_w is not None:
                grad_w += (d.T @ h).float()  # (V, H)
        ctx.kept = None
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None, None, None, None


def head_logprobs(hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor, temperature: float,
                  chunk: int, entropy: bool = False, keep: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (M,) fp32 of `tokens` (M,) given final hidden states (M, H) and the output layer's
    weight (V, H), without ever holding more than (chunk, V) logits (with `keep`, the (M, V) softmax up to
    KEEP_BYTES, for a backward without the logits' recompute); and, with `entropy`, each position's entropy
    (M,) (detached), else an empty tensor."""
    dtype = autocast_dtype(hidden.device) or weight.dtype
    return _HeadLogprobs.apply(hidden, weight, tokens, float(temperature), chunk, dtype, entropy, keep)


def plain_head(model) -> torch.Tensor | None:
    """The output layer's weight when logits are exactly hidden @ weight.T, else None."""
    head = model.get_output_embeddings()
    if (getattr(model.config, "model_type", None) not in PLAIN_HEAD_TYPES or type(head) is not torch.nn.Linear
            or head.bias is not None or model.base_model is model):
        return None
    return head.weight


def completion_logprobs(model, rollout: Rollout, temperature: float, *, chunk: int = 0, entropy: bool = False,
                        keep: bool = False, buckets: int = 1) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (N, T) of the rollout's completion tokens under `model`, prompts prefilled once per group,
    zero at padding. Differentiable when called with grad enabled: gradients flow through each row's read of
    its prompt's cache back to the prompt pass. chunk > 0: at most `chunk` positions' logits at a time (plain
    output layers only).
    entropy=True: also (log-probs, entropies (N, T)), each position's entropy of softmax(logits /
    temperature) over the whole vocabulary, detached, zero at padding, from the same pass (and chunks).
    keep=True (model.fast_math): the output layer keeps its softmax for the backward (head_logprobs).
    buckets > 1 (model.length_buckets): the completion pass runs in up to that many length buckets, each padded to
    its own longest row (grpo_lab/model/buckets.py); equal to one pass within float rounding."""
    sharded = is_sharded(model)
    head = chunk and plain_head(model) is not None  # the chunked head: hidden states, not logits
    body = model if not head else Backbone(model) if sharded else model.base_model
    device = rollout.completion_ids.device
    ids, mask = rollout.completion_ids, rollout.completion_mask  # (N, T)
    t_real = ids.shape[1]
    if sharded and t_real < 2:  # every pass a collective: every rank runs the completion pass too (masked)
        ids, mask = F.pad(ids, (0, 2 - t_real)), F.pad(mask, (0, 2 - t_real), value=False)  # (N, 2)
    cache = PromptCache(model.config, dtype=autocast_dtype(device), mode="prefill")
    first, pos = prefill(body, rollout.prompt_ids, rollout.prompt_mask, rollout.group_size, cache,
                         logits=not head, expand_cache=False)  # (N, V) or (N, H); the cache keeps B rows
    n, t = ids.shape
    # each row's prompt: its layers' keys are gathered from the B prompts' as attention reads them, never
    # expanded to all N rows first (a copy, and in the backward a scatter, per layer)
    owner = torch.arange(rollout.prompt_ids.shape[0], device=device).repeat_interleave(rollout.group_size)
    states = first[:, None]  # (N, 1, V|H)
    if t > 1:
        attn = torch.cat([rollout.prompt_mask[owner],
                          torch.ones(n, t - 1, dtype=rollout.prompt_mask.dtype, device=device)], dim=1)
        positions = pos + torch.arange(t - 1, device=device)  # (N, T-1)
        widths = None if sharded or buckets <= 1 else needed_widths(mask).cpu().numpy()
        parts = [] if widths is None else cut(widths, buckets)  # sharded: every pass is a collective, one for all
        if len(parts) > 1:
            rest = _bucketed(body, ids, attn, positions, cache, owner, widths, parts, head, first)
        else:
            out = body(input_ids=ids[:, :-1], attention_mask=attn, position_ids=positions,
                       use_cache=True, **{cache_kwarg(body): cache.rows(owner)})
            rest = out.last_hidden_state if head else out.logits  # (N, T-1, V|H)
        states = torch.cat([states, rest], dim=1)  # (N, T, V|H)
    if not head:  # the full-logits path holds (N, T, V) logits anyway
        logp = token_logprobs(states, ids, temperature).masked_fill(~mask, 0.0)
        ent = token_entropy(states, temperature).masked_fill(~mask, 0.0) if entropy else None
    else:
        # read after the backbone's forward: a sharded root is gathered now, and this is its plain full weight,
        # whose gradient FSDP reduce-scatters into the shards in the root's backward
        weight = model.get_output_embeddings().weight
        picked, ents = head_logprobs(states[mask], weight, ids[mask], temperature, chunk, entropy,
                                   keep)  # (M,) real tokens
        logp = torch.zeros(n, t, dtype=picked.dtype, device=device).masked_scatter(mask, picked)
        ent = torch.zeros(n, t, dtype=ents.dtype, device=device).masked_scatter(mask, ents) if entropy else None
    logp, ent = logp[:, :t_real], None if ent is None else ent[:, :t_real]
    return (logp, ent) if entropy else logp


def _bucketed(body, ids, attn, positions, cache: PromptCache, owner: torch.Tensor, widths, parts, head: bool,
              first: torch.Tensor) -> torch.Tensor:
    """The completion pass (N, T-1, V|H) run bucket by bucket (`parts`: rows per bucket, longest first, each row
    needing `widths` positions, `owner` its prompt's row of the cache), each to its own longest row; what no
    bucket computes (padding after a row's last loss position, rows with nothing in the loss) is zero and never
    read."""
    n, t = ids.shape
    prompt = attn.shape[1] - (t - 1)
    outs, rows = [], []
    for part in parts:
        index = torch.as_tensor(part, device=ids.device)
        w = int(widths[part[0]]) - 1  # completion tokens this bucket feeds: its longest row's, less the last
        if w > 0:
            out = body(input_ids=ids[index, :w], attention_mask=attn[index, :prompt + w],
                       position_ids=positions[index, :w], use_cache=True,
                       **{cache_kwarg(body): cache.rows(owner[index])})
            outs.append(F.pad(out.last_hidden_state if head else out.logits, (0, 0, 0, t - 1 - w)))
        else:
            outs.append(first.new_zeros(len(part), t - 1, first.shape[-1]))
        rows.append(index)
    covered = torch.cat(rows)
    if covered.numel() < n:  # rows with nothing in the loss: no pass
        rest = torch.ones(n, dtype=torch.bool, device=ids.device)
        rest[covered] = False
        idle = rest.nonzero().squeeze(-1)
        outs.append(first.new_zeros(idle.numel(), t - 1, first.shape[-1]))
        covered = torch.cat([covered, idle])
    return torch.cat(outs)[inverse(covered)]


def enable_checkpointing(model) -> None:
    """Checkpoint every decoder layer (recomputed in the backward pass) while keeping the shared
    prompt's KV cache, which transformers' own checkpointing would drop."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x; the old name is deprecated
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache"):
        raise RuntimeError("model.gradient_checkpointing needs a transformers whose layers can keep the KV cache "
                           "under checkpointing (5.x); this one would drop the shared prompt")
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise ValueError(f"model.gradient_checkpointing: {type(model).__name__} has no checkpointable layers")
    for layer in layers:
        layer._can_checkpoint_with_cache = True  # safe: PromptCache's training modes are pure
