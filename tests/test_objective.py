"""The objective against plain-Python reference loops, and the seed's own numbers."""

import math
import random

import pytest
import torch

from grpo_lab.advantage.grpo import group_advantages
from grpo_lab.train.objective import aggregate, clipped_surrogate, grpo_loss, kl_k3, loss_normalisers, sequence_weights


def ref_advantages(rows, std, eps):
    out = []
    for r in rows:
        g = len(r)
        mean = sum(r) / g
        if std == "none":
            out.append([x - mean for x in r])
            continue
        var = sum((x - mean) ** 2 for x in r) / (g if std == "population" else g - 1)
        sd = math.sqrt(var)
        if std == "population":
            out.append([0.0 if sd <= eps else (x - mean) / sd for x in r])
        else:
            out.append([(x - mean) / (sd + eps) for x in r])
    return out


@pytest.mark.parametrize("std", ["population", "sample", "none"])
def test_advantages_match_plain_loop(std):
    rng = random.Random(0)
    rows = [[float(rng.choice([0, 1])) for _ in range(8)] for _ in range(50)]
    rows += [[1.0] * 8, [0.0] * 8] + [[rng.random() * 3 for _ in range(8)] for _ in range(10)]
    got = group_advantages(torch.tensor(rows, dtype=torch.float64), std=std, eps=1e-8)
    torch.testing.assert_close(got, torch.tensor(ref_advantages(rows, std, 1e-8), dtype=torch.float64))


def test_advantages_are_scale_and_shift_invariant():
    a = group_advantages(torch.tensor([[0.0, 1.0, 2.0]]))
    b = group_advantages(torch.tensor([[0.0, 10.0, 20.0]]))
    torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
    torch.testing.assert_close(a, torch.tensor([[-math.sqrt(1.5), 0.0, math.sqrt(1.5)]]))


def test_one_right_among_eight():
    adv = group_advantages(torch.tensor([[1.0] + [0.0] * 7]))
    torch.testing.assert_close(adv[0, 0], torch.tensor(math.sqrt(7)))
    torch.testing.assert_close(adv[0, 1:], torch.full((7,), -1 / math.sqrt(7)))


@pytest.mark.parametrize("value", [0.0, 1.0, 0.3])
def test_tied_group_gives_exact_zeros(value):
    adv = group_advantages(torch.full((3, 8), value))
    assert torch.equal(adv, torch.zeros(3, 8))


def test_unknown_std_mode_lists_allowed():
    with pytest.raises(ValueError, match="'population', 'sample', 'none'"):
        group_advantages(torch.zeros(1, 2), std="bessel")


def test_kl_k3_matches_formula_and_is_nonnegative():
    g = torch.Generator().manual_seed(1)
    logp, ref = torch.randn(4, 7, generator=g), torch.randn(4, 7, generator=g)
    want = [[math.exp(r - p) - (r - p) - 1 for p, r in zip(pr, rr)] for pr, rr in zip(logp.tolist(), ref.tolist())]
    torch.testing.assert_close(kl_k3(logp, ref), torch.tensor(want))
    assert (kl_k3(logp, ref) >= 0).all() and torch.equal(kl_k3(logp, logp), torch.zeros(4, 7))


def test_clipped_surrogate_matches_plain_loop():
    g = torch.Generator().manual_seed(2)
    logp, old = torch.randn(6, 5, generator=g) * 0.3, torch.randn(6, 5, generator=g) * 0.3
    adv = torch.randn(6, generator=g)
    got = clipped_surrogate(logp, old, adv, eps_low=0.2, eps_high=0.28)
    for i in range(6):
        for t in range(5):
            rho = math.exp(logp[i, t] - old[i, t])
            a = float(adv[i])
            want = -min(rho * a, min(max(rho, 0.8), 1.28) * a)
            assert got[i, t].item() == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_aggregation_modes_match_plain_loops():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    lens = [6, 1, 3, 4]
    mask = torch.tensor([[1] * n + [0] * (6 - n) for n in lens])
    seq = sum(sum(x[i, :n].tolist()) / n for i, n in enumerate(lens)) / 4
    tok = sum(sum(x[i, :n].tolist()) for i, n in enumerate(lens)) / sum(lens)
    const = sum(sum(x[i, :n].tolist()) for i, n in enumerate(lens)) / (4 * 10)
    assert aggregate(x, mask, "sequence").item() == pytest.approx(seq)
    assert aggregate(x, mask, "token").item() == pytest.approx(tok)
    assert aggregate(x, mask, "constant", max_len=10).item() == pytest.approx(const)
    with pytest.raises(ValueError, match="loss_agg='mean'.*'sequence', 'token', 'constant'"):
        aggregate(x, mask, "mean")


def test_all_tied_batch_has_finite_loss_and_only_kl_gradient():
    g = torch.Generator().manual_seed(4)
    rewards = torch.tensor([[1.0] * 4, [0.0] * 4])  # every group tied
    adv = group_advantages(rewards).reshape(-1)
    base = torch.randn(8, 5, generator=g) * 0.1
    old, ref = base - 0.05, base + 0.1
    mask = torch.ones(8, 5, dtype=torch.bool)
    mask[0, 3:] = False

    logp = base.clone().requires_grad_(True)
    loss, stats = grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.0)
    assert math.isfinite(loss.item()) and loss.item() == 0.0
    assert math.isnan(stats.kl)  # without a reference nothing is measured: not a KL of 0
    loss.backward()
    assert torch.equal(logp.grad, torch.zeros_like(logp))  # no policy gradient from tied groups

    logp = base.clone().requires_grad_(True)
    loss, stats = grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.04)
    loss.backward()
    kl_only = base.clone().requires_grad_(True)
    (0.04 * aggregate(kl_k3(kl_only, ref), mask, "sequence")).backward()
    assert math.isfinite(loss.item()) and stats.pg_loss == 0.0 and stats.kl > 0
    torch.testing.assert_close(logp.grad, kl_only.grad)  # only the KL term moves the policy
    assert logp.grad.abs().sum() > 0


