"""Pilot-Commit (sampler=pilot_commit): its pilot test and choice of prompts against hand-worked answers and a plain
loop, a step's draw on scripted answers (which pilots pass is known, so the groups, units and sample counts are too,
at both ends of draw_bounds and at the cap), evictions and the stop once every prompt is evicted, the rule replayed
from the groups and steps tables of a real tiny run (pilot answers pooled with the commit's), exact resume mid-run,
the budget checks and each refused setting."""

import json
import re

import numpy as np
import pytest
from reference import assert_draw_bounds, assert_same_rows, plain_grpo, recount_budget

from grpo_lab.config import TrainConfig
from grpo_lab.errors import ConfigError
from grpo_lab.records import Group, Problem
from grpo_lab.run.tables import read_table
from grpo_lab.samplers import PromptStream, check_sampler, draw_bounds
from grpo_lab.samplers.pilot_commit import PilotCommitSampler, passes_pilot, to_commit
from grpo_lab.tasks import build_task
from grpo_lab.train.trainer import train

R, W = True, False  # one answer right, one wrong


def test_the_pilot_passes_between_p_lower_and_one_minus_p_upper_inclusive():
    k8 = [np.array([R] * r + [W] * (8 - r)) for r in range(9)]  # 0..8 right of 8, the defaults 0.125 and 0.25
    assert [passes_pilot(c, 0.125, 0.25) for c in k8] == [False, True, True, True, True, True, True, False, False]
    assert [passes_pilot(c, 0.25, 0.25) for c in k8] == [False, False, True, True, True, True, True, False, False]
    assert passes_pilot(np.array([W, W]), 0.0, 0.25) and passes_pilot(np.array([R, R]), 0.125, 0.0)
    assert [passes_pilot(np.array(c), 0.125, 0.25) for c in ([R, R], [R, W], [W, W])] == [False, True, False]


def test_the_choice_against_a_plain_loop():
    """At most `need` pass: all of them. Else max_variance keeps the largest pilot std first, ties to the earlier
    (the code's stable sort), and random keeps `need` of the passing ones from the sampler's generator; both in
    stream order."""
    pilots = [np.array(c) for c in ([R, R, R, W], [R, W, W, W], [R, R, W, W], [W, W, W, W], [W, R, R, W])]
    assert to_commit(pilots, 5, 0.125, 0.25, "random", np.random.default_rng(0)) == [0, 1, 2, 4]
    assert to_commit(pilots, 2, 0.125, 0.25, "max_variance", None) == [2, 4]  # std 0.5 beats 0.433
    assert to_commit(pilots, 3, 0.125, 0.25, "max_variance", None) == [0, 2, 4]  # 0 and 1 tie: the earlier
    assert to_commit(pilots, 0, 0.125, 0.25, "max_variance", None) == []
    rng = np.random.default_rng(5)
    for _ in range(300):
        k, need = int(rng.integers(1, 9)), int(rng.integers(0, 8))
        pilots = [rng.random(k) < rng.random() for _ in range(int(rng.integers(1, 10)))]
        lo, up = float(rng.choice([0.0, 0.125, 0.25])), float(rng.choice([0.0, 0.25, 0.5]))
        passing = []
        for i, c in enumerate(pilots):
            share = sum(c) / len(c)
            if lo <= share <= 1 - up:
                passing.append(i)
        stds = {i: (sum((x - sum(pilots[i]) / k) ** 2 for x in pilots[i]) / k) ** 0.5 for i in passing}
        expected = passing if len(passing) <= need else sorted(sorted(passing, key=lambda i: (-stds[i], i))[:need])
        assert to_commit(pilots, need, lo, up, "max_variance", None) == expected
        seed = int(rng.integers(1 << 30))
        got = to_commit(pilots, need, lo, up, "random", np.random.default_rng(seed))
        assert got == sorted(got) and set(got) <= set(passing) and len(got) == min(need, len(passing))
        assert got == to_commit(pilots, need, lo, up, "random", np.random.default_rng(seed))  # its generator only


def scripted(pilots: list[list[bool]]):
    """A DrawRound whose k-th piloted prompt gets the answers pilots[k]; a commit gets one right answer and the rest
    wrong. Returns it and the log of its calls: (prompt ids, round, size)."""
    answers, calls = iter(pilots), []

    def draw_round(problems, rnd, size=None):
        calls.append(([p.prompt_id for p in problems], rnd, size))
        out = []
        for p in problems:
            correct = np.array(next(answers) if rnd == 0 else [R] + [W] * (size - 1))
            rewards = correct.astype(np.float32)
            out.append(Group(p, rnd, None, rewards, correct, bool(rewards.std() == 0)))
        return out

    return draw_round, calls


