"""Learnability sampling: its weight against a brute-force count of the tie probability over all 2^G outcomes, its
floor and weighted draw against plain loops and exact probabilities, its per-prompt counts by hand, its selection
frequencies against the weights, a real tiny run whose groups table replays every draw from its own rows and the
run's seed, an exact resume mid-run, its budget and its bad keys."""

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
from grpo_lab.run.tables import read_table
from grpo_lab.samplers import PromptStream, check_sampler
from grpo_lab.samplers.learnability import LearnabilitySampler, floored, learnability_weight, weighted_picks
from grpo_lab.samplers.mopps import prediction_error
from grpo_lab.tasks import build_task
from grpo_lab.train.trainer import train


@pytest.mark.parametrize("group_size", [2, 3, 4, 8])
def test_the_weight_is_the_chance_a_group_does_not_tie_counted_over_every_outcome(group_size):
    for p in (0.0, 0.03, 0.25, 0.5, 0.7, 0.99, 1.0):
        untied = sum(math.prod(p if right else 1 - p for right in outcome)
                     for outcome in itertools.product((True, False), repeat=group_size)
                     if any(outcome) and not all(outcome))
        assert learnability_weight(p, group_size) == pytest.approx(untied, abs=1e-12), (group_size, p)
    assert learnability_weight([0.0, 1.0], group_size).tolist() == [0.0, 0.0]  # a sure tie weighs nothing


def test_the_pass_variance_curve_and_the_floor_by_hand():
    assert learnability_weight(0.2, 8, "pass_variance") == pytest.approx(0.16, abs=1e-15)
    assert learnability_weight(0.5, 2) == pytest.approx(0.5, abs=1e-15)  # G = 2: 2p(1 - p)
    # [0, 1, 3] normalised is [0, .25, .75]; epsilon 0.3 raises the first to 0.3 / 3 = 0.1; renormalised by 1.1
    np.testing.assert_allclose(floored([0.0, 1.0, 3.0], 0.3), [0.1 / 1.1, 0.25 / 1.1, 0.75 / 1.1], rtol=1e-15)
    np.testing.assert_allclose(floored([2.0, 6.0], 0.0), [0.25, 0.75], rtol=1e-15)  # no floor: proportional
    np.testing.assert_allclose(floored([0.0, 0.0, 0.0, 0.0], 0.05), [0.25] * 4)  # all zero: uniform


def plain_picks(weights, keep, rng):
    """A plain loop: one uniform a pick, walked against the remaining weights' running total."""
    w, picks = list(map(float, weights)), []
    for _ in range(keep):
        target = rng.random() * sum(w)
        i = next(i for i, running in enumerate(itertools.accumulate(w)) if w[i] > 0 and target < running)
        picks.append(i)
        w[i] = 0.0
    return picks


def test_weighted_picks_equal_a_plain_loop_and_are_distinct():
    gen = np.random.default_rng(11)
    for _ in range(200):
        n = int(gen.integers(1, 9))
        weights, keep = gen.uniform(0, 1, n) * (gen.uniform(0, 1, n) > 0.2), int(gen.integers(1, n + 1))
        if (weights > 0).sum() < keep:
            continue
        seed = int(gen.integers(2**31))
        picks = weighted_picks(weights, keep, np.random.default_rng(seed))
        assert picks == plain_picks(weights, keep, np.random.default_rng(seed))
        assert len(set(picks)) == keep and all(weights[i] > 0 for i in picks)
    assert sorted(weighted_picks(np.zeros(3), 3, np.random.default_rng(0))) == [0, 1, 2]  # all zero: uniform


def test_weighted_picks_frequencies_match_the_exact_probability_of_each_ordered_draw():
    """Over 20,000 seeded draws of 2 of 4, each ordered pair's frequency is within 4.5 standard errors of
    w_i / W x w_j / (W - w_i)."""
    weights, n = np.array([0.1, 0.2, 0.3, 0.4]), 20_000
    rng = np.random.default_rng(2024)
    seen = {}
    for _ in range(n):
        pair = tuple(weighted_picks(weights, 2, rng))
        seen[pair] = seen.get(pair, 0) + 1
    for i, j in itertools.permutations(range(4), 2):
        p = weights[i] / weights.sum() * weights[j] / (weights.sum() - weights[i])
        assert abs(seen.get((i, j), 0) / n - p) < 4.5 * math.sqrt(p * (1 - p) / n), (i, j)


