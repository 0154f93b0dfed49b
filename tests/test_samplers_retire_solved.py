"""Retiring solved prompts (sampler=retire_solved): the retirement test by hand, the stream's passing-over against a
plain loop over its epochs, whole runs of steps against an independent loop of the rule (and against sampler=fixed
when nothing is solved), the run's stop once every prompt is retired, the rule replayed from the groups and steps
tables of a real tiny run, its state JSON-able, an exact resume mid-run, the budget checks and each refused value."""

import json
import re

import numpy as np
import pytest
from hand_task import rate_round, sampler_on
from reference import assert_draw_bounds, assert_same_rows, recount_budget

from grpo_lab.config import TrainConfig
from grpo_lab.errors import ConfigError
from grpo_lab.records import Problem
from grpo_lab.samplers import PromptStream, check_sampler
from grpo_lab.samplers.fixed import FixedSampler
from grpo_lab.samplers.retire_solved import RetireSolvedSampler, retires, take_unretired
from grpo_lab.tasks import build_task
from grpo_lab.train.trainer import train


def test_a_group_retires_its_prompt_at_or_above_the_pass_rate():
    assert retires(np.array([1] * 9 + [0], bool), 0.9)  # 9 of 10: exactly the threshold (the code's >=)
    assert not retires(np.array([1] * 8 + [0] * 2, bool), 0.9)
    assert retires(np.ones(8, bool), 0.9) and not retires(np.array([1] * 7 + [0], bool), 0.9)  # G = 8: all right
    assert retires(np.array([1] * 7 + [0], bool), 0.875)  # open-instruct's scripts' 0.875: 7 of 8 retires
    assert retires(np.array([1, 1, 1, 0], bool), 0.75) and not retires(np.array([1, 1, 0, 0], bool), 0.75)


def pool_of(n: int) -> tuple[Problem, ...]:
    return tuple(Problem(f"p{i}", f"q{i}", "0", "1") for i in range(n))


def plain_order(pool, seed: int, positions: int) -> list[str]:
    """The stream's prompt ids at positions 0..positions-1, one position at a time."""
    stream = PromptStream(pool, seed)
    return [stream.take(1)[0].prompt_id for _ in range(positions)]


def test_passing_over_retired_prompts_against_a_plain_loop():
    """From any cursor, with any retirements: the prompts served, their epochs, the count passed over and the cursor
    after, against a loop over the stream's positions that serves a prompt unless retired in an earlier epoch."""
    rng, pool = np.random.default_rng(11), pool_of(7)
    order = plain_order(pool, 3, 7 * 40)
    for _ in range(200):
        cursor, count = int(rng.integers(0, 7 * 10)), int(rng.integers(1, 12))
        retired = {f"p{i}": int(rng.integers(0, 12)) for i in range(7) if rng.random() < 0.6}
        if len(retired) == 7:
            retired.pop("p0")  # one prompt never retires: the scan always fills
        stream = PromptStream(pool, 3)
        stream.cursor = cursor
        got = take_unretired(stream, retired, count)
        served, epochs, passed, k = [], [], 0, cursor
        while len(served) < count:
            pid, epoch = order[k], k // 7
            if pid in retired and retired[pid] < epoch:
                passed += 1
            else:
                served.append(pid)
                epochs.append(epoch)
            k += 1
        assert ([p.prompt_id for p in got[0]], got[1], got[2]) == (served, epochs, passed)
        assert stream.cursor == k


def test_a_whole_epoch_with_nothing_left_gives_none_and_leaves_the_cursor():
    pool = pool_of(5)
    order = plain_order(pool, 3, 10)
    retired = {f"p{i}": 0 for i in range(5)}  # every prompt retired during epoch 0: gone from epoch 1 on
    stream = PromptStream(pool, 3)
    stream.cursor = 2
    got = take_unretired(stream, retired, 3)  # the rest of epoch 0 is still served
    assert [p.prompt_id for p in got[0]] == order[2:5] and got[1:] == ([0, 0, 0], 0) and stream.cursor == 5
    assert take_unretired(stream, retired, 1) is None and stream.cursor == 5
    stream.cursor = 3  # two of epoch 0 left, then an empty epoch: the step cannot be filled
    assert take_unretired(stream, retired, 3) is None and stream.cursor == 3