def hand_sampler(max_rounds=3, pool=12, **own) -> tuple[PilotCommitSampler, list[str]]:
    """group_size 4, pilots of 2, 2 x 2 prompts piloted a round, over a pool of `pool`; and the stream's order."""
    cfg = TrainConfig().sampler
    cfg.name, cfg.group_size = "pilot_commit", 4
    s = cfg.pilot_commit
    s.pilot_size, s.pilot_factor, s.max_rounds, s.choose = 2, 2, max_rounds, "max_variance"
    for k, v in own.items():
        setattr(s, k, v)
    check_sampler(cfg)
    problems = tuple(Problem(f"p{i}", f"q{i}", "1", "1") for i in range(pool))
    order = [p.prompt_id for p in PromptStream(problems, 7).take(pool * 4)]
    return PilotCommitSampler(cfg, PromptStream(problems, 7)), order


def test_a_step_on_scripted_answers_commits_exactly_the_prompts_known_to_pass():
    sampler, order = hand_sampler(p_solve=None)
    # round 1: only the second prompt passes; round 2: the first, second and fourth pass, one is still needed
    draw_round, calls = scripted([[R, R], [W, R], [W, W], [W, W], [R, W], [W, R], [R, R], [R, W]])
    draw = sampler.draw(draw_round, 2)
    assert calls == [(order[0:4], 0, 2), ([order[1]], 1, 2), (order[4:8], 0, 2), ([order[4]], 1, 2)]
    assert draw.exhausted is None and draw.skipped == 0
    assert [[(g.problem.prompt_id, g.round, len(g.rewards)) for g in unit] for unit in draw.units] == [
        [(order[1], 0, 2), (order[1], 1, 2)], [(order[4], 0, 2), (order[4], 1, 2)]]  # pilot + commit: 4 answers
    used = {(g.problem.prompt_id, g.round) for g in draw.groups if g.used}
    assert used == {(order[1], 0), (order[1], 1), (order[4], 0), (order[4], 1)}  # order[5], order[7]: not needed
    assert sum(len(g.rewards) for g in draw.groups) == 2 * 4 * 2 + 2 * 2  # every pilot counts
    assert sampler.stream.cursor == 8 and sampler.extra_state["evicted"] == {}


def test_a_step_draws_the_fewest_and_the_most_that_draw_bounds_gives():
    sampler, _ = hand_sampler()
    fewest, most = draw_bounds(sampler.cfg, 2)
    assert (fewest, most) == (4 * 2 + 2 * 2, 3 * 4 * 2 + 2 * 2)
    draw_round, _ = scripted([[R, W]] * 4)  # the first round fills the batch
    assert sum(len(g.rewards) for g in sampler.draw(draw_round, 2).groups) == fewest
    sampler, _ = hand_sampler(p_solve=None)
    draw_round, _ = scripted([[W, W]] * 8 + [[R, W]] * 4)  # the last round allowed fills it
    draw = sampler.draw(draw_round, 2)
    assert draw.exhausted is None and sum(len(g.rewards) for g in draw.groups) == most


def test_the_cap_returns_every_group_drawn_and_trains_none():
    sampler, _ = hand_sampler(max_rounds=2)
    draw_round, calls = scripted([[W, W], [R, W], [R, R], [W, W], [W, W], [R, R], [W, W], [R, R]])
    draw = sampler.draw(draw_round, 2)
    assert draw.exhausted == ("pilot_commit sampler: 2 generation rounds (sampler.pilot_commit.max_rounds) found only "
                              "1 of 2 prompts whose 2 pilot answers were between sampler.pilot_commit.p_lower=0.125 "
                              "and 1 - p_upper=0.75 right; the prompts are too easy or too hard for this model")
    assert [rnd for _, rnd, _ in calls] == [0, 1, 0] and len(draw.groups) == 4 + 1 + 4  # all drawn, returned
    assert draw.units == [] and not any(g.used for g in draw.groups)


