"""SPO: its prior, priority, forgetting and batch-normalised advantages against hand computation; its trackers
replayed from the tables of real tiny runs (exactly where the forgetting is constant; the KL-adaptive forgetting
seen acting where the policy moves); exact resume; the config refusals."""

import numpy as np
import pytest
import torch
from reference import assert_same_rows

from grpo_lab.advantage.spo import spo_advantages
from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.run.checkpoints import read_state
from grpo_lab.run.tables import read_table
from grpo_lab.samplers.spo import forgetting, prior, priority
from grpo_lab.train.trainer import train


def test_prior_priority_and_forgetting_by_hand():
    # 3 of 8 offline answers right, rho_min 0.875: N0 = 8 pseudo-answers split 3.5 : 5.5
    assert prior(3, 8, 0.875) == pytest.approx((8 * 3.5 / 9, 8 * 5.5 / 9))
    assert sum(prior(0, 8, 0.875)) == pytest.approx(8)
    assert prior(0, 0, 0.875) == (0.5, 0.5)  # no offline answers: the code's Beta(0.5, 0.5)
    assert priority(np.array([0.0, 0.5, 1.0]), 0.05) == pytest.approx(np.array([0.05, 0.55, 0.05]) / 0.65)
    assert forgetting(0.0, 0.06, 0.875, 0.96) == 0.96  # the policy did not move: the ceiling
    assert forgetting(0.06, 0.06, 0.875, 0.96) == 0.875  # a half-life's move: 0.5, clipped to the floor
    assert forgetting(0.005, 0.06, 0.5, 0.99) == pytest.approx(2 ** (-0.005 / 0.06))


def test_advantages_are_the_batchs_normalised_residuals():
    rewards, predicted = np.array([1.0, 0.0, 1.0, 1.0]), np.array([0.5, 0.5, 0.9, 0.2])
    raw = torch.tensor(rewards - predicted)
    expected = (raw - raw.mean()) / (raw.std() + 1e-8)  # torch's std is Bessel's, as the code's
    assert spo_advantages(rewards, predicted) == pytest.approx(expected.numpy(), abs=1e-6)
    assert spo_advantages(np.array([1.0]), np.array([0.3])).tolist() == [0.0]  # one sample: no scale


def spo_cfg(tmp_path, name="run", steps=4, **spo) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / name), max_steps=steps, prompts_per_step=4, checkpoint_every=2)
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = [1, 2, 4], 8, 0
    cfg.sampler.name, cfg.sampler.group_size, cfg.algo.advantage = "spo", 4, "spo"
    cfg.sampler.spo.offline_n = 4
    for k, v in spo.items():
        setattr(cfg.sampler.spo, k, v)
    return cfg


def replay(groups, offline_n: int, rho: float, rho_min: float = 0.875):
    """Every prompt's tracker from the groups table alone, at a constant forgetting rho: the predicted rate each
    step's answers should carry, and the advantages they should have trained with."""
    first = groups[groups["step"] == 1]
    alpha, beta = {}, {}
    for _, g in first[~first["used"]].iterrows():  # the offline estimate: groups of offline_n, not trained
        alpha[g["prompt_id"]], beta[g["prompt_id"]] = prior(int(g["n_correct"]), offline_n, rho_min)
    predicted, advantages = [], []
    for _, rows in groups[groups["used"]].groupby("step", sort=True):
        value = [alpha[p] / (alpha[p] + beta[p]) for p in rows["prompt_id"]]
        predicted += value
        advantages += list(spo_advantages(np.array([r[0] for r in rows["rewards"]]), np.array(value)))
        for p, r in zip(rows["prompt_id"], rows["rewards"]):
            alpha[p], beta[p] = rho * alpha[p] + float(r[0]), rho * beta[p] + 1 - float(r[0])
    return np.array(predicted), np.array(advantages), alpha


