"""Micro-batched updates against the whole batch, and steps where no sample is informative."""

import copy
import math
from pathlib import Path

import pytest
import torch

from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.run.record import RunRecord
from grpo_lab.run.tables import read_table
from grpo_lab.train.microbatch import plan
from grpo_lab.train.trainer import Trainer


def run_steps(cfg, steps: int) -> tuple[Trainer, list[dict]]:
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    rows = [trainer.step() for _ in range(steps)]
    return trainer, rows


def weights(trainer) -> dict:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize("limits", [{"algo.micro_batch_groups": 1, "model.length_buckets": 1},
                                    {"algo.micro_batch_groups": 2, "algo.micro_batch_tokens": 60},
                                    {"model.length_buckets": 3}, {"algo.micro_batch_groups": 2}])
def test_micro_batches_train_to_the_whole_batchs_weights(tiny_cfg, tmp_path, limits):
    """Micro-batches, and length buckets inside a pass, take the whole batch's one-pass step."""
    tiny_cfg.sampler.name = "resample_on_tie"
    tiny_cfg.sampler.resample_on_tie.pool, tiny_cfg.sampler.resample_on_tie.max_rounds = "all", 3
    tiny_cfg.algo.loss_agg, tiny_cfg.algo.mu = "token", 2
    tiny_cfg.eval.n = 0
    tiny_cfg.model.length_buckets = 1  # the reference: the whole batch in one pass
    start = weights(run_steps(copy.deepcopy(tiny_cfg), 0)[0])
    whole, whole_rows = run_steps(copy.deepcopy(tiny_cfg), 3)
    tiny_cfg.out_dir = str(tmp_path / "micro")
    tiny_cfg.model.length_buckets = 2  # the default, unless the case says otherwise
    for key, v in limits.items():
        section, name = key.split(".")
        setattr(getattr(tiny_cfg, section), name, v)
    micro, micro_rows = run_steps(tiny_cfg, 3)

    groups = read_table(Path(tiny_cfg.out_dir), "groups").to_pandas()
    assert (groups["round"] > 0).any()  # pooled units of several rounds were trained
    for a, b in zip(whole_rows, micro_rows):
        assert a["samples"] == b["samples"] and a["informative"] == b["informative"] > 0
        for key in ("loss", "pg_loss", "kl", "clip_frac", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    w_whole, w_micro = weights(whole), weights(micro)
    assert any(not torch.equal(w_whole[k], start[k]) for k in start)  # it did learn
    for k in w_whole:
        torch.testing.assert_close(w_micro[k], w_whole[k], atol=1e-5, rtol=0, msg=k)


def test_micro_batches_of_shaped_and_reused_rows_train_to_the_whole_batchs_weights(tiny_cfg, tmp_path):
    """RL-ZVP's per-token advantages (from each micro-batch's own entropies) and replayed rows (their stored
    behaviour log-probs) accumulate to the whole batch's gradient too."""
    tiny_cfg.sampler.name, tiny_cfg.algo.advantage = "replay", "rl_zvp"
    tiny_cfg.algo.loss_agg, tiny_cfg.algo.mu = "token", 2
    tiny_cfg.eval.n = 0
    whole, whole_rows = run_steps(copy.deepcopy(tiny_cfg), 4)
    tiny_cfg.out_dir = str(tmp_path / "micro")
    tiny_cfg.algo.micro_batch_groups = 1
    micro, micro_rows = run_steps(tiny_cfg, 4)
    assert sum(r["reused"] for r in micro_rows) > 0 and sum(r["informative_tied"] for r in micro_rows) > 0
    for a, b in zip(whole_rows, micro_rows):
        assert (a["samples"], a["reused"], a["informative"]) == (b["samples"], b["reused"], b["informative"])
        for key in ("loss", "pg_loss", "kl", "clip_frac", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    w_whole, w_micro = weights(whole), weights(micro)
    for k in w_whole:
        torch.testing.assert_close(w_micro[k], w_whole[k], atol=1e-5, rtol=0, msg=k)


def test_micro_batch_plan_keeps_units_whole_and_respects_both_limits():
    costs = [(1, 4, 5, 3), (3, 12, 5, 6), (1, 4, 6, 2), (1, 4, 5, 6)]  # (groups, rows, prompt width, length)
    assert plan(costs, None, None) == [range(0, 4)]
    assert plan(costs, 2, None) == [range(0, 2), range(2, 4)]
    # 60 padded positions: unit 1 alone costs 3*5 + 12*6 = 87 (its own micro-batch), units 2+3 cost 2*6 + 8*6 = 60
    assert plan(costs, None, 60) == [range(0, 1), range(1, 2), range(2, 4)]


def test_a_step_with_no_informative_sample_leaves_the_policy_alone_under_skip(tiny_cfg):
    tiny_cfg.reward.accuracy = 0.0  # every reward 0: every group ties, every advantage is exactly 0
    tiny_cfg.eval.n = 0
    tiny_cfg.algo.tied_batch = "skip"  # the default, step, takes the KL's steps (tests/test_tied_batch.py)
    start = weights(run_steps(copy.deepcopy(tiny_cfg), 0)[0])
    trainer, rows = run_steps(tiny_cfg, 3)
    for k, v in weights(trainer).items():
        assert torch.equal(v, start[k]), k  # no Adam step: the KL's tiny gradient does not move the policy
    assert not trainer.optimizer.state  # Adam never stepped
    steps = read_table(Path(tiny_cfg.out_dir), "steps").to_pandas()
    assert steps["informative"].tolist() == [0, 0, 0] and steps["tie_frac"].tolist() == [1.0] * 3
    assert all(r["kl"] == 0.0 and r["loss"] == 0.0 and math.isnan(r["grad_norm"]) for r in rows)  # KL still logged
    assert steps["opt_steps"].tolist() == [0, 0, 0] and steps["updates"].tolist() == [0, 0, 0]


def test_a_step_with_no_informative_sample_takes_its_steps_by_default(tiny_cfg):
    """The same steps under algo.tied_batch=step: the policy starts at the reference, so the KL's gradient is exactly
    0 and AdamW's first steps move nothing, but they are taken (its state exists, grad_norm is 0, not NaN)."""
    tiny_cfg.reward.accuracy = 0.0
    tiny_cfg.eval.n = 0
    start = weights(run_steps(copy.deepcopy(tiny_cfg), 0)[0])
    trainer, rows = run_steps(tiny_cfg, 2)
    for k, v in weights(trainer).items():
        assert torch.equal(v, start[k]), k  # a zero gradient, zero moments: Adam's step is 0
    assert all(int(s["step"]) == 2 for s in trainer.optimizer.state.values())
    assert [(r["opt_steps"], r["updates"], r["grad_norm"], r["informative"]) for r in rows] == [(1, 1, 0.0, 0),
                                                                                                 (1, 2, 0.0, 0)]


def test_informative_counts_samples_with_nonzero_advantage(tiny_cfg):
    tiny_cfg.eval.n = 0
    _, (row,) = run_steps(tiny_cfg, 1)
    groups = read_table(Path(tiny_cfg.out_dir), "groups").to_pandas()
    mixed = int((~groups["tie"]).sum())  # binary rewards: every member of a mixed group has advantage != 0
    assert row["informative"] == mixed * tiny_cfg.sampler.group_size > 0


@pytest.mark.parametrize("override", [dict(micro_batch_groups=0), dict(micro_batch_tokens=0), dict(unit_weight="x")])
def test_bad_micro_batch_keys_name_themselves(tiny_cfg, override):
    (key, value), = override.items()
    setattr(tiny_cfg.algo, key, value)
    with pytest.raises(ConfigError, match=f"^algo.{key}="):
        validate(tiny_cfg)
