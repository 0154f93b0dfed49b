"""Reinforce-Ada, KnapsackRL and GRESO: their rules against brute force, their edge cases (prompts that
never mix, the last prompt of a budget), budget accounting recounted from the tables of real tiny runs,
and exact resume mid-run."""

import itertools

import numpy as np
import pytest
from reference import assert_draw_bounds, assert_same_rows, recount_budget

from grpo_lab.config import TrainConfig
from grpo_lab.run.checkpoints import read_state
from grpo_lab.samplers.greso import keep_probability
from grpo_lab.samplers.knapsack import allocate, group_value
from grpo_lab.samplers.reinforce_ada import balanced_selection, exit_rule_holds
from grpo_lab.train.trainer import train

ADAPTIVE = ("reinforce_ada", "knapsack", "greso")


def brute_allocation(rates, total, unit, least, most, kind):
    """The best value over every split (multiples of unit in [least, most] summing to total)."""
    options = range(least, most + 1, unit)
    best = max((a for a in itertools.product(options, repeat=len(rates)) if sum(a) == total),
               key=lambda a: sum(group_value(n, p, kind) for n, p in zip(a, rates)))
    return sum(group_value(n, p, kind) for n, p in zip(best, rates))


@pytest.mark.parametrize("kind", ["info_gain", "nontie"])
@pytest.mark.parametrize("seed", range(4))
def test_greedy_allocation_is_exactly_optimal(kind, seed):
    rng = np.random.default_rng(seed)
    rates = list(rng.uniform(0.02, 0.98, 4))
    alloc = allocate(rates, total=24, unit=2, least=2, most=12, fallback=6, kind=kind)
    assert sum(alloc) == 24 and all(2 <= a <= 12 and a % 2 == 0 for a in alloc)
    value = sum(group_value(n, p, kind) for n, p in zip(alloc, rates))
    assert value == pytest.approx(brute_allocation(rates, 24, 2, 2, 12, kind), rel=1e-12)


def test_allocation_edge_cases():
    # never seen: the uniform allocation; seen at 0 or 1: the minimum, the rest to the hopeless first
    assert allocate([None, None, None], 24, 2, 2, 16, 8) == [8, 8, 8]
    assert allocate([0.0, 1.0, 0.5], 24, 2, 2, 16, 8) == [6, 2, 16]  # 0.5 capped at 16, leftover 6 -> p = 0
    assert allocate([1.0, 1.0], 16, 2, 2, 8, 8) == [8, 8]  # nothing else can take it: even split
    # the last prompt of a budget: totals at both ends of what fits, and beyond
    assert allocate([0.3, 0.6], 4, 2, 2, 8, 4) == [2, 2]
    assert allocate([0.3, 0.6], 16, 2, 2, 8, 4) == [8, 8]
    with pytest.raises(ValueError, match="cannot split 18 samples over 2 prompts"):
        allocate([0.3, 0.6], 18, 2, 2, 8, 4)
    # unseen prompts whose fallback does not fit: what is left goes to them in turn
    assert allocate([None, None, 0.5], 12, 2, 2, 8, 6) == [6, 4, 2]
    # the paper's value moves samples from easy prompts to hard ones (a hard group mixes only when large)
    easy_hard = allocate([0.5, 0.95, 0.05, None], 32, 2, 2, 16, 8)
    assert easy_hard[1] == 2 and easy_hard[2] > easy_hard[0] > easy_hard[1]


def test_reinforce_ada_rules():
    assert exit_rule_holds(1, 0, "positive", 4, 4) and not exit_rule_holds(0, 9, "positive", 4, 4)
    assert exit_rule_holds(4, 4, "balanced", 4, 4) and not exit_rule_holds(9, 3, "balanced", 4, 4)
    mask = balanced_selection(np.array([1, 1, 1, 1, 1, 0, 1, 0, 0, 0], bool), 6)
    assert mask.tolist() == [1, 1, 1, 0, 0, 1, 0, 1, 1, 0]  # three right, three wrong, earliest first
    never_mixed = balanced_selection(np.zeros(12, bool), 8)  # all wrong: the first 8
    assert never_mixed.tolist() == [True] * 8 + [False] * 4
    scarce = balanced_selection(np.array([0, 0, 0, 0, 0, 0, 1, 0], bool), 4)  # one right: it and three wrong
    assert scarce.sum() == 4 and scarce[6]


def test_greso_keep_probability():
    assert keep_probability(0, 0.5, 0.01) == 1.0
    assert keep_probability(3, 0.5, 0.01) == 0.125
    assert keep_probability(50, 0.5, 0.01) == 0.01  # the floor: a tied prompt is still re-measured sometimes


def adaptive_cfg(tmp_path, sampler: str, levels=(1, 2, 4), steps=4, **sampler_kw) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / sampler), max_steps=steps, prompts_per_step=4, checkpoint_every=2)
    cfg.task.levels = list(levels)
    cfg.task.train_per_level = 4
    cfg.eval.n = 0
    s = cfg.sampler
    s.name, s.group_size = sampler, 4
    s.reinforce_ada.round_size, s.reinforce_ada.min_pos, s.reinforce_ada.min_neg = 2, 2, 2
    s.reinforce_ada.max_per_prompt = 12
    s.knapsack.round_size, s.knapsack.min_per_prompt, s.knapsack.max_per_prompt = 2, 2, 12
    s.pods.n, s.dars.max_per_prompt = 8, 12
    for k, v in sampler_kw.items():  # the sampler's own keys (sampler.<name>.<key>)
        setattr(getattr(s, sampler), k, v)
    return cfg


