"""The advantage rules (algo.advantage) against their papers' worked examples and plain-Python loops: NGRPO,
RL-ZVP, and a step's units (pooled rounds, PODS's baseline subset, a replayed group's stored advantages)."""

import math
import random

import numpy as np
import pytest
import torch
from reference import plain_grpo, plain_ngrpo, plain_rl_zvp

from grpo_lab.advantage.ngrpo import ngrpo_advantages
from grpo_lab.advantage.rl_zvp import rl_zvp_advantages, zvp_direction
from grpo_lab.samplers import Group
from grpo_lab.tasks import Problem
from grpo_lab.train.advantages import rule_advantages, unit_advantages


def test_ngrpo_worked_examples():
    """The paper's numbers for G = 8: all wrong -1/3 each, all right 0, one right of eight +1.7638 / -0.5040."""
    rows = torch.tensor([[0.0] * 8, [1.0] * 8, [1.0] + [0.0] * 7])
    adv = ngrpo_advantages(rows)
    torch.testing.assert_close(adv[0], torch.full((8,), -1 / 3), atol=3e-6, rtol=0)  # -(1/9) / (1/3 + 1e-6)
    assert torch.equal(adv[1], torch.zeros(8))  # exactly 0: the virtual answer equals every real one
    assert adv[2, 0].item() == pytest.approx(1.7638, abs=1e-4)
    torch.testing.assert_close(adv[2, 1:], torch.full((7,), -0.5040), atol=1e-4, rtol=0)


@pytest.mark.parametrize("g", [2, 4, 8, 16])
def test_ngrpo_matches_a_plain_loop_on_random_groups(g):
    rng = random.Random(g)
    rows = [[float(rng.random() < p) for _ in range(g)] for p in (0.0, 1.0, *[rng.random() for _ in range(40)])]
    rows += [[rng.random() * 2 for _ in range(g)] for _ in range(10)]  # graded rewards below a maximum of 2
    got = ngrpo_advantages(torch.tensor(rows, dtype=torch.float64), max_reward=2.0)
    want = torch.tensor([plain_ngrpo(r, max_reward=2.0) for r in rows], dtype=torch.float64)
    torch.testing.assert_close(got, want)