def test_an_all_right_pilot_evicts_its_prompt_from_the_next_epoch_and_all_evicted_stops():
    """A pool of 4, 4 pilots a round: each round is one epoch. Epoch 0's all-right pilots evict their prompts, which
    epoch 1 passes over (counted as skipped, no samples); when every prompt is evicted the run stops, saying so."""
    sampler, order = hand_sampler(max_rounds=4, pool=4)
    draw_round, calls = scripted([[R, R], [R, W], [R, R], [W, W],  # epoch 0: evicts order[0] and order[2]
                                  [R, W], [W, W], [W, W], [R, R]])  # epochs 1 and 2: the two prompts left, twice
    draw = sampler.draw(draw_round, 2)
    left = [[pid for pid in order[k:k + 4] if pid not in (order[0], order[2])] for k in (4, 8)]
    assert calls == [(order[0:4], 0, 2), ([order[1]], 1, 2), (left[0] + left[1], 0, 2), (left[0][:1], 1, 2)]
    served = [k for k in range(4, 12) if order[k] not in (order[0], order[2])]  # positions of the 4 pilots
    assert draw.skipped == served[-1] + 1 - 4 - 4 and draw.exhausted is None  # the evicted met on the way: 2 to 4
    assert [u[0].problem.prompt_id for u in draw.units] == [order[1], left[0][0]]
    assert sampler.extra_state["evicted"] == {order[0]: 0, order[2]: 0, left[1][1]: 2}  # share 1 >= p_solve 1.0
    assert json.loads(json.dumps(sampler.state_dict())) == sampler.state_dict()  # JSON-able, as a checkpoint keeps

    sampler, order = hand_sampler(max_rounds=4, pool=4)
    draw_round, calls = scripted([[R, R]] * 4)
    draw = sampler.draw(draw_round, 2)  # epoch 0 evicts all; epoch 1 has nothing left
    assert len(calls) == 1 and len(draw.groups) == 4 and draw.units == [] and draw.skipped == 0
    assert draw.exhausted == ("pilot_commit sampler: every one of the training pool's 4 prompts has been evicted (a "
                              "pilot's pass rate reached sampler.pilot_commit.p_solve=1.0); nothing is left to draw")
    assert sampler.stream.cursor == 4
    draw = sampler.draw(draw_round, 2)  # a step after: drawing nothing
    assert draw.groups == [] and draw.exhausted and sampler.stream.cursor == 4


def pc_cfg(tmp_path, steps=6, **own) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / "pc"), max_steps=steps, prompts_per_step=4, checkpoint_every=2)
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = [1, 2, 3], 8, 0
    s = cfg.sampler
    s.name, s.group_size = "pilot_commit", 4
    s.pilot_commit.pilot_size, s.pilot_commit.pilot_factor = 2, 2
    for k, v in own.items():
        setattr(s.pilot_commit, k, v)
    return cfg


def test_a_real_run_replays_from_its_own_tables(tmp_path):
    """choose=max_variance, 6 steps: each step's pilots are the next prompts of the stream not evicted by the table's
    own earlier pilots (all right: evicted from the next epoch), each round's commits those its rule chooses, and
    each trained unit a prompt's pilot and commit under one baseline (the pilot's answers join the group)."""
    cfg = pc_cfg(tmp_path, choose="max_variance")
    g, s = recount_budget(train(cfg))
    pool = build_task(cfg.task).train
    stream, n, evicted, passed_over = PromptStream(pool, cfg.seed), len(pool), {}, 0
    for (step, rows), row in zip(g.groupby("step", sort=True), s.itertuples()):
        rows = rows.reset_index(drop=True)
        at, units, rounds, skipped = 0, [], 0, 0
        while len(units) < 4:
            pids, epochs = [], []
            while len(pids) < 8:
                epoch = stream.cursor // n
                (p,) = stream.take(1)
                if evicted.get(p.prompt_id, epoch) < epoch:
                    skipped += 1
                else:
                    pids.append(p.prompt_id)
                    epochs.append(epoch)
            pilots = rows.iloc[at:at + 8]
            assert pilots["prompt_id"].tolist() == pids and (pilots["round"] == 0).all(), step
            assert (pilots["group_size"] == 2).all()
            for (_, pilot), epoch in zip(pilots.iterrows(), epochs):
                if pilot["n_correct"] == 2:
                    evicted.setdefault(pilot["prompt_id"], epoch)
            share = pilots["n_correct"].to_numpy() / 2
            passing = [i for i in range(8) if 0.125 <= share[i] <= 0.75]  # with k = 2: one right of two
            chosen = passing[:4 - len(units)]  # every passing pilot has std 0.5: the earliest in stream order
            rest = rows.iloc[at + 8:at + 8 + len(chosen)]
            assert rest["prompt_id"].tolist() == pilots["prompt_id"].iloc[chosen].tolist(), step
            assert (rest["round"] == 1).all() and (rest["group_size"] == 2).all() and rest["used"].all()
            units += [(pilots.index[i], j) for i, j in zip(chosen, rest.index)]
            assert pilots["used"].tolist() == [i in chosen for i in range(8)]
            at, rounds = at + 8 + len(chosen), rounds + 1
        assert at == len(rows) and row.skipped_prompts == skipped, step
        assert row.samples == 2 * 8 * rounds + 2 * 4  # every pilot, and 2 more answers for each of the 4 committed
        for i, j in units:  # one unit each, pilot + commit, eq. 3 over the four answers
            pilot, rest = rows.loc[i], rows.loc[j]
            assert pilot["unit"] == rest["unit"] and pilot["n_trained"] + rest["n_trained"] == 4
            got = np.concatenate([pilot["advantages"], rest["advantages"]])
            np.testing.assert_allclose(got, plain_grpo([*pilot["rewards"], *rest["rewards"]]), rtol=1e-5, atol=1e-6)
        assert rows["unit"].nunique() == 4
        passed_over += skipped
    assert evicted and passed_over > 0  # all-right pilots evicted prompts, passed over in a later epoch


