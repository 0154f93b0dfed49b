"""The groups table's training-unit columns, from the very advantages the update used."""

import numpy as np
import pytest
import torch

from grpo_lab.rollout.generate import Rollout
from grpo_lab.run.rows import group_rows, unit_columns
from grpo_lab.samplers import Group
from grpo_lab.tasks import Problem
from grpo_lab.train.advantages import unit_advantages


def group(rewards, rnd=0, prompt="p"):
    """A scored group of G one-token completions (the rollout's own container, filled by hand)."""
    r = np.asarray(rewards, dtype=np.float32)
    g = len(r)
    ones = torch.ones(g, 1)
    samples = Rollout(torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1), torch.ones(g, 1, dtype=torch.long), ones,
                      torch.zeros(g, 1), ["2"] * g, torch.ones(g, dtype=torch.long), torch.zeros(g, dtype=torch.bool),
                      g)
    return Group(Problem(prompt, "1+1=", "2", "1"), rnd, samples, r, r > 0, bool(r.std() <= 1e-8))


def test_a_tied_round_pooled_with_a_mixed_one_trains_and_a_tied_unit_does_not():
    tied, mixed, alone = group([1, 1, 1, 1]), group([1, 0, 0, 0], rnd=1), group([0, 0, 0, 0], prompt="q")
    units = [[tied, mixed], [alone]]  # resample_on_tie with pool=all: one prompt's rounds are one unit
    adv = unit_advantages(units).advantages.numpy()  # (12,)
    trained = unit_columns(units, adv)
    assert [(trained[id(g)].unit, trained[id(g)].n_informative) for g in (tied, mixed, alone)] == [(0, 4), (0, 4),
                                                                                                   (1, 0)]
    dropped = group([0, 1, 0, 1], prompt="r")  # drawn, never used (as dynamic's extras)
    rows = group_rows("run", 1, [tied, mixed, alone, dropped], {"samples_total": 0, "tokens_total": 0}, trained)
    assert [(r["unit"], r["n_informative"]) for r in rows] == [(0, 4), (0, 4), (1, 0), (None, 0)]
    # the advantage each sample trained with: five right of eight pooled answers, +sqrt(3/5) and -sqrt(5/3)
    assert rows[0]["advantages"] == pytest.approx([0.6 ** 0.5] * 4)
    assert rows[1]["advantages"] == pytest.approx([0.6 ** 0.5] + [-(5 / 3) ** 0.5] * 3)
    assert rows[2]["advantages"] == [0.0] * 4 and all(np.isnan(rows[3]["advantages"]))


def test_a_sample_at_its_units_mean_has_zero_advantage_and_is_not_counted():
    g = group([1.0, 0.5, 0.0, 0.5])  # non-binary rewards: two samples equal the mean
    trained = unit_columns([[g]], np.array([1.0, 0.0, -1.0, 0.0]))
    assert trained[id(g)].n_informative == 2
    assert unit_columns([[g]], np.array([1.0, np.nan, -1.0, np.nan]))[id(g)].n_informative == 2  # NaN: did not train