def test_rl_zvp_worked_example():
    """A positive prompt's tokens get alpha * H, a negative prompt's -alpha * (max H - H): its most uncertain token
    is spared, its most confident one penalised most; GRPO's advantage elsewhere, on every token."""
    entropy = torch.tensor([[0.5, 2.0, 1.0, 0.0], [0.5, 2.0, 1.0, 0.0], [0.5, 2.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    got = rl_zvp_advantages(torch.tensor([0.0, 0.0, 0.7]), torch.tensor([1, -1, 0], dtype=torch.int8), entropy, mask,
                            alpha=0.1)
    torch.testing.assert_close(got, torch.tensor([[0.05, 0.2, 0.1, 0.0], [-0.15, 0.0, -0.1, 0.0],
                                                  [0.7, 0.7, 0.7, 0.0]]))


def test_rl_zvp_matches_a_plain_loop_on_random_rows():
    gen = torch.Generator().manual_seed(0)
    n, t = 60, 9
    lengths = torch.randint(0, t + 1, (n,), generator=gen)  # a row may have no token at all
    mask = torch.arange(t)[None] < lengths[:, None]
    entropy = torch.rand(n, t, generator=gen) * 3 * mask
    base = torch.randn(n, generator=gen)
    direction = torch.randint(-1, 2, (n,), generator=gen).to(torch.int8)
    got = rl_zvp_advantages(base, direction, entropy, mask, alpha=0.2)
    for i in range(n):
        k = int(lengths[i])
        want = plain_rl_zvp(float(base[i]), int(direction[i]), entropy[i, :k].tolist(), 0.2) if k else []
        torch.testing.assert_close(got[i, :k], torch.tensor(want, dtype=got.dtype), atol=1e-6, rtol=1e-6)
        assert (got[i, k:] == 0).all()


def test_rl_zvp_entropy_carries_no_gradient():
    entropy = torch.rand(3, 4, requires_grad=True)
    out = rl_zvp_advantages(torch.zeros(3), torch.tensor([1, -1, 1], dtype=torch.int8), entropy,
                            torch.ones(3, 4, dtype=torch.bool), 0.1)
    assert not out.requires_grad


def test_zvp_direction_and_the_rules_on_untied_groups():
    rewards = torch.tensor([[1.0] * 4, [0.0] * 4, [1.0, 0.0, 0.0, 1.0], [0.5] * 4])
    correct = torch.tensor([[True] * 4, [False] * 4, [True, False, False, True], [True, False, True, False]])
    assert zvp_direction(rewards, correct).tolist() == [[1] * 4, [-1] * 4, [0] * 4, [0] * 4]  # a tie of mixed
    for rule in ("grpo", "rl_zvp"):  # correctness (format reward) carries no sign
        adv, d = rule_advantages(rule, rewards, correct)
        torch.testing.assert_close(adv, torch.tensor([plain_grpo(r) for r in rewards.tolist()]))
        assert (d != 0).any() == (rule == "rl_zvp")
    with pytest.raises(ValueError, match="advantage='gpro'.*'grpo', 'ngrpo', 'rl_zvp'"):
        rule_advantages("gpro", rewards, correct)


def group(rewards, prompt="p", baseline=None, stored=None):
    r = np.asarray(rewards, np.float32)
    return Group(Problem(prompt, "1+1=", "2", "1"), 0, None, r, r > 0, bool(r.std() <= 1e-8), used=True,
                 baseline=None if baseline is None else np.asarray(baseline, bool),
                 source_step=None if stored is None else 3, advantages=None if stored is None else np.float32(stored))


@pytest.mark.parametrize("rule", ["grpo", "ngrpo", "rl_zvp"])
def test_a_steps_units_pool_rounds_keep_a_subsets_baseline_and_a_replays_advantages(rule):
    pooled = [group([1, 1, 1, 1]), group([0, 1, 0, 0])]  # one prompt's two rounds: one baseline
    subset = group([1, 0, 1, 1, 0, 0], baseline=[1, 1, 0, 0, 1, 1])  # PODS: the kept four alone
    replay = group([1, 0, 0, 0], stored=[0.25, -0.5, 1.5, 2.0])  # whatever it trained with before
    tied = group([0, 0, 0, 0])
    out = unit_advantages([pooled, [subset], [replay], [tied]], rule)
    plain = plain_ngrpo if rule == "ngrpo" else plain_grpo
    want = plain([1, 1, 1, 1, 0, 1, 0, 0]) + [*plain([1, 0, 0, 0])[:2], 0.0, 0.0, *plain([1, 0, 0, 0])[2:]]
    want += [0.25, -0.5, 1.5, 2.0] + plain([0, 0, 0, 0])
    torch.testing.assert_close(out.advantages, torch.tensor(want, dtype=torch.float32))
    assert out.replayed.tolist() == [False] * 14 + [True] * 4 + [False] * 4
    assert out.direction.tolist() == [0] * 18 + ([-1] * 4 if rule == "rl_zvp" else [0] * 4)
    assert math.isclose(out.advantages[-1].item(), -1 / 5 ** 0.5, abs_tol=1e-6) == (rule == "ngrpo")  # G = 4


def test_a_rule_or_task_that_computes_nothing_is_refused_where_it_is_defined():
    from grpo_lab.advantage.base import AdvantageRule
    from grpo_lab.tasks.base import TaskKind

    with pytest.raises(TypeError, match=r"advantage rule Empty \('empty'\) must define advantages"):
        type("Empty", (AdvantageRule,), {"name": "empty"})
    with pytest.raises(TypeError, match=r"must define shape_tokens"):
        type("Tokens", (AdvantageRule,), {"name": "tokens", "token_level": True,
                                         "advantages": classmethod(lambda cls, *a, **k: None)})
    with pytest.raises(TypeError, match=r"task Half \('half'\) must define build"):
        type("Half", (TaskKind,), {"name": "half", "sizes": classmethod(lambda cls, cfg: (1, 0))})