def test_resume_mid_run_restores_the_sampler_exactly(tmp_path):
    """choose=random: more pilots pass than a round needs, so the choice draws from the sampler's generator, whose
    state, with the evicted prompts, a checkpoint restores."""
    full = train(pc_cfg(tmp_path / "full", steps=4))
    cfg = pc_cfg(tmp_path / "killed", steps=3)
    killed = train(cfg)  # "killed" after the checkpoint before its last step, with that step written
    (killed / "checkpoints" / "step-000003").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = 4
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))
    g = read_table(full, "groups").to_pandas()
    pilots = g[g["round"] == 0]
    passing = pilots[pilots["n_correct"] == 1].groupby("step").size()
    assert (passing > 4).any()  # some round had more passing pilots than the batch needed: a random choice


@pytest.mark.parametrize("max_rounds", [1, 10])
def test_budget_checks_know_the_draw(tmp_path, max_rounds):
    cfg = pc_cfg(tmp_path, max_rounds=max_rounds)
    assert_draw_bounds(cfg, 8 * 2 + 4 * 2, max_rounds * 8 * 2 + 4 * 2)


@pytest.mark.parametrize("key,value,message", [
    ("pilot_size", 0, "must be >= 1"),
    ("pilot_size", 4, "must be < sampler.group_size=4 (the commit draws group_size - pilot_size more; pilot and "
                      "commit train as one group of group_size)"),
    ("pilot_factor", 0, "must be >= 1 (a round pilots pilot_factor x prompts_per_step prompts)"),
    ("p_lower", -0.1, "must lie in [0, 1]"),
    ("p_upper", 1.5, "must lie in [0, 1]"),
    ("p_lower", 0.9, "must be <= 1 - sampler.pilot_commit.p_upper = 0.75 (else no pilot passes)"),
    ("p_solve", 0.0, "must lie in (0, 1], or be null (no prompt is evicted)"),
    ("p_solve", 1.5, "must lie in (0, 1], or be null (no prompt is evicted)"),
    ("choose", "best", "must be one of 'random', 'max_variance'"),
    ("max_rounds", 0, "must be >= 1"),
])
def test_each_bad_key_is_refused_in_one_line_naming_it(key, value, message):
    cfg = TrainConfig().sampler
    cfg.name, cfg.group_size = "pilot_commit", 4
    setattr(cfg.pilot_commit, key, value)
    with pytest.raises(ConfigError) as err:
        check_sampler(cfg)
    assert str(err.value) == f"sampler.pilot_commit.{key}={value!r} is invalid: {message}"
    assert "\n" not in str(err.value) and re.search(rf"\bsampler\.pilot_commit\.{key}\b", str(err.value))


def test_no_eviction_with_p_solve_null():
    sampler, order = hand_sampler(p_solve=None, pool=4)
    draw = sampler.draw(scripted([[R, R]] * 4 + [[R, W]] * 4)[0], 2)
    assert draw.exhausted is None and draw.skipped == 0 and sampler.extra_state["evicted"] == {}
    assert [u[0].problem.prompt_id for u in draw.units] == order[4:6]