# a hand-built task: each prompt's answers are right at a fixed rate (k right of G, the first k)
RATES = {"always": 1.0, "half": 0.5, "never": 0.0}


fixed_rate_round = rate_round(RATES)


def hand_sampler(**keys) -> LearnabilitySampler:
    return sampler_on("learnability", RATES, **keys)


def test_the_counts_decay_per_visit_and_the_prediction_is_the_posterior_mean_before_the_draw():
    sampler = hand_sampler(candidates=3, decay=0.5)
    history = {}
    for _ in range(12):
        draw = sampler.draw(fixed_rate_round, 2)
        assert len(draw.groups) == 2 and draw.units == [[g] for g in draw.groups] and all(g.used for g in draw.groups)
        assert draw.skipped == 1  # three candidates taken from the stream, one passed over unsampled
        assert len({g.problem.prompt_id for g in draw.groups}) == 2
        for g in draw.groups:
            right, drawn = history.get(g.problem.prompt_id, (0.0, 0.0))
            assert g.predicted_rate == pytest.approx((1 + right) / (2 + drawn), abs=1e-15)  # Beta(1, 1) prior
            history[g.problem.prompt_id] = (0.5 * right + g.correct.sum(), 0.5 * drawn + 4)
    assert sampler.stream.cursor == 12 * 3
    assert sampler.extra_state["counts"].keys() == history.keys()
    for pid, (right, drawn) in history.items():
        assert sampler.extra_state["counts"][pid] == pytest.approx([right, drawn], abs=1e-12)
    json.dumps(sampler.state_dict())  # the state is plain JSON: counts, cursor and the generator's state


@pytest.mark.parametrize("curve", ["group_informative", "pass_variance"])
def test_each_prompt_is_drawn_as_often_as_its_floored_weight(curve):
    """The counts held fixed (reset before every draw), estimate=mean: over 6,000 draws of one prompt, each prompt's
    frequency is within 4.5 standard errors of its floored weight at its posterior mean."""
    counts = {"always": [7.0, 8.0], "half": [3.0, 6.0], "never": [0.0, 40.0]}
    sampler, n = hand_sampler(candidates=3, estimate="mean", curve=curve, epsilon=0.3), 6000
    seen = dict.fromkeys(RATES, 0)
    for _ in range(n):
        sampler.extra_state["counts"] = {k: list(v) for k, v in counts.items()}
        seen[sampler.draw(fixed_rate_round, 1).groups[0].problem.prompt_id] += 1
    order = [p.prompt_id for p in sampler.stream.take(3)]  # every draw's candidates: the whole pool
    mean = np.array([(1 + counts[pid][0]) / (2 + counts[pid][1]) for pid in order])
    raw = learnability_weight(mean, 4, curve)
    want = dict(zip(order, floored(raw, 0.3)))
    assert want["never"] > raw[order.index("never")] / raw.sum()  # the floor: a prompt that ties keeps a chance
    for pid in RATES:
        assert abs(seen[pid] / n - want[pid]) < 4.5 * math.sqrt(want[pid] * (1 - want[pid]) / n), (pid, seen)


def test_thompson_estimates_keep_drawing_the_prompts_that_tie():
    sampler = hand_sampler(candidates=3)
    kept = [sampler.draw(fixed_rate_round, 1).groups[0].problem.prompt_id for _ in range(300)]
    counts = {pid: kept.count(pid) for pid in RATES}
    assert counts["half"] > 150 and counts["always"] > 10 and counts["never"] > 10, counts


def test_too_many_prompts_for_the_pool_stop_the_run_before_drawing():
    sampler = hand_sampler()
    draw = sampler.draw(fixed_rate_round, 4)
    assert draw.groups == [] and draw.exhausted == (
        "learnability sampler: prompts_per_step=4 is more than the training pool's 3 distinct prompts; a step "
        "draws that many distinct prompts")
    assert sampler.stream.cursor == 0


def learnability_cfg(tmp_path, steps=6, **keys) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / "learnability"), max_steps=steps, prompts_per_step=4, checkpoint_every=2)
    cfg.task.levels = [1, 2, 4]
    cfg.task.train_per_level = 4
    cfg.eval.n = 0
    cfg.sampler.name, cfg.sampler.group_size = "learnability", 4
    for k, v in keys.items():
        setattr(cfg.sampler.learnability, k, v)
    return cfg