# a hand-built task: each prompt's answers are right at a fixed rate (the first k of G)
RATES = {"p0": 1.0, "p1": 0.75, "p2": 0.5, "p3": 0.25, "p4": 0.0, "p5": 1.0, "p6": 0.5}


fixed_rate_round = rate_round(RATES)


def hand_sampler(pass_rate=0.75, rates=RATES) -> RetireSolvedSampler:
    return sampler_on("retire_solved", pool_of(len(rates)), pass_rate=pass_rate)


@pytest.mark.parametrize("pass_rate", [1.0, 0.75, 0.5, 0.25])
def test_steps_follow_an_independent_loop_of_the_rule(pass_rate):
    """30 steps of 3 prompts over 7 (13 epochs and more): the prompts drawn and the skips are those of a plain loop
    over the stream's positions that retires a prompt whose rate reaches the threshold, after the step that drew it,
    from the epoch after the one it was drawn in."""
    sampler = hand_sampler(pass_rate)
    order = plain_order(pool_of(7), 5, 7 * 100)
    k, retired_at = 0, {}
    for step in range(30):
        draw = sampler.draw(fixed_rate_round, 3)
        expected, epochs, skipped = [], [], 0
        while len(expected) < 3:
            pid, epoch = order[k], k // 7
            k += 1
            if pid in retired_at and retired_at[pid] < epoch:
                skipped += 1
                continue
            expected.append(pid)
            epochs.append(epoch)
        for pid, epoch in zip(expected, epochs):  # a step's prompts are taken before its groups are scored
            if RATES[pid] >= pass_rate:
                retired_at.setdefault(pid, epoch)
        assert [g.problem.prompt_id for g in draw.groups] == expected, step
        assert draw.skipped == skipped and draw.exhausted is None
        assert draw.units == [[g] for g in draw.groups] and all(g.used for g in draw.groups)
    assert sampler.extra_state["retired"] == retired_at
    assert set(retired_at) == {pid for pid, rate in RATES.items() if rate >= pass_rate}
    assert json.loads(json.dumps(sampler.state_dict())) == sampler.state_dict()  # JSON-able, as a checkpoint keeps


def test_nothing_solved_is_sampler_fixed():
    rates = {f"p{i}": 0.5 for i in range(7)}
    cfg = TrainConfig().sampler
    cfg.group_size = 4
    ours, fixed = hand_sampler(1.0, rates), FixedSampler(cfg, PromptStream(pool_of(7), seed=5))
    for _ in range(12):
        a, b = ours.draw(rate_round(rates), 3), fixed.draw(rate_round(rates), 3)
        assert [g.problem.prompt_id for g in a.groups] == [g.problem.prompt_id for g in b.groups]
        assert a.skipped == 0
    assert ours.extra_state["retired"] == {} and ours.stream.cursor == fixed.stream.cursor == 36


def test_every_prompt_retired_stops_the_run_having_drawn_nothing():
    """Every prompt right every time: each is retired at its first visit and still served to the end of that epoch;
    once a whole epoch has nothing left the run stops, saying so, drawing nothing and leaving the cursor as it was."""
    rates = {f"p{i}": 1.0 for i in range(7)}
    sampler, solved = hand_sampler(0.9, rates), rate_round(rates)
    draw = sampler.draw(solved, 7)  # epoch 0: every prompt once, each retired
    assert sorted(g.problem.prompt_id for g in draw.groups) == sorted(rates) and draw.exhausted is None
    assert sampler.extra_state["retired"] == dict.fromkeys(rates, 0)
    draw = sampler.draw(solved, 7)
    assert draw.groups == [] and draw.units == [] and draw.skipped == 0 and sampler.stream.cursor == 7
    assert draw.exhausted == ("retire_solved sampler: every one of the training pool's 7 prompts has been retired (a "
                              "group's pass rate reached sampler.retire_solved.pass_rate=0.9); nothing is left to draw")
    sampler, steps = hand_sampler(0.9, rates), []  # 3 a step: the last prompt of epoch 0 comes back in epochs 1, 2
    while not (draw := sampler.draw(solved, 3)).exhausted:
        steps.append([g.problem.prompt_id for g in draw.groups])
        cursor = sampler.stream.cursor
    order = plain_order(pool_of(7), 5, 7)
    assert steps[:2] == [order[0:3], order[3:6]] and steps[2] == [order[6]] * 3 and len(steps) == 3
    assert draw.groups == [] and sampler.stream.cursor == cursor > 14  # as the third step left it, in epoch 2


