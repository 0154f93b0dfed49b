"""The policy/reference pass against plain full-sequence passes: chunked log-probs through the output
layer, and gradient checkpointing that keeps the shared prompt cache; log-probs and gradients."""

import copy
import dataclasses
import itertools

import numpy as np
import pytest
import torch
from reference import plain_logprobs
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from grpo_lab.model.buckets import MIN_SAVED, cut
from grpo_lab.model.logprobs import completion_logprobs, enable_checkpointing, plain_head
from grpo_lab.rollout.generate import Rollout

V = 1000  # vocabulary: many chunks of logits per row, and a gather far from the start


def random_model(kind: str):
    torch.manual_seed(0)
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    if kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True))
    return model.train()  # the policy pass runs in training mode


def hand_rollout(group_size: int = 4) -> Rollout:
    """3 prompts of lengths 5, 2, 4 (left padded) x G completions of lengths 1..6 (right padded)."""
    g = torch.Generator().manual_seed(1)
    prompt_lens, width, t = [5, 2, 4], 5, 6
    prompt_mask = torch.tensor([[0] * (width - n) + [1] * n for n in prompt_lens])
    prompt_ids = torch.randint(1, V, (3, width), generator=g) * prompt_mask
    n = 3 * group_size
    lengths = torch.tensor([1 + (i * 5) % t for i in range(n)])  # (N,) 1..6
    mask = torch.arange(t)[None] < lengths[:, None]  # (N, T)
    ids = torch.randint(1, V, (n, t), generator=g) * mask
    return Rollout(prompt_ids, prompt_mask, ids, mask, torch.zeros(n, t), [""] * n, lengths, lengths == t, group_size)


def logprobs_and_grads(model, ro, fn):
    weights = torch.randn(ro.completion_ids.shape, generator=torch.Generator().manual_seed(2))
    model.zero_grad()
    lp = fn(model, ro)
    (lp * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    return lp.detach(), grads


def assert_same(a, b, atol=1e-5):
    torch.testing.assert_close(a[0], b[0], atol=atol, rtol=0)
    assert a[1].keys() == b[1].keys()
    for name in a[1]:
        torch.testing.assert_close(a[1][name], b[1][name], atol=atol, rtol=1e-4, msg=name)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_and_gradients_equal_the_plain_pass(kind, temperature):
    model, ro = random_model(kind), hand_rollout()
    assert plain_head(model) is model.get_output_embeddings().weight
    plain = logprobs_and_grads(model, ro, lambda m, r: plain_logprobs(m, r, temperature))
    full = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, temperature, chunk=0))
    chunked = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, temperature, chunk=5))
    one = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, temperature, chunk=10**6))
    assert_same(full, plain)
    assert_same(chunked, plain)
    assert_same(one, chunked, atol=1e-6)
    assert (chunked[0][~ro.completion_mask] == 0).all() and (chunked[0][ro.completion_mask] < 0).all()


@pytest.mark.parametrize("chunk", [0, 5])
def test_checkpointing_keeps_the_prompt_logprobs_and_gradients_equal(chunk):
    model, ro = random_model("qwen2"), hand_rollout()
    off = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, 1.0, chunk=chunk))
    checkpointed = copy.deepcopy(model)
    enable_checkpointing(checkpointed)
    on = logprobs_and_grads(checkpointed, ro, lambda m, r: completion_logprobs(m, r, 1.0, chunk=chunk))
    assert_same(on, off, atol=1e-6)
    # transformers' own checkpointing drops the cache: completions lose their prompt
    hf = copy.deepcopy(model)
    hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    broken = completion_logprobs(hf, ro, 1.0, chunk=chunk).detach()
    assert not torch.allclose(broken, off[0], atol=1e-3)


