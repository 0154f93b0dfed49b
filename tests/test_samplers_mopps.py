"""MoPPS: its posterior update and selection against hand-worked and brute-forced answers, its prediction recorded
in the groups table (`predicted_rate`) and replayed from the table's own rows, its budget recounted from a real tiny
run, its skips counted, and an exact resume mid-run."""

import itertools
import re

import numpy as np
import pytest
from hand_task import rate_round, sampler_on
from reference import assert_same_rows, recount_budget

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.records import Group, Problem
from grpo_lab.run.rows import group_rows
from grpo_lab.run.tables import read_table, write_part
from grpo_lab.samplers import PromptStream, check_sampler
from grpo_lab.samplers.mopps import MoppsSampler, nearest, posterior_update, prediction_error
from grpo_lab.tasks import build_task
from grpo_lab.train.trainer import train


def test_posterior_update_by_hand():
    # decay 0.5: half the old counts, half the prior, plus 2 right and 2 wrong
    assert posterior_update(3.0, 5.0, 2, 4, (1.0, 1.0), 0.5) == (4.0, 5.0)
    assert posterior_update(3.0, 5.0, 2, 4, (1.0, 1.0), 1.0) == (5.0, 7.0)  # no forgetting: Beta-binomial counts
    assert posterior_update(3.0, 5.0, 4, 4, (2.0, 1.0), 0.0) == (6.0, 1.0)  # all forgotten: the prior + this visit


@pytest.mark.parametrize("decay", [0.0, 0.3, 0.5, 1.0])
def test_discounted_posterior_is_the_prior_plus_discounted_counts(decay):
    """After visits s_1..s_n of k: alpha = alpha_0 + sum_j decay^(n-j) s_j (the prior is the update's fixed point)."""
    rng = np.random.default_rng(7)
    prior, k = (1.5, 0.5), 8
    right = rng.integers(0, k + 1, 12).tolist()
    a, b = prior
    for s in right:
        a, b = posterior_update(a, b, s, k, prior, decay)
    n = len(right)
    weights = [decay ** (n - 1 - j) for j in range(n)]
    assert a == pytest.approx(prior[0] + sum(w * s for w, s in zip(weights, right)), rel=1e-12)
    assert b == pytest.approx(prior[1] + sum(w * (k - s) for w, s in zip(weights, right)), rel=1e-12)


def test_nearest_by_hand_and_against_every_subset():
    # distances .16, 0, .0025, .16, .0025: the tie between 2 and 4 (and 0 and 3) goes to the earlier
    assert nearest(np.array([0.9, 0.5, 0.45, 0.1, 0.55]), 0.5, 3) == [1, 2, 4]
    assert nearest(np.array([0.9, 0.5, 0.45, 0.1, 0.55]), 0.5, 4) == [1, 2, 4, 0]
    rng = np.random.default_rng(3)
    for _ in range(20):
        p, target, keep = rng.uniform(0, 1, 7), rng.uniform(0, 1), int(rng.integers(1, 7))
        best = min(itertools.combinations(range(7), keep), key=lambda s: sum((p[i] - target) ** 2 for i in s))
        assert sorted(nearest(p, target, keep)) == sorted(best)


def test_prediction_error_is_written_and_measured_from_the_table(tmp_path):
    """Hand-built groups through the table writer: the prediction is a float column (NaN where none), and
    |predicted - n_correct / group_size| is the prediction's error."""
    def group(pid, correct, predicted):
        c = np.array(correct, bool)
        return Group(Problem(pid, "1+1=", "2", "1"), 0, None, c.astype(np.float32), c, bool(c.all() or not c.any()),
                     used=True, tokens=len(c), predicted_rate=predicted)

    groups = [group("a", [1, 0, 1, 0], 0.5), group("b", [1, 1, 1, 0], None),
              group("c", [1, 1, 1, 1, 0, 0, 0, 0], 0.25), group("d", [0, 0, 0, 0], 0.9)]
    write_part(tmp_path, "groups", 1, group_rows("run", 1, groups, {"samples_total": 0, "tokens_total": 0}))
    g = read_table(tmp_path, "groups").to_pandas()
    assert str(g["predicted_rate"].dtype) == "float64"
    assert g["predicted_rate"].tolist()[::2] == [0.5, 0.25] and np.isnan(g["predicted_rate"][1])
    err = prediction_error(g["predicted_rate"], g["n_correct"], g["group_size"])
    np.testing.assert_allclose(err, [0.0, np.nan, 0.25, 0.9], rtol=0, atol=1e-15)


