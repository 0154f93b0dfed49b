"""The rollout against plain references: HF generate, and full-sequence log-probs without a shared prompt cache."""

import pytest
import torch
from reference import plain_logprobs

from grpo_lab.model import forward
from grpo_lab.model.forward import shared_length
from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.model.logprobs import completion_logprobs
from grpo_lab.rollout.generate import sample_groups

PROMPTS = ["7+5=", "31+4=", "58+67=", "2+2="]  # different lengths: left padding is exercised


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny", None, device="cpu", dtype="float32")


SHARED = ["Compute: 7+5=", "Compute: 31+4=", "Compute: 58+67=", "Compute: 2+2="]  # 9 characters in common


@pytest.mark.parametrize("prompts", [PROMPTS, SHARED], ids=["own", "shared beginning"])
def test_greedy_rollout_equals_transformers_generate(policy, prompts):
    model, tok = policy
    ro = sample_groups(model, tok, prompts, 3, max_new_tokens=6, temperature=0.0,
                       generator=torch.Generator().manual_seed(0), end_ids=eos_ids(model, tok))
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=6, do_sample=False, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    want = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert ro.texts == [w for w in want for _ in range(3)]  # each prompt's G samples are identical when greedy


def test_rollout_shapes_masks_and_truncation(policy):
    model, tok = policy
    ro = sample_groups(model, tok, PROMPTS, 8, max_new_tokens=2, temperature=1.0,
                       generator=torch.Generator().manual_seed(0), end_ids=eos_ids(model, tok))
    n = len(PROMPTS) * 8
    assert ro.completion_ids.shape[0] == ro.old_logp.shape[0] == len(ro.texts) == n
    assert torch.equal(ro.lengths, ro.completion_mask.sum(1))
    ended = (ro.completion_ids == tok.eos_token_id) & ro.completion_mask
    assert torch.equal(ro.truncated, ~ended.any(1))
    assert (ro.old_logp[~ro.completion_mask] == 0).all() and (ro.old_logp[ro.completion_mask] < 0).all()
    assert ro.truncated.any()  # two tokens cannot hold "58+67=" -> "125" and its end token


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompt_logprobs_and_gradients_equal_the_plain_pass(policy, temperature):
    model, tok = policy
    ro = sample_groups(model, tok, PROMPTS, 4, max_new_tokens=5, temperature=temperature,
                       generator=torch.Generator().manual_seed(1), end_ids=eos_ids(model, tok))
    fast = completion_logprobs(model, ro, temperature)
    torch.testing.assert_close(fast, ro.old_logp, atol=1e-5, rtol=0)  # the sampler's own log-probs
    weights = torch.randn(fast.shape, generator=torch.Generator().manual_seed(2))
    grads = []
    for fn in (completion_logprobs, plain_logprobs):
        model.zero_grad()
        lp = fn(model, ro, temperature)
        (lp * weights).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(fast, plain_logprobs(model, ro, temperature), atol=1e-5, rtol=0)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    model.zero_grad()


@pytest.mark.parametrize("max_rows", [5, 2])
def test_capped_generation_gives_identical_greedy_outputs(policy, max_rows):
    model, tok = policy
    kw = dict(max_new_tokens=6, temperature=0.0, end_ids=eos_ids(model, tok))
    whole = sample_groups(model, tok, PROMPTS, 3, generator=torch.Generator().manual_seed(0), **kw)
    capped = sample_groups(model, tok, PROMPTS, 3, generator=torch.Generator().manual_seed(0), max_rows=max_rows, **kw)
    assert capped.texts == whole.texts  # 5 rows a call split groups of 3 across calls
    for f in ("completion_ids", "completion_mask", "lengths", "truncated", "prompt_ids"):
        assert torch.equal(getattr(capped, f), getattr(whole, f)), f
    torch.testing.assert_close(capped.old_logp, whole.old_logp, atol=1e-5, rtol=0)


def test_capped_sampling_is_reproducible_and_well_formed(policy):
    model, tok = policy
    kw = dict(max_new_tokens=4, temperature=1.0, end_ids=eos_ids(model, tok), max_rows=7)
    a = sample_groups(model, tok, PROMPTS, 4, generator=torch.Generator().manual_seed(3), **kw)
    b = sample_groups(model, tok, PROMPTS, 4, generator=torch.Generator().manual_seed(3), **kw)
    assert a.texts == b.texts and torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.lengths, a.completion_mask.sum(1)) and len(a.texts) == 16
    torch.testing.assert_close(completion_logprobs(model, a, 1.0), a.old_logp, atol=1e-5, rtol=0)


def test_the_common_beginning_is_found_and_run_once(policy):
    model, tok = policy
    enc = tok(SHARED, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    assert shared_length(enc["input_ids"], enc["attention_mask"]) == len("Compute: ")
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    assert shared_length(enc["input_ids"], enc["attention_mask"]) == 0
    one = tok(["Compute: 7+5="], return_tensors="pt", add_special_tokens=False)
    assert shared_length(one["input_ids"], one["attention_mask"]) == 0  # one prompt: nothing to share
    same = tok(["7+5=", "7+5="], return_tensors="pt", add_special_tokens=False)
    assert shared_length(same["input_ids"], same["attention_mask"]) == 3  # each keeps a token of its own
    shapes = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        sample_groups(model, tok, SHARED, 2, max_new_tokens=1, temperature=1.0,
                      generator=torch.Generator().manual_seed(0), end_ids=eos_ids(model, tok))
    finally:
        hook.remove()
    assert shapes == [(1, len("Compute: ")), (4, len("58+67="))]  # the beginning once, then each prompt's end


@pytest.mark.parametrize("max_rows", [None, 3])
def test_a_shared_beginning_draws_the_same_tokens_as_each_prompt_whole(policy, monkeypatch, max_rows):
    model, tok = policy
    kw = dict(max_new_tokens=6, temperature=1.0, end_ids=eos_ids(model, tok), max_rows=max_rows)
    shared = sample_groups(model, tok, SHARED, 4, generator=torch.Generator().manual_seed(5), **kw)
    monkeypatch.setattr(forward, "MIN_SHARED", 10**9)
    whole = sample_groups(model, tok, SHARED, 4, generator=torch.Generator().manual_seed(5), **kw)
    assert shared.texts == whole.texts and torch.equal(shared.completion_ids, whole.completion_ids)
    torch.testing.assert_close(shared.old_logp, whole.old_logp, atol=1e-5, rtol=0)
    # the training pass runs every prompt whole; off the tiny's training prompts, log-probs reach -7 and the two
    # paths' rounding 5e-5, with or without the shared beginning
    torch.testing.assert_close(completion_logprobs(model, shared, 1.0), shared.old_logp, atol=1e-4, rtol=0)
