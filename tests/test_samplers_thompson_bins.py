"""Thompson sampling over difficulty bins: its posterior update by hand and in closed form, the bins' order, each
prompt's selection frequency against its bin's floored weight shared among the bin's prompts, the best-bin fill when
the best bin is short, a real tiny run whose groups table replays every draw from its own rows and the run's seed, an
exact resume mid-run, its budget and its bad keys."""

import itertools
import json
import math
import re

import numpy as np
import pytest
from hand_task import rate_round, sampler_on
from reference import assert_draw_bounds, assert_same_rows, recount_budget

from grpo_lab.config import TrainConfig
from grpo_lab.errors import ConfigError
from grpo_lab.records import Problem
from grpo_lab.run.tables import read_table
from grpo_lab.samplers import check_sampler
from grpo_lab.samplers.thompson_bins import ThompsonBinsSampler, bin_update, label_order
from grpo_lab.tasks import build_task
from grpo_lab.train.trainer import train


def test_bin_update_by_hand():
    assert bin_update(3.0, 5.0, 2, 4, 0.5, 0.0) == (3.5, 6.5)  # half the old counts, plus 2 untied of 4 groups
    assert bin_update(3.0, 5.0, 0, 0, 0.5, 0.0) == (1.5, 2.5)  # a bin not drawn from still decays
    assert bin_update(3.0, 5.0, 1, 1, 1.0, 2.0) == (5.0, 8.0)  # reversion: 2 pseudo-groups at rate 1/2
    assert bin_update(3.0, 5.0, 1, 2, 0.0, 0.0) == (1.0, 2.0)  # all forgotten: this step only


@pytest.mark.parametrize("decay,mass", [(0.0, 0.0), (0.5, 0.0), (0.95, 0.0), (0.95, 2.0), (1.0, 0.5)])
def test_the_counts_are_the_discounted_sums_of_every_step(decay, mass):
    """After steps of (u_j untied of n_j groups): i = sum_j decay^(T-j) (u_j + mass / 2), n likewise."""
    rng = np.random.default_rng(3)
    steps = [(int(u), int(u + extra)) for u, extra in zip(rng.integers(0, 4, 15), rng.integers(0, 4, 15))]
    i = n = 0.0
    for untied, groups in steps:
        i, n = bin_update(i, n, untied, groups, decay, mass)
    weights = [decay ** (len(steps) - 1 - j) for j in range(len(steps))]
    assert i == pytest.approx(sum(w * (u + mass / 2) for w, (u, _) in zip(weights, steps)), rel=1e-12)
    assert n == pytest.approx(sum(w * (g + mass) for w, (_, g) in zip(weights, steps)), rel=1e-12)


def test_bins_are_ordered_by_number_then_by_name():
    assert label_order(["10", "2", "b", "1", "a", "2", "0.5"]) == ["0.5", "1", "2", "10", "a", "b"]


# a hand-built task: each prompt's answers are right at a fixed rate, and each rate is its own difficulty bin
RATES = {"always": 1.0, "half": 0.5, "never": 0.0, "half2": 0.5}
BINS = {"always": "1", "half": "2", "never": "3", "half2": "2"}


fixed_rate_round = rate_round(RATES)


def hand_sampler(**keys) -> ThompsonBinsSampler:
    return sampler_on("thompson_bins", tuple(Problem(pid, pid, "0", BINS[pid]) for pid in RATES), **keys)


def test_the_posterior_follows_the_groups_drawn_by_hand():
    sampler = hand_sampler(decay=0.5, reversion_mass=1.0)
    want = {"1": (0.0, 0.0), "2": (0.0, 0.0), "3": (0.0, 0.0)}
    for _ in range(10):
        draw = sampler.draw(fixed_rate_round, 2)
        assert len(draw.groups) == 2 and len({g.problem.prompt_id for g in draw.groups}) == 2
        assert draw.units == [[g] for g in draw.groups] and all(g.used for g in draw.groups) and draw.skipped == 0
        assert all(g.predicted_rate is None for g in draw.groups)  # a bin's rate is not a prompt's pass rate
        step = {label: [0, 0] for label in want}
        for g in draw.groups:
            step[BINS[g.problem.prompt_id]][0] += RATES[g.problem.prompt_id] == 0.5  # only the half-right untie
            step[BINS[g.problem.prompt_id]][1] += 1
        want = {label: (0.5 * i + step[label][0] + 0.5, 0.5 * n + step[label][1] + 1.0)
                for label, (i, n) in want.items()}
        assert {k: tuple(v) for k, v in sampler.extra_state["bins"].items()} == want
    assert sampler.stream.cursor == 0  # nothing taken from the prompt stream
    json.dumps(sampler.state_dict())  # the state is plain JSON: the bins' counts and the generator's state


