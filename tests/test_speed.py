"""Real-model speed-ups against the plain path they replace: gqa_eager attention (log-probs of the training
pass bitwise, its gradients within 1e-5 relative; rollouts the same tokens, log-probs within 1e-5), the growing KV
cache bitwise; the split decode cache (each prompt's keys read once for its rows) the same tokens;
model.fast_math's one-pass sampler and kept output-layer softmax within stated float tolerances;
model.dtype=autocast_bf16's context, warning and fp32 reference."""

import copy
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig
from transformers.cache_utils import DynamicLayer

from fixtures.models import build_chat_model, build_gemma3_model
from grpo_lab.config import TrainConfig
from grpo_lab.model import kvcache
from grpo_lab.model.attention import attention_for, gqa_eager_attention
from grpo_lab.model.forward import prefill
from grpo_lab.model.kvcache import GrowLayer, PromptCache, SplitLayer
from grpo_lab.model.load import amp, bf16_warning, cpu_has_bf16, load_policy
from grpo_lab.model.logprobs import completion_logprobs, head_logprobs
from grpo_lab.rollout import generate
from grpo_lab.rollout.generate import sample_groups
from grpo_lab.run.record import RunRecord
from grpo_lab.train.trainer import Trainer

PROMPTS = ["What is 3 + 4?", "What is 31 + 14? Think."]


@pytest.fixture(scope="module")
def smol_shaped(tmp_path_factory) -> Path:
    """SmolLM2's attention shape in small: 9 query heads on 3 KV heads."""
    return build_chat_model(tmp_path_factory.mktemp("models") / "gqa", hidden_size=72, heads=9, kv_heads=3)


@pytest.fixture(scope="module")
def qwen2_real(tmp_path_factory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("models") / "qwen2-real", vocab_size=151_936)


def draw(model, tok, seed: int = 0, **kw):
    return sample_groups(model, tok, PROMPTS, 4, max_new_tokens=12, temperature=1.0,
                         generator=torch.Generator().manual_seed(seed), end_ids=[tok.eos_token_id], **kw)


def test_gqa_eager_is_picked_for_grouped_heads_and_equals_eager(smol_shaped):
    model, tok = load_policy("hf", str(smol_shaped))
    assert model.config._attn_implementation == "gqa_eager"
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    tiny, _ = load_policy("tiny", None)
    assert tiny.config._attn_implementation == "eager"  # no grouped heads: plain eager, as before
    assert attention_for(model.config, torch.device("cuda")) == "sdpa"
    for seed in (0, 1, 2):  # sampled rollouts: the same tokens; the decode's one-query products are grouped
        a, b = draw(model, tok, seed), draw(eager, tok, seed)  # into other GEMM shapes: log-probs within 1e-5
        assert torch.equal(a.completion_ids, b.completion_ids)
        assert (a.old_logp - b.old_logp).abs().max() < 1e-5
    ro = draw(model, tok)
    for chunk in (0, 512):  # the training passes, gradients included
        grads = []
        for m in (model, eager):
            m.zero_grad()
            logp = completion_logprobs(m, ro, 1.0, chunk=chunk)
            logp.sum().backward()
            grads.append((logp.detach(), [p.grad.clone() for p in m.parameters()]))
        assert torch.equal(grads[0][0], grads[1][0])  # log-probs bitwise; gradients within 1e-5 of each tensor's scale
        assert all((x - y).abs().max() <= 1e-5 * y.abs().max() for x, y in zip(grads[0][1], grads[1][1]))


def test_the_growing_cache_equals_the_concatenating_one_bitwise(smol_shaped):
    model, tok = load_policy("hf", str(smol_shaped))
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    grow, plain = PromptCache(model.config, reserve=2), PromptCache(model.config)  # room for 2: it regrows too
    assert all(type(layer) is GrowLayer for layer in grow.layers)
    with torch.inference_mode():
        outs = []
        for cache in (grow, plain):
            logits, pos = prefill(model, enc["input_ids"], enc["attention_mask"], 3, cache)
            attn = enc["attention_mask"].repeat_interleave(3, dim=0)
            steps = [logits]
            for t in range(6):
                tok_ids = logits.argmax(-1)
                if t == 2:  # rows 1 and 4 finish: the rest go on
                    keep = torch.tensor([0, 2, 3, 5])
                    cache.batch_select_indices(keep)
                    tok_ids, attn, pos = tok_ids[keep], attn[keep], pos[keep]
                attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
                logits = model(input_ids=tok_ids[:, None], attention_mask=attn, position_ids=pos, use_cache=True,
                               cache=cache).logits[:, -1]
                pos = pos + 1
                steps.append(logits)
            outs.append(steps)
    assert all(torch.equal(x, y) for x, y in zip(*outs))
    assert torch.equal(grow.layers[0].keys, plain.layers[0].keys)