def test_a_real_run_replays_from_its_own_tables(tmp_path):
    """The defaults (Thompson estimates, decay 0.7), 8 candidates of a 12-prompt pool: each step's prompts, their
    order, their recorded predictions and the skips are the rule replayed with plain loops from the prompt stream,
    the table's earlier rows and the run's seed (the sampler's generator: default_rng([seed, 0x5A3]))."""
    cfg = learnability_cfg(tmp_path, steps=6, candidates=2)
    g, s = recount_budget(train(cfg))
    assert (s["samples"] == 16).all() and g["used"].all() and (g["n_trained"] == g["group_size"]).all()
    assert g["round"].eq(0).all() and g.groupby("step")["prompt_id"].nunique().eq(4).all()
    errors = prediction_error(g["predicted_rate"], g["n_correct"], g["group_size"])
    assert np.isfinite(errors).all() and (errors <= 1).all()

    stream, rng = PromptStream(build_task(cfg.task).train, cfg.seed), np.random.default_rng([cfg.seed % 2**32, 0x5A3])
    counts, reordered = {}, False
    for (step, rows), skipped in zip(g.groupby("step", sort=True), s["skipped_prompts"]):
        cands, taken = [], 0
        while len(cands) < 8:
            (p,) = stream.take(1)
            taken += 1
            if p.prompt_id not in cands:
                cands.append(p.prompt_id)
        # Beta(1 + right, 1 + (drawn - right)), summed as the sampler sums: a parameter one ulp off can flip one of
        # beta's rejection steps, and the generator then runs on a different number of draws
        ab = [(1 + r, 1 + (d - r)) for r, d in (counts.get(pid, (0.0, 0.0)) for pid in cands)]
        p_hat = rng.beta([a for a, _ in ab], [b for _, b in ab])
        weights = [1 - p**4 - (1 - p) ** 4 for p in p_hat.tolist()]
        weights = [max(w / sum(weights), 0.05 / 8) for w in weights]
        order = plain_picks(weights, 4, rng)
        assert rows["prompt_id"].tolist() == [cands[i] for i in order], step
        assert rows["predicted_rate"].tolist() == pytest.approx([ab[i][0] / sum(ab[i]) for i in order], abs=1e-12)
        assert skipped == taken - 4
        reordered |= order != [0, 1, 2, 3]
        for row in rows.itertuples():
            r, d = counts.get(row.prompt_id, (0.0, 0.0))
            counts[row.prompt_id] = (0.7 * r + row.n_correct, 0.7 * d + row.group_size)
    assert reordered  # the weights did choose: not merely the first candidates each step


def test_resume_mid_run_restores_the_counts_and_the_generator_exactly(tmp_path):
    steps = 4
    full = train(learnability_cfg(tmp_path / "full", steps=steps, candidates=2))
    cfg = learnability_cfg(tmp_path / "killed", steps=steps - 1, candidates=2)
    killed = train(cfg)  # "killed" after the checkpoint before its last step, with that step written
    (killed / "checkpoints" / f"step-{steps - 1:06d}").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = steps
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))
    g = read_table(full, "groups").to_pandas()
    assert g["predicted_rate"].between(0, 1).all() and g.groupby("step").size().eq(4).all()


def test_budget_checks_know_its_draw(tmp_path):
    assert_draw_bounds(learnability_cfg(tmp_path, steps=4), 16, 16)  # prompts_per_step x group_size, always


@pytest.mark.parametrize("key,value,message", [
    ("candidates", 0, "must be >= 1 (a multiple of prompts_per_step; 1 draws every candidate)"),
    ("prior_alpha", 0.0, "must be > 0 (a Beta parameter)"),
    ("prior_beta", -1.0, "must be > 0 (a Beta parameter)"),
    ("decay", 1.5, "must lie in [0, 1]"),
    ("decay", -0.1, "must lie in [0, 1]"),
    ("epsilon", 2.0, "must lie in [0, 1]"),
    ("curve", "variance", "must be one of 'group_informative', 'pass_variance'"),
    ("estimate", "ucb", "must be one of 'thompson', 'mean'"),
])
def test_each_bad_key_is_refused_in_one_line_naming_it(key, value, message):
    cfg = TrainConfig().sampler
    setattr(cfg.learnability, key, value)
    with pytest.raises(ConfigError) as err:
        check_sampler(cfg)
    assert str(err.value) == f"sampler.learnability.{key}={value!r} is invalid: {message}"
    assert "\n" not in str(err.value) and re.search(rf"\bsampler\.learnability\.{key}\b", str(err.value))