# counts so large that every Thompson sample sits at its bin's rate (within 5e-4): 0.9, 0.5, 0.1
SURE = {"1": [0.9e6, 1e6], "2": [0.5e6, 1e6], "3": [0.1e6, 1e6]}


def test_each_prompt_is_drawn_as_often_as_its_bins_floored_weight_shared_within_the_bin():
    """One prompt a step, the counts held fixed: bin weights floored(0.9, 0.5, 0.1; epsilon 0.6); the two prompts of
    bin "2" share its weight. Over 6,000 draws each prompt's frequency is within 4.5 standard errors (plus the
    samples' 5e-4 spread) of that."""
    sampler, n = hand_sampler(epsilon=0.6), 6000
    seen = dict.fromkeys(RATES, 0)
    for _ in range(n):
        sampler.extra_state["bins"] = {k: list(v) for k, v in SURE.items()}
        seen[sampler.draw(fixed_rate_round, 1).groups[0].problem.prompt_id] += 1
    raw = np.array([0.9, 0.5, 0.1]) / 1.5
    floor = np.maximum(raw, 0.6 / 3)
    w = dict(zip("123", floor / floor.sum()))
    assert w["3"] > raw[2]  # the floor lifted the bin that ties most
    want = {"always": w["1"], "half": w["2"] / 2, "half2": w["2"] / 2, "never": w["3"]}
    for pid, p in want.items():
        assert abs(seen[pid] / n - p) < 4.5 * math.sqrt(p * (1 - p) / n) + 1e-3, (pid, seen)


def test_best_fills_from_the_best_bin_then_the_next_when_it_is_short():
    """Bin "1" (0.9) has one prompt, bin "2" (0.5) two, bin "3" (0.1) one: 2 prompts are bin 1's and one of bin 2's,
    3 are bin 1's and both of bin 2's, 4 take bin 3's too."""
    sampler = hand_sampler(selection="best")
    halves = set()
    for _ in range(40):
        for keep, bins in ((1, ["1"]), (2, ["1", "2"]), (3, ["1", "2", "2"]), (4, ["1", "2", "2", "3"])):
            sampler.extra_state["bins"] = {k: list(v) for k, v in SURE.items()}
            groups = sampler.draw(fixed_rate_round, keep).groups
            assert [BINS[g.problem.prompt_id] for g in groups] == bins
            assert len({g.problem.prompt_id for g in groups}) == keep
            if keep == 2:
                halves.add(groups[1].problem.prompt_id)
    assert halves == {"half", "half2"}  # within a bin, either prompt


def test_too_many_prompts_for_the_pool_stop_the_run_before_drawing():
    sampler = hand_sampler()
    draw = sampler.draw(fixed_rate_round, 5)
    assert draw.groups == [] and draw.exhausted == (
        "thompson_bins sampler: prompts_per_step=5 is more than the training pool's 4 distinct prompts; a step "
        "draws that many distinct prompts")


def bins_cfg(tmp_path, steps=6, **keys) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / "thompson_bins"), max_steps=steps, prompts_per_step=4,
                      checkpoint_every=2)
    cfg.task.levels = [1, 2, 4]
    cfg.task.train_per_level = 4
    cfg.eval.n = 0
    cfg.sampler.name, cfg.sampler.group_size = "thompson_bins", 4
    for k, v in keys.items():
        setattr(cfg.sampler.thompson_bins, k, v)
    return cfg


def plain_picks(weights, keep, rng):
    """A plain loop: one uniform a pick, walked against the remaining weights' running total."""
    w, picks = list(map(float, weights)), []
    for _ in range(keep):
        target = rng.random() * sum(w)
        i = next(i for i, running in enumerate(itertools.accumulate(w)) if w[i] > 0 and target < running)
        picks.append(i)
        w[i] = 0.0
    return picks