def test_kv_cache_stores_the_autocast_dtype_and_that_changes_no_result(monkeypatch):
    from grpo_lab.model import logprobs
    from grpo_lab.model.forward import prefill
    from grpo_lab.model.kvcache import PromptCache

    model, ro = random_model("qwen2"), hand_rollout()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cache = PromptCache(model.config, dtype=logprobs.autocast_dtype(torch.device("cpu")))
        prefill(model, ro.prompt_ids, ro.prompt_mask, ro.group_size, cache)
        plain = PromptCache(model.config)
        prefill(model, ro.prompt_ids, ro.prompt_mask, ro.group_size, plain)
        assert cache.layers[0].keys.dtype == torch.bfloat16 and plain.layers[0].keys.dtype == torch.float32
        cast = completion_logprobs(model, ro, 1.0, chunk=0)
        monkeypatch.setattr(logprobs, "autocast_dtype", lambda device: None)  # the cache keeps fp32 keys
        uncast = completion_logprobs(model, ro, 1.0, chunk=0)
    assert torch.equal(cast, uncast)  # attention reads keys and values in bf16 under autocast anyway


def test_bf16_reference_keeps_fp32_buffers():
    from grpo_lab.model.load import frozen_copy

    model = random_model("qwen2")
    ref = frozen_copy(model, torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in ref.parameters())
    assert all(b.dtype == torch.float32 for b in ref.buffers() if b.is_floating_point())  # rotary inv_freq
    assert next(model.parameters()).dtype == torch.float32  # the policy is untouched


def plain_entropy(model, ro, temperature: float) -> torch.Tensor:
    """Entropy (N, T) of each completion position from full logits: -sum p log p over the vocabulary, a loop."""
    g = ro.group_size
    ids = torch.cat([ro.prompt_ids.repeat_interleave(g, 0), ro.completion_ids], 1)
    mask = torch.cat([ro.prompt_mask.repeat_interleave(g, 0), torch.ones_like(ro.completion_ids)], 1)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, ro.prompt_ids.shape[1] - 1:-1]
    out = torch.zeros(ro.completion_ids.shape)
    for i in range(out.shape[0]):
        for t in range(out.shape[1]):
            if ro.completion_mask[i, t]:
                p = torch.softmax(logits[i, t].double() / temperature, -1)
                out[i, t] = float(-(p * p.log()).sum())
    return out


@pytest.mark.parametrize("chunk", [0, 5, 10**6])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_of_the_chunked_pass_equals_the_full_softmax_and_is_detached(chunk, temperature):
    model, ro = random_model("qwen2"), hand_rollout()
    want = plain_entropy(model, ro, temperature)
    logp, ent = completion_logprobs(model, ro, temperature, chunk=chunk, entropy=True)
    torch.testing.assert_close(ent, want, atol=1e-5, rtol=1e-5)
    assert not ent.requires_grad and logp.requires_grad and (ent[~ro.completion_mask] == 0).all()
    assert (ent[ro.completion_mask] > 0).all()
    # asking for the entropy changes neither the log-probs nor their gradients
    alone = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, temperature, chunk=chunk))
    both = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, temperature, chunk=chunk,
                                                                             entropy=True)[0])
    assert_same(both, alone, atol=0)


class LargestVocabTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the largest tensor any op allocates whose last dimension is the vocabulary (an output that
    shares an input's storage, a view such as the weight's transpose, allocates nothing)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.largest = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if (isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == self.vocab
                    and t.untyped_storage().data_ptr() not in inputs):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("group_size", [2, 8])
def test_entropy_never_holds_more_than_a_chunk_of_logits(group_size):
    """The chunked pass with entropies (forward and backward) holds at most (chunk, V) vocabulary-wide values at
    once, whatever the number of positions; the full-logits path holds all (N, T, V) of them."""
    model, ro = random_model("qwen2"), hand_rollout(group_size)
    positions = int(ro.completion_mask.sum())
    for chunk in (5, 0):
        mode = LargestVocabTensor(V)
        with mode:
            logp, ent = completion_logprobs(model, ro, 1.0, chunk=chunk, entropy=True)
            logp.sum().backward()
        if chunk:
            assert mode.largest == chunk * V  # not positions x V: memory does not grow with V x T
        else:
            assert mode.largest >= positions * V


def positions(widths, parts) -> int:
    return sum(len(p) * int(widths[p].max()) for p in parts)