# a hand-built task: each prompt's answers are right at a fixed rate (k right of G, the first k)
RATES = {"always": 1.0, "half": 0.5, "never": 0.0}


fixed_rate_round = rate_round(RATES)


def hand_sampler(**keys) -> MoppsSampler:
    return sampler_on("mopps", RATES, **keys)


@pytest.mark.parametrize("decay", [0.0, 0.5, 1.0])
def test_mean_selection_settles_on_the_prompt_predicted_at_the_target(decay):
    """Every prompt is a candidate every step, one is kept: an always-right or never-right prompt, once seen, is
    predicted at 5/6 or 1/6 (at any decay) and never kept again, while the half-right one stays at 1/2, tied with the
    prompts never seen (the earlier candidate wins a tie)."""
    sampler = hand_sampler(candidates=3, selection="mean", decay=decay)
    kept, predicted = [], []
    for _ in range(8):
        draw = sampler.draw(fixed_rate_round, 1)
        assert len(draw.groups) == 1 and draw.units == [draw.groups] and draw.groups[0].used
        assert draw.skipped == 2  # three candidates taken from the stream, two passed over unsampled
        kept.append(draw.groups[0].problem.prompt_id)
        predicted.append(draw.groups[0].predicted_rate)
    assert kept.count("half") >= 6 and all(pid == "half" or pid not in kept[:i] for i, pid in enumerate(kept))
    assert predicted == [0.5] * 8  # each kept one was unseen (the prior's mean) or the half-right one
    assert sampler.stream.cursor == 8 * 3
    post = sampler.extra_state["posterior"]
    assert post["half"][0] == post["half"][1]
    for pid, mean in (("always", 5 / 6), ("never", 1 / 6)):
        assert pid not in kept or post[pid][0] / sum(post[pid]) == pytest.approx(mean, abs=1e-15)


def test_thompson_selection_re_measures_what_the_mean_never_would():
    """Thompson draws keep exploring: the always- and never-right prompts are re-drawn now and then, the half-right
    one still most often; each kept group records its posterior mean before the draw (the prediction), not the
    draw that ranked it."""
    sampler = hand_sampler(candidates=3, selection="thompson", decay=0.5)
    kept, predicted, means = [], [], []
    for _ in range(60):
        before = {pid: a / (a + b) for pid, (a, b) in sampler.extra_state.get("posterior", {}).items()}
        (g,) = sampler.draw(fixed_rate_round, 1).groups
        kept.append(g.problem.prompt_id)
        predicted.append(g.predicted_rate)
        means.append(before.get(g.problem.prompt_id, 0.5))  # never seen: the prior Beta(1, 1)'s mean
    counts = {pid: kept.count(pid) for pid in RATES}
    assert counts["half"] > 30 and counts["always"] + counts["never"] > 2, counts
    assert predicted == pytest.approx(means, abs=1e-15)


def test_too_many_prompts_for_the_pool_stop_the_run_before_drawing():
    sampler = hand_sampler()
    draw = sampler.draw(fixed_rate_round, 4)
    assert draw.groups == [] and draw.exhausted == ("mopps sampler: prompts_per_step=4 is more than the training "
                                                   "pool's 3 distinct prompts; a step keeps that many distinct prompts")
    assert sampler.stream.cursor == 0


def mopps_cfg(tmp_path, steps=6, **mopps) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / "mopps"), max_steps=steps, prompts_per_step=4, checkpoint_every=2)
    cfg.task.levels = [1, 2, 4]
    cfg.task.train_per_level = 4
    cfg.eval.n = 0
    cfg.sampler.name, cfg.sampler.group_size = "mopps", 4
    for k, v in mopps.items():
        setattr(cfg.sampler.mopps, k, v)
    return cfg