def test_reinforce_ada_budget_and_units(tmp_path):
    run = train(adaptive_cfg(tmp_path, "reinforce_ada"))
    g, s = recount_budget(run)
    for _, rounds in g.groupby(["step", "prompt_id"]):
        assert rounds["round"].tolist() == list(range(len(rounds)))
        drawn = rounds["group_size"].sum()
        right = sum(map(sum, rounds["correct"]))
        assert rounds["n_trained"].sum() == 4  # a fixed-size group trains, whatever was drawn
        done = drawn >= 4 and right >= 2 and drawn - right >= 2
        assert done or drawn == 12  # retired by the exit rule, or at the cap
        before = rounds.iloc[:-1]  # the rule did not hold a round earlier (with group_size answers)
        if len(before) and before["group_size"].sum() >= 4:
            r = sum(map(sum, before["correct"]))
            assert not (r >= 2 and before["group_size"].sum() - r >= 2)
    assert (s["samples"] <= 4 * 12).all()


def test_reinforce_ada_on_prompts_that_never_mix(tmp_path):
    cfg = adaptive_cfg(tmp_path, "reinforce_ada", levels=(4,), steps=2)
    cfg.sampler.reinforce_ada.exit_rule = "positive"
    g, s = recount_budget(train(cfg))
    per_prompt = g.groupby(["step", "prompt_id"]).agg(drawn=("group_size", "sum"), right=("n_correct", "sum"),
                                                      trained=("n_trained", "sum"))
    never = per_prompt[per_prompt["right"] == 0]
    assert len(never) > 0 and (never["drawn"] == 12).all() and (never["trained"] == 4).all()  # cap, then train
    assert np.isfinite(s["loss"]).all()  # tied units train with zero advantage (the KL still acts)


def test_knapsack_budget_is_exact_and_follows_the_allocation(tmp_path):
    cfg = adaptive_cfg(tmp_path, "knapsack", steps=8)
    g, s = recount_budget(train(cfg))
    assert (s["samples"] == 16).all()  # prompts_per_step x group_size, every step
    assert (g["round"] == 0).all() and g["used"].all() and (g["n_trained"] == g["group_size"]).all()
    assert (g["group_size"] % 2 == 0).all() and g["group_size"].between(2, 12).all()
    # replay the allocation from the table: each prompt's rate at its previous visit
    last: dict = {}
    for _, rows in g.groupby("step", sort=True):
        rates = [last.get(p) for p in rows["prompt_id"]]
        assert rows["group_size"].tolist() == allocate(rates, 16, 2, 2, 12, 4)
        last.update(zip(rows["prompt_id"], rows["n_correct"] / rows["group_size"]))
    assert g["group_size"].nunique() > 1  # it did move samples between prompts


def test_greso_skips_are_counted_and_budgets_recounted(tmp_path):
    cfg = adaptive_cfg(tmp_path, "greso", levels=(1, 2), steps=8, max_rounds=10, p_easy=0.3, p_hard=0.3)
    run = train(cfg)
    g, s = recount_budget(run)
    assert s["skipped_prompts"].sum() > 0
    state = read_state(run / "checkpoints" / "step-000008")["counters"]["sampler"]
    # every prompt taken from the stream was either sampled (one group) or skipped
    assert state["cursor"] == len(g) + s["skipped_prompts"].sum()
    assert not g["used"][g["tie"]].any() and (g.groupby("step")["used"].sum() == 4).all()
    easy, hard = cfg.sampler.greso.min_p, cfg.sampler.greso.max_p
    assert easy <= state["p_easy"] <= hard and easy <= state["p_hard"] <= hard


@pytest.mark.parametrize("sampler", [*ADAPTIVE, "band"])
def test_resume_mid_run_restores_the_sampler_exactly(tmp_path, sampler):
    kw = {"greso": dict(levels=(1, 2), max_rounds=6),  # band: its exploring draws come from its generator
          "band": dict(lo=0.1, hi=0.9, explore=0.5, steps=6)}.get(sampler, {})
    steps = kw.pop("steps", 4)
    full = train(adaptive_cfg(tmp_path / "full", sampler, steps=steps, **kw))
    cfg = adaptive_cfg(tmp_path / "killed", sampler, steps=steps - 1, **kw)
    killed = train(cfg)  # "killed" after the checkpoint before its last step, with that step written
    (killed / "checkpoints" / f"step-{steps - 1:06d}").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = steps
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))


@pytest.mark.parametrize("sampler,least,most", [("reinforce_ada", 4 * 4, 4 * 12), ("knapsack", 16, 16),
                                                ("greso", 16, 16 * 4), ("pods", 4 * 8, 4 * 8), ("dars", 16, 4 * 12),
                                                ("replay", 16, 16)])
def test_budget_checks_know_each_samplers_draw(tmp_path, sampler, least, most):
    cfg = adaptive_cfg(tmp_path, sampler)
    assert_draw_bounds(cfg, least, most)


def test_max_samples_ends_an_adaptive_run_at_the_first_step_past_it(tmp_path):
    cfg = adaptive_cfg(tmp_path, "reinforce_ada", steps=50)
    cfg.max_samples = 100
    g, s = recount_budget(train(cfg))
    assert s["samples_total"].iloc[-1] >= 100 > s["samples_total"].iloc[-2]
