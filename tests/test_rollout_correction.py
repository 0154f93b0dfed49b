"""algo.rollout_correction and the steps table's rollout/train mismatch, against plain loops written apart from the
code (grpo_lab/train/rollout_correction.py), and a real update through the trainer's own path."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.train.objective import grpo_loss
from grpo_lab.train.rollout_correction import COLUMNS, MODES, correction_weights, mismatch_stats, mismatch_sums


def batch(seed: int = 0, n: int = 6, t: int = 7, spread: float = 0.4):
    """Train and rollout log-probs of n sequences of t tokens, with ragged lengths (padding after the end)."""
    g = torch.Generator().manual_seed(seed)
    train = -torch.rand(n, t, generator=g) * 3
    rollout = train + torch.randn(n, t, generator=g) * spread
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    mask = torch.arange(t)[None] < lengths[:, None]
    return train, rollout, mask


def oracle_weights(train, rollout, mask, mode, cap):
    """Each token's weight by a plain loop over rows and tokens, in float64."""
    n, t = train.shape
    out = np.zeros((n, t))
    for i in range(n):
        tokens = [j for j in range(t) if mask[i, j]]
        seq = math.exp(sum(float(train[i, j]) - float(rollout[i, j]) for j in tokens))
        for j in tokens:
            r = math.exp(float(train[i, j]) - float(rollout[i, j])) if mode.startswith("token") else seq
            out[i, j] = min(r, cap) if mode.endswith("truncate") else (0.0 if r > cap else r)
    return out


@pytest.mark.parametrize("mode", [m for m in MODES if m != "none"])
@pytest.mark.parametrize("cap", [1.05, 2.0, 5.0])
def test_each_mode_weights_equal_a_plain_loop(mode, cap):
    binds, passes = 0, 0
    for seed in range(8):
        train, rollout, mask = batch(seed=seed, n=12, spread=1.0)
        got = correction_weights(train, rollout, mask, mode, cap)
        want = oracle_weights(train, rollout, mask, mode, cap)
        np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-6, atol=1e-7)
        capped = (want == cap) if mode.endswith("truncate") else (mask.numpy() & (want == 0))
        binds, passes = binds + int(capped.sum()), passes + int((want[mask.numpy()] > 0).sum())
    assert binds and passes  # the cap binds somewhere and not everywhere


def test_none_leaves_the_loss_bit_for_bit_and_a_weight_of_one_changes_nothing():
    train, rollout, mask = batch(seed=3)
    adv = torch.tensor([1.0, -0.5, 0.0, 2.0, -1.0, 0.3])
    logp = (train + 0.01).requires_grad_()
    assert correction_weights(train, rollout, mask, "none", 2.0) is None
    base, _ = grpo_loss(logp, train, adv, mask, ref_logp=train - 0.1)
    same, _ = grpo_loss(logp, train, adv, mask, ref_logp=train - 0.1, is_weight=None)
    assert torch.equal(base, same)
    for mode in MODES[1:]:  # train == rollout: every ratio is exactly 1, the loss and its gradient unchanged
        w = correction_weights(train, train, mask, mode, 2.0)
        corrected, _ = grpo_loss(logp, train, adv, mask, ref_logp=train - 0.1, is_weight=w)
        assert torch.equal(base, corrected), mode
        (g1,), (g2,) = torch.autograd.grad(base, logp, retain_graph=True), torch.autograd.grad(corrected, logp)
        assert torch.equal(g1, g2), mode


def test_the_weight_multiplies_the_surrogate_only_and_masked_tokens_stay_in_the_normaliser():
    train, rollout, mask = batch(seed=5)
    adv = torch.tensor([1.0, -0.5, 0.7, 2.0, -1.0, 0.3])
    w = correction_weights(train, rollout, mask, "token_mask", 1.2)
    loss, _ = grpo_loss(train, train, adv, mask, beta=0.0, agg="token", is_weight=w)
    # ratio 1 at the first update: the surrogate is -A a token; the token mean over every real token
    want = sum(-float(adv[i]) * float(w[i, j]) for i in range(6) for j in range(7) if mask[i, j]) / int(mask.sum())
    assert float(loss) == pytest.approx(want, rel=1e-6)
    kl_only, _ = grpo_loss(train, train, torch.zeros(6), mask, ref_logp=train - 0.3, beta=1.0, agg="token",
                           is_weight=torch.zeros_like(w))
    kl_plain, _ = grpo_loss(train, train, torch.zeros(6), mask, ref_logp=train - 0.3, beta=1.0, agg="token")
    assert torch.equal(kl_only, kl_plain)  # the KL term is never reweighted