def test_a_real_run_replays_from_its_own_tables(tmp_path):
    """selection=mean, decay 0.5, 8 candidates of a 12-prompt pool: each step's kept prompts, their order, their
    recorded predictions and the skips are the rule replayed from the prompt stream and the earlier rows."""
    cfg = mopps_cfg(tmp_path, steps=6, candidates=2, selection="mean", decay=0.5)
    g, s = recount_budget(train(cfg))
    assert (s["samples"] == 16).all() and g["used"].all() and (g["n_trained"] == g["group_size"]).all()
    assert g["round"].eq(0).all() and g.groupby("step")["prompt_id"].nunique().eq(4).all()

    # the prediction, from the table's own earlier rows alone: alpha/(alpha+beta) of the discounted counts
    post = {}
    for row in g.itertuples():
        a, b = post.get(row.prompt_id, (1.0, 1.0))
        assert row.predicted_rate == pytest.approx(a / (a + b), rel=0, abs=1e-12)
        post[row.prompt_id] = (0.5 * a + 0.5 + row.n_correct, 0.5 * b + 0.5 + row.group_size - row.n_correct)
    errors = prediction_error(g["predicted_rate"], g["n_correct"], g["group_size"])
    assert np.isfinite(errors).all() and (errors <= 1).all()

    # the selection, from the prompt stream: 8 distinct candidates, the 4 nearest 1/2 kept, nearest first
    stream, post, reordered = PromptStream(build_task(cfg.task).train, cfg.seed), {}, False
    for (step, rows), skipped in zip(g.groupby("step", sort=True), s["skipped_prompts"]):
        cands, taken = [], 0
        while len(cands) < 8:
            (p,) = stream.take(1)
            taken += 1
            if p.prompt_id not in cands:
                cands.append(p.prompt_id)
        means = [(lambda a, b: a / (a + b))(*post.get(pid, (1.0, 1.0))) for pid in cands]
        order = sorted(range(8), key=lambda i: ((means[i] - 0.5) ** 2, i))[:4]
        assert rows["prompt_id"].tolist() == [cands[i] for i in order], step
        assert skipped == taken - 4
        reordered |= order != [0, 1, 2, 3]
        for row in rows.itertuples():
            a, b = post.get(row.prompt_id, (1.0, 1.0))
            post[row.prompt_id] = (0.5 * a + 0.5 + row.n_correct, 0.5 * b + 0.5 + row.group_size - row.n_correct)
    assert reordered  # the predictions did choose: not merely the first candidates each step


def test_other_samplers_record_no_prediction(tmp_path):
    cfg = mopps_cfg(tmp_path, steps=1)
    cfg.sampler.name = "fixed"
    g = read_table(train(cfg), "groups").to_pandas()
    assert len(g) == 4 and str(g["predicted_rate"].dtype) == "float64" and g["predicted_rate"].isna().all()


def test_resume_mid_run_restores_the_posterior_and_the_generator_exactly(tmp_path):
    steps = 4
    full = train(mopps_cfg(tmp_path / "full", steps=steps, candidates=2))
    cfg = mopps_cfg(tmp_path / "killed", steps=steps - 1, candidates=2)
    killed = train(cfg)  # "killed" after the checkpoint before its last step, with that step written
    (killed / "checkpoints" / f"step-{steps - 1:06d}").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = steps
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))
    g = read_table(full, "groups").to_pandas()
    assert g["predicted_rate"].between(0, 1).all()


def test_budget_checks_know_its_draw(tmp_path):
    cfg = mopps_cfg(tmp_path, steps=4)
    cfg.max_samples = 16 - 1
    with pytest.raises(ConfigError, match=r"below one step's draw \(16 samples"):
        validate(cfg)
    cfg.max_samples = 4 * 16 + 1
    with pytest.raises(ConfigError, match="at most 16 samples"):
        validate(cfg)
    cfg.max_samples = 4 * 16
    validate(cfg)


@pytest.mark.parametrize("key,value,message", [
    ("prior_alpha", 0.0, "must be > 0 (a Beta parameter)"),
    ("prior_beta", -1.0, "must be > 0 (a Beta parameter)"),
    ("decay", 1.5, "must lie in [0, 1]"),
    ("decay", -0.1, "must lie in [0, 1]"),
    ("target", 1.2, "must lie in [0, 1]"),
    ("candidates", 0, "must be >= 1 (a multiple of prompts_per_step; 1 keeps every candidate)"),
    ("selection", "ucb", "must be one of 'thompson', 'mean'"),
])
def test_each_bad_key_is_refused_in_one_line_naming_it(key, value, message):
    cfg = TrainConfig().sampler
    setattr(cfg.mopps, key, value)
    with pytest.raises(ConfigError) as err:
        check_sampler(cfg)
    assert str(err.value) == f"sampler.mopps.{key}={value!r} is invalid: {message}"
    assert "\n" not in str(err.value) and re.search(rf"\bsampler\.mopps\.{key}\b", str(err.value))