@pytest.mark.parametrize("selection", ["weights", "best"])
def test_a_real_run_replays_from_its_own_tables(tmp_path, selection):
    """The defaults (decay 0.95, epsilon 0.05), bins "1", "2", "4" of 4 prompts each: every step's prompts, in order,
    are the rule replayed with plain loops from the table's earlier rows (each bin's untied and drawn groups, all bins
    decayed every step) and the run's seed (the sampler's generator: default_rng([seed, 0x5A3]))."""
    g, s = recount_budget(train(bins_cfg(tmp_path, steps=8, selection=selection)))
    assert (s["samples"] == 16).all() and g["used"].all() and (g["n_trained"] == g["group_size"]).all()
    assert g["round"].eq(0).all() and g.groupby("step")["prompt_id"].nunique().eq(4).all()
    assert (s["skipped_prompts"] == 0).all() and g["predicted_rate"].isna().all()

    cfg = bins_cfg(tmp_path)
    pool = build_task(cfg.task).train
    labels = ["1", "2", "4"]
    members = {b: [p.prompt_id for p in pool if p.difficulty == b] for b in labels}
    rng = np.random.default_rng([cfg.seed % 2**32, 0x5A3])
    counts = {b: (0.0, 0.0) for b in labels}
    spread = set()
    for step, rows in g.groupby("step", sort=True):
        # Beta(1 + i, 1 + (n - i)), summed as the sampler sums: a parameter one ulp off can flip one of beta's
        # rejection steps, and the generator then runs on a different number of draws
        sample = rng.beta([1 + counts[b][0] for b in labels], [1 + (counts[b][1] - counts[b][0]) for b in labels])
        if selection == "weights":
            w = [x / sum(sample) for x in sample]
            w = [max(x, 0.05 / 3) for x in w]
            rows_w = [(pid, w[k] / len(members[b])) for k, b in enumerate(labels) for pid in members[b]]
            want = [rows_w[i][0] for i in plain_picks([x for _, x in rows_w], 4, rng)]
        else:
            want = []
            for k in sorted(range(3), key=lambda k: (-sample[k], k)):
                take = min(4 - len(want), len(members[labels[k]]))
                want += [members[labels[k]][i] for i in plain_picks([1.0] * len(members[labels[k]]), take, rng)]
        assert rows["prompt_id"].tolist() == want, step
        spread.add(tuple(sorted(rows["difficulty"].value_counts().items())))
        for b in labels:
            mine = rows[rows["difficulty"] == b]
            i, n = counts[b]
            counts[b] = (0.95 * i + int((~mine["tie"]).sum()), 0.95 * n + len(mine))
    assert len(spread) > 1  # the bins' shares (best: the bin drawn from) moved from step to step


def test_resume_mid_run_restores_the_posterior_and_the_generator_exactly(tmp_path):
    steps = 4
    full = train(bins_cfg(tmp_path / "full", steps=steps))
    cfg = bins_cfg(tmp_path / "killed", steps=steps - 1)
    killed = train(cfg)  # "killed" after the checkpoint before its last step, with that step written
    (killed / "checkpoints" / f"step-{steps - 1:06d}").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = steps
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))
    assert read_table(full, "groups").to_pandas().groupby("step").size().eq(4).all()


def test_budget_checks_know_its_draw(tmp_path):
    assert_draw_bounds(bins_cfg(tmp_path, steps=4), 16, 16)  # prompts_per_step x group_size, always


@pytest.mark.parametrize("key,value,message", [
    ("prior_alpha", 0.0, "must be > 0 (a Beta parameter)"),
    ("prior_beta", -1.0, "must be > 0 (a Beta parameter)"),
    ("decay", 1.5, "must lie in [0, 1]"),
    ("decay", -0.1, "must lie in [0, 1]"),
    ("epsilon", -0.5, "must lie in [0, 1]"),
    ("reversion_mass", -1.0, "must be >= 0"),
    ("selection", "top", "must be one of 'weights', 'best'"),
])
def test_each_bad_key_is_refused_in_one_line_naming_it(key, value, message):
    cfg = TrainConfig().sampler
    setattr(cfg.thompson_bins, key, value)
    with pytest.raises(ConfigError) as err:
        check_sampler(cfg)
    assert str(err.value) == f"sampler.thompson_bins.{key}={value!r} is invalid: {message}"
    assert "\n" not in str(err.value) and re.search(rf"\bsampler\.thompson_bins\.{key}\b", str(err.value))
