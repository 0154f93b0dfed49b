"""Samplers on real tiny runs: every drawn sample is in the table, caps end runs cleanly."""

import json
import logging
import re

import pytest

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import draw_per_step
from grpo_lab.run.checkpoints import read_state
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import train


def hard_cfg(tmp_path, sampler: str, **sampler_kw) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / sampler), max_steps=3, prompts_per_step=4, checkpoint_every=100)
    cfg.task.levels = [4]  # the hardest level: the base model is almost never right
    cfg.task.train_per_level = 8
    cfg.sampler.name = sampler
    cfg.sampler.group_size = 4
    for k, v in sampler_kw.items():  # the sampler's own keys (sampler.<name>.<key>)
        setattr(getattr(cfg.sampler, sampler), k, v)
    cfg.eval.n = 0
    return cfg


@pytest.mark.parametrize("sampler", ["dynamic", "greso"])
def test_dynamic_stops_at_its_cap_with_a_clear_message_and_whole_tables(tmp_path, caplog, sampler):
    cfg = hard_cfg(tmp_path, sampler, max_rounds=2)
    key = f"sampler.{sampler}.max_rounds"
    if sampler == "greso":
        cfg.sampler.greso.min_keep = 1.0  # never skip: its rounds then draw as dynamic's do
    cfg.eval.n = 2
    assert draw_per_step(cfg) == (4 * 4, 2 * 4 * 4)
    run = train(cfg)
    message = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING][-1]  # logged, one line
    assert re.fullmatch(rf"{sampler} sampler: 2 generation rounds \({key}\) found only \d of 4 "
                        r"untied groups.*\. Stopped at step 1; the tables so far are whole\.", message), message
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "done" and meta["stopped"] == message
    assert (run / "checkpoints" / "step-000001").exists()
    assert set(read_table(run, "eval").to_pandas()["step"]) == {0, 1}
    g = read_table(run, "groups").to_pandas()
    assert len(g) == 2 * 4 and not g["used"][g["tie"]].any()  # both rounds drawn (the cap), counted, dropped
    assert g["samples_total"].iloc[-1] == 4 * len(g)
    steps = read_table(run, "steps").to_pandas()
    assert steps["samples_total"].iloc[-1] == g["samples_total"].iloc[-1]


@pytest.mark.parametrize("pool", ["all", "last"])
def test_resample_on_tie_records_extra_rounds(tmp_path, pool):
    cfg = hard_cfg(tmp_path, "resample_on_tie", max_rounds=3, pool=pool)
    g = read_table(train(cfg), "groups").to_pandas()
    extra = g[g["round"] > 0]
    assert len(extra) > 0 and extra["round"].max() <= 2
    for _, rounds in g.groupby(["step", "prompt_id"]):
        assert rounds["round"].tolist() == list(range(len(rounds)))  # 0, 1, ... in order
        assert rounds["tie"].iloc[:-1].all()  # a prompt is redrawn only after a tie
        if pool == "all":
            assert rounds["used"].all()
        else:
            assert rounds["used"].tolist() == [False] * (len(rounds) - 1) + [True]
    assert g["samples_total"].tolist() == g["group_size"].cumsum().tolist()


def test_band_skips_prompts_outside_the_band(tmp_path):
    cfg = hard_cfg(tmp_path, "band", lo=0.1, hi=0.9)
    cfg.task.levels = [1, 2, 4]  # level 2 keeps prompts inside the band
    cfg.max_steps = 12  # two passes over the 24-prompt pool
    g = read_table(train(cfg), "groups").to_pandas()
    first = g.drop_duplicates("prompt_id")
    outside = set(first["prompt_id"][(first["n_correct"] / 4 < 0.1) | (first["n_correct"] / 4 > 0.9)])
    assert outside  # easy and hard prompts exist...
    later = g[g.duplicated("prompt_id")]
    assert not set(later["prompt_id"]) & outside  # ...and once measured outside the band are never drawn again


def test_band_explore_redraws_prompts_outside_the_band_and_counts_every_skip(tmp_path):
    cfg = hard_cfg(tmp_path, "band", lo=0.1, hi=0.9, explore=0.5)
    cfg.task.levels = [1, 4]  # nearly every group ties: without exploring, the pool would run dry
    cfg.max_steps = 18  # three passes over the 24-prompt pool
    run = train(cfg)
    g, s = read_table(run, "groups").to_pandas(), read_table(run, "steps").to_pandas()
    rate = {}  # each prompt's last pass rate, replayed in draw order
    redrawn_outside = 0
    for pid, correct in zip(g["prompt_id"], g["n_correct"] / 4):
        redrawn_outside += pid in rate and not 0.1 <= rate[pid] <= 0.9
        rate[pid] = correct
    share = redrawn_outside / (redrawn_outside + s["skipped_prompts"].sum())  # of the outside prompts met
    assert 0.3 < share < 0.7  # about `explore` of them were drawn again (about 55 of 110 here)
    assert len(s) == 18 and json.loads((run / "run.json").read_text()).get("stopped") is None
    state = read_state(run / "checkpoints" / "step-000018")["counters"]["sampler"]
    assert state["cursor"] == len(g) + s["skipped_prompts"].sum()  # every prompt taken was drawn or skipped
