"""SPEED (sampler=speed): its screen test and choice of prompts on hand-built screens, a step's draw on scripted
answers (which prompts pass is known, so the groups, units and sample counts are too, at both ends of draw_bounds
and at the cap), the rule replayed from the groups table of a real tiny run with its budgets recounted, the cap
ending a real run, exact resume mid-run, the budget checks and each refused setting."""

import json
import logging
import re

import numpy as np
import pytest
from reference import assert_draw_bounds, assert_same_rows, plain_grpo, recount_budget

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.records import Group, Problem
from grpo_lab.samplers import PromptStream, draw_bounds
from grpo_lab.samplers.speed import SpeedSampler, passes_screen, to_continue
from grpo_lab.train.trainer import train

R, W = True, False  # one answer right, one wrong


def test_the_screen_passes_only_mixed_answers():
    assert passes_screen(np.array([R, W])) and passes_screen(np.array([W, W, W, R]))
    assert not passes_screen(np.array([R, R, R, R])) and not passes_screen(np.array([W, W]))


def test_a_round_continues_the_first_prompts_that_pass_as_many_as_the_batch_lacks():
    screens = [np.array(s) for s in ([R, R], [W, R], [W, W], [R, W], [W, R])]  # pass: 1, 3 and 4
    assert to_continue(screens, 5) == [1, 3, 4]
    assert to_continue(screens, 2) == [1, 3]  # 4 passed too, but the batch is full
    assert to_continue(screens, 0) == []
    assert to_continue([np.array([R, R, R]), np.array([W, W, W])], 4) == []  # all tied: nothing continues


def scripted(screens: list[list[bool]]):
    """A DrawRound whose k-th screened prompt gets the answers screens[k]; a continuation gets one right answer and
    the rest wrong. Returns it and the log of its calls: (prompt ids, round, size)."""
    answers, calls = iter(screens), []

    def draw_round(problems, rnd, size=None):
        calls.append(([p.prompt_id for p in problems], rnd, size))
        out = []
        for p in problems:
            correct = np.array(next(answers) if rnd == 0 else [R] + [W] * (size - 1))
            rewards = correct.astype(np.float32)
            out.append(Group(p, rnd, None, rewards, correct, bool(rewards.std() == 0)))
        return out

    return draw_round, calls


def hand_sampler(max_rounds=3) -> tuple[SpeedSampler, list[str]]:
    """group_size 4, screens of 2, 2 x 2 prompts screened a round, over a pool of 12; and the stream's order."""
    cfg = TrainConfig().sampler
    cfg.name, cfg.group_size = "speed", 4
    cfg.speed.screen_size, cfg.speed.screen_factor, cfg.speed.max_rounds = 2, 2, max_rounds
    pool = tuple(Problem(f"p{i}", f"q{i}", "1", "1") for i in range(12))
    order = [p.prompt_id for p in PromptStream(pool, 7).take(12)]
    return SpeedSampler(cfg, PromptStream(pool, 7)), order


def test_a_step_on_scripted_answers_continues_exactly_the_prompts_known_to_pass():
    sampler, order = hand_sampler()
    # round 1: only the second prompt passes; round 2: the first, second and fourth pass, one is still needed
    draw_round, calls = scripted([[R, R], [W, R], [W, W], [W, W], [R, W], [W, R], [R, R], [R, W]])
    draw = sampler.draw(draw_round, 2)
    assert calls == [(order[0:4], 0, 2), ([order[1]], 1, 2), (order[4:8], 0, 2), ([order[4]], 1, 2)]
    assert draw.exhausted is None and draw.skipped == 0
    assert [(g.problem.prompt_id, g.round) for g in draw.groups] == [
        *((p, 0) for p in order[0:4]), (order[1], 1), *((p, 0) for p in order[4:8]), (order[4], 1)]
    assert [[(g.problem.prompt_id, g.round, len(g.rewards)) for g in unit] for unit in draw.units] == [
        [(order[1], 0, 2), (order[1], 1, 2)], [(order[4], 0, 2), (order[4], 1, 2)]]  # screen + continuation: 4
    used = {(g.problem.prompt_id, g.round) for g in draw.groups if g.used}
    assert used == {(order[1], 0), (order[1], 1), (order[4], 0), (order[4], 1)}  # order[5], order[7]: not needed
    assert sum(len(g.rewards) for g in draw.groups) == 2 * 4 * 2 + 2 * 2  # every screen counts
    assert sampler.stream.cursor == 8


def test_a_step_draws_the_fewest_and_the_most_that_draw_bounds_gives():
    sampler, _ = hand_sampler()
    fewest, most = draw_bounds(sampler.cfg, 2)
    assert (fewest, most) == (4 * 2 + 2 * 2, 3 * 4 * 2 + 2 * 2)
    draw_round, _ = scripted([[R, W]] * 4)  # the first round fills the batch
    assert sum(len(g.rewards) for g in sampler.draw(draw_round, 2).groups) == fewest
    sampler, _ = hand_sampler()
    draw_round, _ = scripted([[W, W]] * 8 + [[R, W]] * 4)  # the last round allowed fills it
    draw = sampler.draw(draw_round, 2)
    assert draw.exhausted is None and sum(len(g.rewards) for g in draw.groups) == most


def test_the_cap_returns_every_group_drawn_and_trains_none():
    sampler, _ = hand_sampler(max_rounds=2)
    draw_round, calls = scripted([[W, W], [R, W], [R, R], [W, W], [W, W], [R, R], [W, W], [R, R]])
    draw = sampler.draw(draw_round, 2)
    assert draw.exhausted == ("speed sampler: 2 screening rounds (sampler.speed.max_rounds) found only 1 of 2 "
                              "prompts whose 2 screening answers were neither all right nor all wrong; the prompts "
                              "are too easy or too hard for this model")
    assert [rnd for _, rnd, _ in calls] == [0, 1, 0] and len(draw.groups) == 4 + 1 + 4  # all drawn, returned
    assert draw.units == [] and not any(g.used for g in draw.groups)


