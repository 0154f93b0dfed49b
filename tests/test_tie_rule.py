"""What a tie is, decided once (grpo_lab/advantage/ties.py: reward_ties): the test against a plain loop, and every
caller agreeing with it: eq. 3's zero advantages, RL-ZVP's zero-variance directions, and the trainer's `tie` flag
of the groups table (on a tiny run whose algo.std_eps makes groups of unequal rewards tie)."""

import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from grpo_lab.advantage.grpo import group_advantages
from grpo_lab.advantage.rl_zvp import zvp_direction
from grpo_lab.advantage.ties import reward_ties
from grpo_lab.config.checks import validate
from grpo_lab.run.record import RunRecord
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import Trainer


def plain_tie(rewards: list[float], eps: float) -> bool:
    """A group ties when the population std of its rewards is at most eps; a lone answer ties with nothing."""
    if len(rewards) < 2:
        return False
    mean = sum(rewards) / len(rewards)
    return math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) <= eps


def groups(seed: int, size: int) -> torch.Tensor:
    """(64, size) float32 rewards: binary ones, graded ones, equal ones, and near ties of spread 1e-3."""
    rng = random.Random(seed)
    rows = []
    for i in range(64):
        kind = i % 4
        if kind == 0:
            rows.append([float(rng.random() < rng.random()) for _ in range(size)])
        elif kind == 1:
            rows.append([rng.choice([0.0, 0.1, 1.0, 1.1]) for _ in range(size)])
        elif kind == 2:
            rows.append([rng.choice([0.1, 1.0, 0.7])] * size)  # 0.1 x G: float32, equal, a std of exactly 0
        else:
            rows.append([0.5 + 1e-3 * rng.random() for _ in range(size)])
    return torch.tensor(rows, dtype=torch.float32)


@pytest.mark.parametrize("size", [1, 2, 4, 12])
@pytest.mark.parametrize("eps", [0.0, 1e-8, 1e-2, 0.45])
def test_a_tie_is_the_population_std_within_eps_and_never_a_lone_answer(size, eps):
    rewards = groups(seed=size, size=size)
    want = [plain_tie([float(x) for x in row], eps) for row in rewards.tolist()]
    assert reward_ties(rewards, eps).tolist() == want
    if size > 1:
        assert any(want) and not all(want)


def test_the_bound_is_inclusive():
    rewards = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    sd = float(rewards.double().std(correction=0))
    assert reward_ties(rewards, sd).item() and not reward_ties(rewards, math.nextafter(sd, 0)).item()


@pytest.mark.parametrize("size", [1, 2, 4, 12])
@pytest.mark.parametrize("eps", [0.0, 1e-8, 0.45])
def test_eq3_and_rl_zvp_agree_with_it(size, eps):
    """Eq. 3 gives exactly 0 to every answer of a tie and something to a group that is none (unless it is one
    answer, whose advantage r - r is 0 either way); RL-ZVP's direction is nonzero exactly on ties whose answers
    are all right or all wrong."""
    rewards = groups(seed=10 + size, size=size)
    correct = rewards >= 1.0
    tied = reward_ties(rewards, eps)
    adv = group_advantages(rewards, eps=eps)
    assert ((adv == 0).all(-1) == (tied | (size == 1))).all()
    direction = zvp_direction(rewards, correct, eps=eps)
    signed = tied & (correct.all(-1) | (~correct).all(-1))
    assert ((direction != 0).all(-1) == signed).all() and ((direction == 0).all(-1) == ~signed).all()
    assert (direction[correct.all(-1) & tied] == 1).all() and (direction[(~correct).all(-1) & tied] == -1).all()


def test_the_trainers_tie_flag_is_the_same_test(tiny_cfg):
    """algo.std_eps=0.45 over binary rewards in groups of 4: one right answer of four (std 0.433) ties, two do not
    (0.5). The groups table's `tie` is reward_ties of its rewards, and such a tie trains with advantages 0."""
    tiny_cfg.algo.std_eps, tiny_cfg.eval.n, tiny_cfg.task.levels = 0.45, 0, [1, 2]
    validate(tiny_cfg)
    Path(tiny_cfg.out_dir).mkdir(parents=True)
    trainer = Trainer(tiny_cfg, RunRecord(Path(tiny_cfg.out_dir), tiny_cfg.seed))
    try:
        for _ in range(3):
            trainer.step()
    finally:
        trainer.scorer.close()
        trainer.tracker.close()
        trainer.engine.close()
    rows = read_table(Path(tiny_cfg.out_dir), "groups").to_pylist()
    rewards = torch.tensor([r["rewards"] for r in rows])  # (groups, 4)
    assert [r["tie"] for r in rows] == reward_ties(rewards, 0.45).tolist()
    mixed_ties = [r for r in rows if r["tie"] and len(set(r["rewards"])) > 1]
    assert mixed_ties and any(not r["tie"] for r in rows)  # the eps decided, both ways
    for r in mixed_ties:
        assert np.all(np.isnan(r["advantages"]) | (np.asarray(r["advantages"]) == 0))