def test_split_attention_equals_attention_over_each_rows_whole_cache():
    """Three left-padded prompts with 3, 1 and 2 rows; rows leave (prompt 1 keeps none); each row's own tokens grow."""
    config = LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                         vocab_size=16)
    g = torch.Generator().manual_seed(0)
    hkv, p, d = 2, 5, 8
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 1, 1, 1, 1]])
    cache = PromptCache(config, reserve=1)  # room for one: the third token regrows the rows' buffers
    prompt_k, prompt_v = torch.randn(3, hkv, p, d, generator=g), torch.randn(3, hkv, p, d, generator=g)
    cache.update(prompt_k, prompt_v, 0)
    cache.split(mask, torch.tensor([3, 1, 2]))
    assert isinstance(cache.layers[0], SplitLayer)
    module = torch.nn.Module()
    module.layer_idx = 0
    owner, own_k, own_v = torch.tensor([0, 0, 0, 1, 2, 2]), [], []
    for t, keep in enumerate([None, torch.tensor([0, 2, 4, 5]), torch.tensor([1, 2, 3])]):
        if keep is not None:  # rows leave; the others keep their own tokens so far
            cache.batch_select_indices(keep)
            owner, own_k, own_v = owner[keep], [k[keep] for k in own_k], [v[keep] for v in own_v]
        n = owner.shape[0]
        own_k.append(torch.randn(n, hkv, 1, d, generator=g))
        own_v.append(torch.randn(n, hkv, 1, d, generator=g))
        keys, values = cache.update(own_k[-1], own_v[-1], 0)
        assert cache.get_seq_length() == p + t + 1
        query = torch.randn(n, 4, 1, d, generator=g)
        out, _ = gqa_eager_attention(module, query, keys, values, None, 0.3, split_cache=cache)
        for r in range(n):  # each row alone on its prompt's keys and its own, under eager's additive mask
            whole_k = torch.cat([prompt_k[owner[r]], *[k[r] for k in own_k]], dim=-2)[None]
            whole_v = torch.cat([prompt_v[owner[r]], *[v[r] for v in own_v]], dim=-2)[None]
            bias = torch.cat([mask[owner[r]], torch.ones(t + 1, dtype=torch.long)]).eq(0)
            bias = torch.zeros(bias.shape).masked_fill(bias, torch.finfo(torch.float32).min)[None, None, None]
            want, _ = gqa_eager_attention(module, query[r:r + 1], whole_k, whole_v, bias, 0.3)
            torch.testing.assert_close(out[r:r + 1], want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("max_rows", [None, 5])
def test_the_split_decode_draws_the_tokens_of_the_expanded_cache(smol_shaped, monkeypatch, max_rows):
    model, tok = load_policy("hf", str(smol_shaped))
    shots = "Add the numbers. 2 + 5 = 7. 31 - 14 + 6 = 23. Now: "  # a common beginning: prefill_shared's path too
    prompts = [shots + q for q in PROMPTS] + PROMPTS
    ends = list(range(0, model.config.vocab_size, 7))  # many end tokens: rows finish at different steps
    splits = []
    monkeypatch.setattr(PromptCache, "split", lambda self, *a, _f=PromptCache.split: splits.append(1) or _f(self, *a))
    for batch in (prompts[:3], prompts[2:]):
        kw = dict(max_new_tokens=10, temperature=1.0, end_ids=ends, max_rows=max_rows)
        split = sample_groups(model, tok, batch, 4, generator=torch.Generator().manual_seed(1), **kw)
        used = len(splits)
        with monkeypatch.context() as m:
            m.setattr(generate, "GQA_EAGER", "no such attention")  # the expanded cache
            whole = sample_groups(model, tok, batch, 4, generator=torch.Generator().manual_seed(1), **kw)
        assert used > 0 and len(splits) == used  # the first draw split its cache, the second did not
        assert len(set(split.lengths.tolist())) > 2  # rows left the batch at several steps
        assert split.texts == whole.texts and torch.equal(split.completion_ids, whole.completion_ids)
        torch.testing.assert_close(split.old_logp, whole.old_logp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("window", [512, 8])
def test_gemma3s_sliding_layers_run_as_plain_ones_where_their_window_holds_the_whole_sequence(tmp_path, monkeypatch,
                                                                                              window):
    """A window of 512 holds prompt and reply: the shared beginning and the split decode run, the same greedy text as
    transformers' generate and the same sampled tokens as the sliding layers' own cache. A window of 8 does not: the
    sliding layers keep their own cache, and the greedy text is still generate's."""
    model, tok = load_policy("hf", str(build_gemma3_model(tmp_path / "gemma3", sliding_window=window)))
    assert model.config._attn_implementation == "gqa_eager"
    shots = "Add the numbers. 2 + 5 = 7. 31 - 14 + 6 = 23. Now: "
    prompts = [shots + q for q in PROMPTS]
    splits = []
    monkeypatch.setattr(PromptCache, "split", lambda self, *a, _f=PromptCache.split: splits.append(1) or _f(self, *a))
    greedy = sample_groups(model, tok, prompts, 2, max_new_tokens=8, temperature=0.0, generator=torch.Generator(),
                           end_ids=[tok.eos_token_id])
    assert bool(splits) == (window == 512)
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=8, do_sample=False, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    assert greedy.texts == [t for t in tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
                            for _ in range(2)]
    kw = dict(max_new_tokens=8, end_ids=list(range(0, model.config.vocab_size, 7)))  # rows finish at several steps
    sampled = sample_groups(model, tok, prompts, 4, temperature=1.0, generator=torch.Generator().manual_seed(2), **kw)
    monkeypatch.setattr(kvcache, "plain_within", lambda layer, longest: type(layer) is DynamicLayer)
    own = sample_groups(model, tok, prompts, 4, temperature=1.0, generator=torch.Generator().manual_seed(2), **kw)
    assert len(set(sampled.lengths.tolist())) > 2 and torch.equal(sampled.completion_ids, own.completion_ids)
    torch.testing.assert_close(sampled.old_logp, own.old_logp, atol=1e-5, rtol=0)


def test_fast_math_sampler_draws_the_same_tokens_with_logprobs_within_1e5(qwen2_real):
    model, tok = load_policy("hf", str(qwen2_real))
    for seed in (0, 1):
        exact, fast = draw(model, tok, seed), draw(model, tok, seed, fast=True)
        assert torch.equal(exact.completion_ids, fast.completion_ids)
        assert (exact.old_logp - fast.old_logp).abs().max() < 1e-5


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_kept_softmax_gives_the_same_logprobs_and_gradients_within_float_rounding(temperature):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(96, 64, generator=g, requires_grad=True)  # (M, H)
    weight = torch.randn(151_936, 64, generator=g).mul_(0.05).requires_grad_()  # (V, H): Qwen2.5's vocabulary
    tokens = torch.randint(0, 151_936, (96,), generator=g)
    out = []
    for keep in (False, True):
        logp, _ = head_logprobs(hidden, weight, tokens, temperature, chunk=32, keep=keep)
        gh, gw = torch.autograd.grad((logp * torch.linspace(-1, 1, 96)).sum(), (hidden, weight))
        out.append((logp.detach(), gh, gw))
    assert torch.equal(out[0][0], out[1][0])  # the forward is the same computation
    assert (out[0][1] - out[1][1]).abs().max() <= 1e-6 * out[0][1].abs().max()
    assert (out[0][2] - out[1][2]).abs().max() <= 1e-6 * out[0][2].abs().max()


def test_autocast_bf16_runs_under_cpu_autocast_warns_without_bf16_units_and_keeps_an_fp32_reference(tmp_path):
    cpu = torch.device("cpu")
    with amp("autocast_bf16", cpu):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with amp("auto", cpu):
        assert not torch.is_autocast_enabled("cpu")  # the default on CPU stays exact fp32
    warning = bf16_warning("autocast_bf16", cpu)
    assert (warning is None) == cpu_has_bf16()
    assert bf16_warning("auto", cpu) is None
    cfg = TrainConfig(out_dir=str(tmp_path / "run"))
    cfg.model.dtype = "autocast_bf16"
    Path(cfg.out_dir).mkdir()
    trainer = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    assert {p.dtype for p in trainer.ref.parameters()} == {p.dtype for p in trainer.model.parameters()} \
        == {torch.float32}
    trainer.scorer.close()