def oracle_stats(train, rollout, mask, mode, cap):
    d = [[float(train[i, j]) - float(rollout[i, j]) for j in range(train.shape[1]) if mask[i, j]]
         for i in range(train.shape[0])]
    d = [row for row in d if row]
    flat = [x for row in d for x in row]
    seq = [math.exp(sum(row)) for row in d]
    over = (sum(s > cap for s in seq) / len(seq)) if mode.startswith("sequence") else \
        sum(math.exp(x) > cap for x in flat) / len(flat)
    return {"rollout_logp_diff_mean": sum(map(abs, flat)) / len(flat), "rollout_logp_diff_max": max(map(abs, flat)),
            "rollout_kl": sum(math.exp(x) - 1 - x for x in flat) / len(flat),
            "rollout_ratio_mean": sum(math.exp(x) for x in flat) / len(flat),
            "rollout_ess": sum(seq) ** 2 / (len(seq) * sum(s * s for s in seq)), "rollout_capped": over}


@pytest.mark.parametrize("mode", MODES)
def test_the_mismatch_figures_recount_and_add_over_micro_batches(mode):
    train, rollout, mask = batch(seed=11, n=8)
    want = oracle_stats(train, rollout, mask, mode, 1.5)
    halves = [mismatch_sums(train[s], rollout[s], mask[s], mode, 1.5) for s in (slice(0, 3), slice(3, 8))]
    summed = halves[0] + halves[1]
    got = mismatch_stats(summed, max(float(h[9]) for h in halves))
    assert list(got) == list(COLUMNS)
    for key in COLUMNS:
        assert got[key] == pytest.approx(want[key], rel=1e-9), key
    whole = mismatch_stats(mismatch_sums(train, rollout, mask, mode, 1.5),
                           float(mismatch_sums(train, rollout, mask, mode, 1.5)[9]))
    assert whole == pytest.approx(got, rel=1e-12)


def test_no_fresh_token_is_nan_and_an_overflowing_sequence_ratio_is_no_number():
    train, rollout, mask = batch(seed=2)
    nothing = mismatch_stats(mismatch_sums(train, rollout, torch.zeros_like(mask), "none", 2.0), 0.0)
    assert all(math.isnan(v) for v in nothing.values())
    far = rollout - 200.0  # a sequence ratio of e^(200 x tokens): past float64
    got = mismatch_stats(mismatch_sums(train, far, mask, "none", 2.0), 200.0)
    assert math.isnan(got["rollout_ess"]) and got["rollout_capped"] == 1.0 and got["rollout_logp_diff_mean"] > 199


def test_the_keys_are_checked_in_one_line():
    cfg = TrainConfig()
    for algo, key in ((dict(rollout_correction="tis"), "algo.rollout_correction"),
                      (dict(rollout_correction_cap=1.0), "algo.rollout_correction_cap"),
                      (dict(rollout_correction_cap=0.5), "algo.rollout_correction_cap")):
        with pytest.raises(ConfigError, match=key) as e:
            validate(dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, **algo)))
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="rollout.engine") as e:
        validate(dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, engine="sglang")))
    assert "'hf', 'vllm'" in str(e.value)


def test_a_real_run_measures_the_hf_engines_mismatch_at_rounding_and_leaves_replayed_samples_out(tiny_cfg):
    """The hf engine's decode and the update's first pass run one model: |d| at float rounding every step. A replayed
    sample's old_logp is an earlier policy's (far from this one's after a few steps at this lr): had it entered the
    figures, their max would be orders of magnitude larger."""
    from pathlib import Path

    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.trainer import Trainer

    tiny_cfg.sampler.name, tiny_cfg.algo.lr, tiny_cfg.eval.n = "replay", 3e-3, 0
    Path(tiny_cfg.out_dir).mkdir(parents=True)
    trainer = Trainer(tiny_cfg, RunRecord(Path(tiny_cfg.out_dir), tiny_cfg.seed))
    rows = [trainer.step() for _ in range(5)]
    trainer.scorer.close()
    assert sum(r["reused"] for r in rows) > 0
    for r in rows:
        assert set(COLUMNS) <= set(r)
        if r["trained"] - r["reused"]:
            assert r["rollout_logp_diff_max"] < 1e-4 and r["rollout_kl"] < 1e-8, r
            assert r["rollout_ess"] == pytest.approx(1.0, abs=1e-6) and r["rollout_capped"] == 0.0


def test_the_vllm_engine_without_vllm_is_one_line_that_gives_the_install():
    """Where vLLM is not installed (CI, the README's test environment), before any model loads."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: tests/test_vllm_engine.py tests the engine itself")
    cfg = TrainConfig()
    cfg.rollout.engine = "vllm"
    with pytest.raises(ConfigError, match=r"^rollout.engine='vllm' is invalid: needs vLLM, which is not installed: "
                                          r"pip install -e '\.\[vllm\]'"):
        validate(cfg)