def speed_cfg(tmp_path, levels=(1, 2, 4), steps=4, **own) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / "speed"), max_steps=steps, prompts_per_step=4, checkpoint_every=2)
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = list(levels), 4, 0
    s = cfg.sampler
    s.name, s.group_size = "speed", 4
    s.speed.screen_size, s.speed.screen_factor, s.speed.max_rounds = 2, 2, 6
    for k, v in own.items():
        setattr(s.speed, k, v)
    return cfg


def test_a_real_run_follows_the_rule_replayed_from_its_groups_table(tmp_path):
    g, s = recount_budget(train(speed_cfg(tmp_path)))
    screened_out = 0
    for step, rows in g.groupby("step", sort=True):
        rows = rows.reset_index(drop=True)
        # replay: rounds of 8 screens (round 0), each followed by the continuations (round 1) of the first
        # screens that passed, as many as the batch still lacked, until 4 prompts are complete
        at, units, rounds = 0, [], 0
        while len(units) < 4:
            screens = rows.iloc[at:at + 8]
            assert (screens["round"] == 0).all() and (screens["group_size"] == 2).all()
            chosen = to_continue([np.array(c) for c in screens["correct"]], 4 - len(units))
            rest = rows.iloc[at + 8:at + 8 + len(chosen)]
            assert (rest["round"] == 1).all() and (rest["group_size"] == 2).all()
            assert rest["prompt_id"].tolist() == screens["prompt_id"].iloc[chosen].tolist()
            units += [(screens.index[i], j) for i, j in zip(chosen, rest.index)]
            continued = set(screens.index[chosen])
            for i, row in screens.iterrows():  # a screen that tied got no continuation and did not train
                tied = row["n_correct"] in (0, 2)
                assert row["tie"] == tied and row["used"] == (i in continued)
                assert (i in continued) <= (not tied) and (pd_null(row["unit"]) == (i not in continued))
                screened_out += tied
            at, rounds = at + 8 + len(chosen), rounds + 1
        assert at == len(rows)  # the step stopped at the round that filled its batch
        # each trained unit is one prompt's screen and continuation: exactly group_size samples, one baseline
        for i, j in units:
            screen, rest = rows.loc[i], rows.loc[j]
            assert screen["unit"] == rest["unit"] and screen["prompt_id"] == rest["prompt_id"]
            assert screen["n_trained"] + rest["n_trained"] == 4 and rest["used"]
            got = np.concatenate([screen["advantages"], rest["advantages"]])
            np.testing.assert_allclose(got, plain_grpo([*screen["rewards"], *rest["rewards"]]), rtol=1e-5, atol=1e-6)
        assert rows["unit"].nunique() == 4
        # the step's samples include every screen: 2 a screened prompt, and 2 more a trained one
        assert s.loc[s["step"] == step, "samples"].item() == 2 * 8 * rounds + 2 * 4
    assert screened_out > 0  # level 1 and level 4 prompts tie: the screen did drop some


def pd_null(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def test_the_cap_stops_a_real_run_with_its_message_and_whole_tables(tmp_path, caplog):
    cfg = speed_cfg(tmp_path, levels=(4,), steps=3, max_rounds=1)  # the base model is almost never right at level 4
    cfg.task.train_per_level = 8
    run = train(cfg)
    message = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING][-1]
    assert re.fullmatch(r"speed sampler: 1 screening rounds \(sampler\.speed\.max_rounds\) found only [0-3] of 4 "
                        r"prompts whose 2 screening answers .*\. Stopped at step 1; the tables so far are whole\.",
                        message), message
    assert json.loads((run / "run.json").read_text())["stopped"] == message
    g, _ = recount_budget(run)
    assert (g["step"] == 1).all() and (g["round"] == 0).sum() == 8 and not g["used"].any()


def test_resume_mid_run_restores_the_sampler_exactly(tmp_path):
    full = train(speed_cfg(tmp_path / "full"))
    cfg = speed_cfg(tmp_path / "killed", steps=3)
    killed = train(cfg)  # "killed" after the checkpoint before its last step, with that step written
    (killed / "checkpoints" / "step-000003").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = 4
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))


@pytest.mark.parametrize("max_rounds", [1, 6])
def test_budget_checks_know_the_draw(tmp_path, max_rounds):
    cfg = speed_cfg(tmp_path, max_rounds=max_rounds)
    least, most = 8 * 2 + 4 * 2, max_rounds * 8 * 2 + 4 * 2
    assert_draw_bounds(cfg, least, most)


@pytest.mark.parametrize("key,value,message", [
    ("screen_size", 1, "sampler.speed.screen_size=1 is invalid: must be >= 2 (the screen's test, a std of its "
                       "accuracies above 0, needs two answers)"),
    ("screen_size", 4, "sampler.speed.screen_size=4 is invalid: must be < sampler.group_size=4 (the continuation "
                       "draws group_size - screen_size more; screen and continuation train as one group of "
                       "group_size)"),
    ("screen_factor", 0, "sampler.speed.screen_factor=0 is invalid: must be >= 1"),
    ("max_rounds", 0, "sampler.speed.max_rounds=0 is invalid: must be >= 1"),
])
def test_bad_settings_are_one_line_naming_the_key(tmp_path, key, value, message):
    cfg = speed_cfg(tmp_path, **{key: value})
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        validate(cfg)
    assert "\n" not in str(err.value)