def retire_cfg(tmp_path, steps=9, pass_rate=0.75) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / "retire"), max_steps=steps, prompts_per_step=4, checkpoint_every=2)
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = [1, 2, 4], 4, 0
    cfg.sampler.name, cfg.sampler.group_size = "retire_solved", 4
    cfg.sampler.retire_solved.pass_rate = pass_rate
    return cfg


def test_a_real_run_replays_from_its_own_tables(tmp_path):
    """9 steps of 4 over a pool of 12 (three epochs and more): each step's prompts and skips are the prompt stream
    replayed with the retirements its own earlier rows made (a row at or above the pass rate retires its prompt from
    the epoch after the one it was drawn in); every group trained."""
    cfg = retire_cfg(tmp_path)
    g, s = recount_budget(train(cfg))
    assert (s["samples"] == 16).all() and g["used"].all() and (g["n_trained"] == g["group_size"]).all()
    stream, n = PromptStream(build_task(cfg.task).train, cfg.seed), len(build_task(cfg.task).train)
    retired_at, skips = {}, 0
    for (step, rows), skipped in zip(g.groupby("step", sort=True), s["skipped_prompts"]):
        expected, epochs, passed = [], [], 0
        while len(expected) < 4:
            epoch = stream.cursor // n
            (p,) = stream.take(1)
            if retired_at.get(p.prompt_id, epoch) < epoch:
                passed += 1
            else:
                expected.append(p.prompt_id)
                epochs.append(epoch)
        assert rows["prompt_id"].tolist() == expected, step
        assert skipped == passed, step
        for row, epoch in zip(rows.itertuples(), epochs):
            if row.n_correct / row.group_size >= 0.75:
                retired_at.setdefault(row.prompt_id, epoch)
        skips += passed
    assert retired_at and skips > 0  # prompts were retired, and passed over in a later epoch


def test_resume_mid_run_restores_the_retired_prompts_exactly(tmp_path):
    full = train(retire_cfg(tmp_path / "full", steps=4))
    cfg = retire_cfg(tmp_path / "killed", steps=3)
    killed = train(cfg)  # "killed" after the checkpoint before its last step, with that step written
    (killed / "checkpoints" / "step-000003").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = 4
    train(cfg)  # resumes from step 2's checkpoint, with the prompts retired by then
    assert_same_rows(full, killed, ("groups", "steps"))
    assert read_steps(full)["skipped_prompts"].iloc[3] > 0  # epoch 1 (step 4) passed over epoch 0's retired


def read_steps(run):
    from grpo_lab.run.tables import read_table

    return read_table(run, "steps").to_pandas()


def test_budget_checks_know_its_draw(tmp_path):
    assert_draw_bounds(retire_cfg(tmp_path, steps=4), 16, 16)  # a retired prompt costs no samples


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5])
def test_each_bad_key_is_refused_in_one_line_naming_it(value):
    cfg = TrainConfig().sampler
    cfg.retire_solved.pass_rate = value
    with pytest.raises(ConfigError) as err:
        check_sampler(cfg)
    assert str(err.value) == (f"sampler.retire_solved.pass_rate={value!r} is invalid: must lie in (0, 1] (0 would "
                              "retire every prompt at its first visit)")
    assert "\n" not in str(err.value) and re.search(r"\bsampler\.retire_solved\.pass_rate\b", str(err.value))