def test_a_run_draws_single_answers_and_its_trackers_replay_from_the_tables(tmp_path):
    run = train(spo_cfg(tmp_path, rho_min=0.9, rho_max=0.9))  # a constant forgetting: replayable exactly
    g = read_table(run, "groups").to_pandas()
    estimate = g[~g["used"]]
    assert (estimate["step"] == 1).all() and (estimate["group_size"] == 4).all()
    assert sorted(estimate["prompt_id"]) == sorted(set(g["prompt_id"]))[:len(estimate)] and len(estimate) == 24
    used = g[g["used"]]
    assert (used["group_size"] == 1).all() and not used["tie"].any()  # one answer ties with nothing
    assert (used.groupby("step").size() == 16).all()  # prompts_per_step x group_size answers a step
    predicted, advantages, _ = replay(g, 4, 0.9, rho_min=0.9)
    assert used["predicted_rate"].to_numpy() == pytest.approx(predicted, abs=1e-12)
    assert np.array([a[0] for a in used["advantages"]]) == pytest.approx(advantages, abs=1e-5)
    steps = read_table(run, "steps").to_pandas()
    assert steps["samples"].tolist() == [24 * 4 + 16, 16, 16, 16]  # the estimate is counted where it was drawn


def test_the_forgetting_follows_how_far_the_policy_moved(tmp_path):
    """Where the policy barely moves every visit forgets by rho_max; where it moves, a revisit forgets more."""
    def tracker(lr):
        cfg = spo_cfg(tmp_path, f"lr{lr}", steps=6)
        cfg.algo.lr = lr
        run = train(cfg)
        state = read_state(run / "checkpoints" / "step-000006")["counters"]["sampler"]
        return read_table(run, "groups").to_pandas(), state

    still, state = tracker(1e-9)
    assert state["alpha"] == pytest.approx(replay(still, 4, 0.96)[2], rel=1e-9)
    last = state["last"]  # each answered prompt's answer and its log-probs now, kept for its next visit
    assert last and all(len(a["logp"]) == len(a["completion"]) and max(a["logp"]) <= 0 for a in last.values())
    moved, state = tracker(3e-2)
    counts = {p: count(moved, p, 0.96) for p in set(moved["prompt_id"])}  # every visit at the ceiling
    kept = {p: state["alpha"][p] + state["beta"][p] for p in counts}
    assert all(kept[p] <= counts[p] * (1 + 1e-9) for p in counts)  # never forgets less than rho_max
    assert any(kept[p] < 0.99 * counts[p] for p in counts)  # some revisit found the policy moved on its answer


def count(groups, prompt: str, rho: float) -> float:
    """alpha + beta of `prompt` replayed at a constant rho: N0 from the estimate, then each visit rho x + 1."""
    first = groups[(groups["step"] == 1) & ~groups["used"] & (groups["prompt_id"] == prompt)]
    total = sum(prior(int(first["n_correct"].iloc[0]), 4, 0.875))
    for _ in range(int(((groups["prompt_id"] == prompt) & groups["used"]).sum())):
        total = rho * total + 1
    return total


def test_resume_mid_run_restores_the_trackers_exactly(tmp_path):
    full = train(spo_cfg(tmp_path, "full"))
    cfg = spo_cfg(tmp_path, "killed", steps=3)
    killed = train(cfg)
    (killed / "checkpoints" / "step-000003").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = 4
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))


@pytest.mark.parametrize("change,key", [
    (dict(sampler="fixed"), "algo.advantage"),
    (dict(advantage="grpo"), "algo.advantage"),  # one answer a prompt: a group rule trains nothing
    (dict(advantage="rl_zvp"), "algo.advantage"),
    (dict(format=0.5), "reward.format"),  # rewards above 1: its trackers' pass rates leave [0, 1]
    (dict(rho_min=0.97), "sampler.spo.rho_min"),
    (dict(epsilon=0.0), "sampler.spo.epsilon"),
    (dict(d_half=0.0), "sampler.spo.d_half"),
    (dict(offline_n=-1), "sampler.spo.offline_n"),
])
def test_bad_settings_are_one_line_naming_the_key(tmp_path, change, key):
    cfg = spo_cfg(tmp_path)
    if "sampler" in change:
        cfg.sampler.name = change.pop("sampler")
    if "advantage" in change:
        cfg.algo.advantage = change.pop("advantage")
    if "format" in change:
        cfg.reward.format = change.pop("format")
    for k, v in change.items():
        setattr(cfg.sampler.spo, k, v)
    with pytest.raises(ConfigError, match=f"^{key}="):
        validate(cfg)


def test_rewards_up_to_one_are_accepted(tmp_path):
    cfg = spo_cfg(tmp_path)
    cfg.reward.accuracy, cfg.reward.format = 0.75, 0.25
    validate(cfg)