def fewest_by_search(widths: np.ndarray, buckets: int) -> list[int]:
    """The fewest padded positions with exactly k buckets, k = 1..buckets, by trying every cut of the rows
    sorted by width (brute force, the truth for `cut`)."""
    w = np.sort(widths[widths > 0])[::-1]
    n, out = len(w), []
    for k in range(1, min(buckets, n) + 1):
        out.append(min(sum((j - i) * int(w[i]) for i, j in zip((0, *c), (*c, n)))
                       for c in itertools.combinations(range(1, n), k - 1)))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_length_buckets_are_the_fewest_positions_that_pay(seed):
    rng = np.random.default_rng(seed)
    n, buckets = int(rng.integers(1, 10)), int(rng.integers(1, 5))
    widths = rng.integers(0, 30, n) * (rng.random(n) < 0.9)  # some rows with nothing in the loss
    parts = cut(widths, buckets)
    rows = np.sort(np.concatenate(parts)) if parts else np.zeros(0, int)
    assert rows.tolist() == np.flatnonzero(widths > 0).tolist()  # each row that needs a pass in exactly one
    if not parts:
        return
    assert all(widths[a].min() >= widths[b].max() for a, b in zip(parts, parts[1:]))  # longest bucket first
    best = fewest_by_search(widths, buckets)
    k = len(parts)
    assert positions(widths, parts) == best[k - 1]  # the fewest positions at its number of buckets
    one = best[0]
    saved = [best[i] - best[i + 1] for i in range(len(best) - 1)]  # what each further bucket saves
    assert all(s >= MIN_SAVED * one for s in saved[:k - 1])  # every bucket it added paid
    assert k == len(best) or saved[k - 1] < MIN_SAVED * one  # and the next would not have


@pytest.mark.parametrize("chunk", [0, 5])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_length_buckets_give_the_one_pass_logprobs_and_gradients(chunk, checkpointing):
    """Bucketed passes (each padded to its own longest row, a row with nothing in the loss in none) give the one
    pass's log-probs, entropies and gradients, with the chunked output layer and the full logits, and under
    gradient checkpointing (the prompt cache read by row)."""
    model, ro = random_model("qwen2"), hand_rollout()
    ro.completion_mask[4] = False  # a truncated row masked out of the loss: no pass at all
    widths = ro.completion_mask.sum(-1).numpy()
    assert len(cut(widths, 3)) == 2  # the rollout's lengths 1..6 do split (a third bucket would not pay)
    if checkpointing:
        enable_checkpointing(model)
    one = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, 0.7, chunk=chunk))
    three = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, 0.7, chunk=chunk, buckets=3))
    assert_same(three, one, atol=1e-6)
    with torch.no_grad():
        ent_one = completion_logprobs(model, ro, 0.7, chunk=chunk, entropy=True)[1]
        ent_three = completion_logprobs(model, ro, 0.7, chunk=chunk, entropy=True, buckets=3)[1]
    torch.testing.assert_close(ent_three, ent_one, atol=1e-5, rtol=0)
    assert (three[0][4] == 0).all()


@pytest.mark.parametrize("buckets", [1, 3])
def test_training_passes_read_each_prompt_from_the_unexpanded_cache(buckets, monkeypatch):
    """The policy and reference passes keep the B prompts' keys and values (never expanded to the N rows first: a
    copy per layer, and a scatter in the backward), each row reading its own prompt's: with groups of different
    sizes, in one pass and in buckets, log-probs and gradients equal each sequence run in full."""
    from grpo_lab.model.kvcache import PromptCache

    model, ro = random_model("llama"), hand_rollout()
    ro = dataclasses.replace(ro, group_size=torch.tensor([2, 6, 4]))  # the 12 rows, prompts of unequal groups
    expanded = []
    original = PromptCache.batch_repeat_interleave
    monkeypatch.setattr(PromptCache, "batch_repeat_interleave",
                        lambda self, repeats: (expanded.append(repeats), original(self, repeats))[1])
    ours = logprobs_and_grads(model, ro, lambda m, r: completion_logprobs(m, r, 0.7, buckets=buckets))
    assert expanded == []
    assert_same(ours, logprobs_and_grads(model, ro, lambda m, r: plain_logprobs(m, r, 0.7)))
