"""Tiny real runs: the run directory, the group table's contract, exact resume."""

import json
import math

import pandas as pd
import pytest
from reference import assert_same_rows

from grpo_lab.run.tables import GROUPS, STEPS, read_table
from grpo_lab.train.trainer import train


def test_run_directory_and_tables(tiny_cfg):
    run = train(tiny_cfg)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "done" and meta["run_id"] and meta["device"] == "cpu"

    groups = read_table(run, "groups")
    assert groups.schema == GROUPS
    assert groups.num_rows == tiny_cfg.max_steps * tiny_cfg.prompts_per_step
    assert read_table(run, "steps").schema == STEPS and read_table(run, "steps").num_rows == tiny_cfg.max_steps
    ev = read_table(run, "eval").to_pandas()
    assert set(ev["step"]) == {0, tiny_cfg.max_steps}
    assert len(ev) == 2 * 3 * tiny_cfg.task.eval_per_level * tiny_cfg.eval.n

    g = groups.to_pandas()
    for row in g.itertuples():
        assert len(row.rewards) == len(row.correct) == row.group_size == 4
        assert row.n_correct == sum(row.correct)
        assert row.reward_mean == pytest.approx(sum(row.rewards) / 4)
        assert row.tie == (row.reward_std <= 1e-8)
        if row.tie:
            assert row.tie_kind == ("all_correct" if row.n_correct == 4 else "all_wrong")
        else:
            assert pd.isna(row.tie_kind)
    assert g["samples_total"].tolist() == [4 * (i + 1) for i in range(len(g))]
    assert g["tokens_total"].tolist() == g["tokens"].cumsum().tolist()
    steps = read_table(run, "steps").to_pandas()
    assert all(math.isfinite(x) for x in steps["loss"])
    assert steps["samples_total"].iloc[-1] == g["samples_total"].iloc[-1]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002", "step-000004"]


def test_resume_reproduces_an_uninterrupted_run(tiny_cfg, tmp_path):
    full = train(tiny_cfg)

    tiny_cfg.out_dir = str(tmp_path / "killed")
    tiny_cfg.max_steps = 3  # "killed" after the step-2 checkpoint, with step 3 already written
    killed = train(tiny_cfg)
    assert (killed / "groups" / "part-000003.parquet").exists()
    (killed / "checkpoints" / "step-000003").rename(killed / "checkpoints" / ".gone")  # as if killed before it
    tiny_cfg.max_steps = 4
    train(tiny_cfg)

    assert_same_rows(full, killed, ("groups", "eval", "steps"))  # the counters too: updates, flops_total
    steps = read_table(killed, "steps").to_pandas()
    assert steps["updates"].tolist() == [1, 2, 3, 4] and steps["flops_total"].iloc[-1] == pytest.approx(
        steps["flops"].sum(), rel=1e-12)


def test_difficulty_can_be_the_base_models_pass_rate_bin(tiny_cfg):
    tiny_cfg.task.difficulty = "pass_rate"
    tiny_cfg.task.difficulty_samples = 8
    tiny_cfg.max_steps = 2
    run = train(tiny_cfg)
    g = read_table(run, "groups").to_pandas()
    ev = read_table(run, "eval").to_pandas()
    assert set(g["difficulty"]) | set(ev["difficulty"]) <= {"p0.0-0.2", "p0.2-0.4", "p0.4-0.6", "p0.6-0.8", "p0.8-1.0"}
    level = g["prompt_id"].str.extract(r"add-L(\d)")[0]
    assert (g["difficulty"][level == "1"] == "p0.8-1.0").mean() > 0.7  # the easiest level is measured easy
    assert (g["difficulty"][level == "4"] == "p0.0-0.2").mean() > 0.7  # the hardest, hard