def test_loss_statistics_count_clipped_tokens():
    logp = torch.log(torch.tensor([[1.5, 1.0], [0.5, 1.0]]))
    old = torch.zeros(2, 2)
    adv = torch.tensor([1.0, -1.0])
    _, st = grpo_loss(logp, old, adv, torch.ones(2, 2, dtype=torch.bool), beta=0.0)
    assert st.clip_high == 0.25 and st.clip_low == 0.25 and st.clip_frac == 0.5


def test_unit_weight_on_a_hand_computed_example():
    # Unit A: one prompt pooled over two rounds of G = 2 (4 sequences); unit B: one round (2 sequences).
    # Sequence i has per-token losses all equal to x_i, so its token mean is x_i.
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    per_token = x[:, None].expand(6, 3).clone()
    mask = torch.ones(6, 3, dtype=torch.bool)
    mask[0, 1:] = False  # lengths differ: 1, 3, 3, 3, 3, 3
    prompt = sequence_weights([4, 2], group_size=2, mode="prompt")
    sample = sequence_weights([4, 2], group_size=2, mode="sample")
    assert prompt.tolist() == [0.5, 0.5, 0.5, 0.5, 1.0, 1.0] and sample.tolist() == [1.0] * 6
    # prompt: each prompt weighs one: ((1+2+3+4)/4 + (10+20)/2) / 2 = (2.5 + 15) / 2
    assert aggregate(per_token, mask, "sequence", seq_weight=prompt).item() == pytest.approx(8.75)
    # sample: each sequence weighs one: (1+2+3+4+10+20) / 6
    assert aggregate(per_token, mask, "sequence", seq_weight=sample).item() == pytest.approx(40 / 6)
    # token mode, prompt: unit A's tokens count half each: (0.5*(1 + 3*(2+3+4)) + 3*(10+20)) / (0.5*10 + 6)
    assert aggregate(per_token, mask, "token", seq_weight=prompt).item() == pytest.approx((14 + 90) / 11)
    assert aggregate(per_token, mask, "token", seq_weight=sample).item() == pytest.approx((28 + 90) / 16)
    # constant: (0.5*28 + 90) / ((0.5*4 + 2) * max_len)
    assert aggregate(per_token, mask, "constant", 5, seq_weight=prompt).item() == pytest.approx(104 / 20)
    with pytest.raises(ValueError, match="unit_weight='unit'.*'prompt', 'sample'"):
        sequence_weights([2], 2, "unit")


def _split_loss(logp, old, adv, mask, ref, weight, agg, pieces, naive):
    """Sum of micro-batch losses over row ranges `pieces`; naive: each micro-batch normalises itself."""
    norm = loss_normalisers(mask.sum(-1), weight, agg, max_len=7)
    total = 0
    for rows in pieces:
        t = int(mask[rows].sum(-1).max())  # a micro-batch is only as wide as its longest completion
        sl = (rows, slice(0, t))
        loss, _ = grpo_loss(logp[sl], old[sl], adv[rows], mask[sl], ref_logp=ref[sl], beta=0.04, agg=agg, max_len=7,
                            seq_weight=weight[rows], norm=None if naive else norm)
        total = total + (loss * len(range(12)[rows]) / 12 if naive and agg == "sequence" else loss)
    return total


@pytest.mark.parametrize("agg", ["sequence", "token", "constant"])
@pytest.mark.parametrize("unit_weight", ["prompt", "sample"])
def test_micro_batches_with_global_normalisers_give_the_whole_batch_gradient(agg, unit_weight):
    g = torch.Generator().manual_seed(5)
    lens = torch.tensor([7, 1, 3, 2, 6, 5, 4, 7, 2, 1, 3, 5])
    mask = torch.arange(7)[None] < lens[:, None]  # (12, 7)
    base = torch.randn(12, 7, generator=g, dtype=torch.float64) * 0.2
    old, ref = base + 0.05 * torch.randn(12, 7, generator=g, dtype=torch.float64), base - 0.1
    adv = torch.randn(12, generator=g, dtype=torch.float64)
    weight = sequence_weights([6, 2, 4], group_size=2, mode=unit_weight).double()  # units of 3, 1, 2 rounds
    pieces = [slice(0, 6), slice(6, 8), slice(8, 12)]  # one unit per micro-batch

    grads = {}
    for name, parts, naive in [("whole", [slice(0, 12)], False), ("micro", pieces, False), ("naive", pieces, True)]:
        logp = base.clone().requires_grad_(True)
        _split_loss(logp, old, adv, mask, ref, weight, agg, parts, naive).backward()
        grads[name] = logp.grad
    torch.testing.assert_close(grads["micro"], grads["whole"], atol=1e-12, rtol=1e-10)
    if agg == "token" or unit_weight == "prompt":  # a per-micro-batch mean weighs the pieces wrongly
        assert not torch.allclose(grads["naive"], grads["whole"], atol=1e-6)
