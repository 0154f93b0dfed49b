"""Checkpoints that survive: saved before the evaluation, pruned to keep_last, pinned, weights-only."""

import pytest
from reference import assert_same_rows

from grpo_lab.jobs.evaluate import evaluate_checkpoints
from grpo_lab.run.checkpoints import checkpoint_steps
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import train


def contents(run) -> dict[int, bool]:
    """step -> whether its checkpoint is full (resumable), for every checkpoint folder."""
    return {s: (run / "checkpoints" / f"step-{s:06d}" / "state.pt").exists()
            for s in checkpoint_steps(run, resumable=False)}


def test_keep_last_prunes_keeps_pins_and_the_weights_of_evaluated_steps(tiny_cfg):
    tiny_cfg.max_steps, tiny_cfg.checkpoint_every, tiny_cfg.eval.every = 6, 1, 2
    tiny_cfg.checkpoint.keep_last, tiny_cfg.checkpoint.keep_steps = 1, [3]
    run = train(tiny_cfg)
    # 6: the latest, full; 3: pinned, full; 2 and 4: evaluated, weights only; 1 and 5: gone
    assert contents(run) == {2: False, 3: True, 4: False, 6: True}
    steps = read_table(run, "steps").to_pandas().set_index("step")
    assert evaluate_checkpoints(tiny_cfg, run, n=2, temperature=1.0, steps=[0, 2]) == [0, 2]  # weights-only evaluates
    ev = read_table(run, "eval").to_pandas().query("n == 2")
    for key in ("samples_total", "tokens_total", "updates", "flops_total"):  # the checkpoint's counters.json
        assert set(ev.query("step == 2")[key]) == {steps.loc[2, key]}, key
        assert set(ev.query("step == 0")[key]) == {0}, key


def test_final_weights_only_and_a_run_that_cannot_resume_says_so(tiny_cfg):
    tiny_cfg.max_steps = 2
    tiny_cfg.checkpoint.keep_last, tiny_cfg.checkpoint.final_weights_only = 1, True
    run = train(tiny_cfg)
    assert contents(run) == {2: False}
    with pytest.raises(RuntimeError, match="^out_dir: .* keep weights only"):
        train(tiny_cfg)


def test_an_evaluation_lost_after_its_checkpoint_is_redone_on_resume(tiny_cfg, tmp_path):
    full = train(tiny_cfg)
    tiny_cfg.out_dir = str(tmp_path / "killed")
    killed = train(tiny_cfg)
    (killed / "eval" / f"part-{tiny_cfg.max_steps:06d}.parquet").unlink()  # as if killed in the final evaluation
    train(tiny_cfg)
    a = read_table(full, "eval").drop_columns(["run_id"]).to_pylist()
    b = read_table(killed, "eval").drop_columns(["run_id"]).to_pylist()
    assert len(a) > 0 and a == b
    assert {r["step"] for r in b} == {0, tiny_cfg.max_steps}


def test_resume_stays_exact_with_pruning_and_capped_generation(tiny_cfg, tmp_path):
    tiny_cfg.checkpoint_every, tiny_cfg.checkpoint.keep_last = 1, 2
    tiny_cfg.rollout.max_rows_per_call = 10  # groups of 4 split across generation calls
    full = train(tiny_cfg)
    tiny_cfg.out_dir, tiny_cfg.max_steps = str(tmp_path / "killed"), 3
    killed = train(tiny_cfg)
    assert contents(killed) == {2: True, 3: True}
    (killed / "checkpoints" / "step-000003").rename(killed / "checkpoints" / ".gone")  # as if killed before it
    tiny_cfg.max_steps = 4
    train(tiny_cfg)
    assert_same_rows(full, killed)


def test_a_checkpoint_of_the_other_strategy_is_refused_in_one_line(tmp_path):
    """A ddp checkpoint holds the whole optimizer in state.pt, an fsdp one its shards in optim/: neither resumes
    as the other."""
    import torch

    from grpo_lab.run.checkpoints import StrategyChanged, check_world_size

    for saved, now in (("fsdp", "ddp"), ("ddp", "fsdp")):
        torch.save({"world_size": 2, "strategy": saved}, tmp_path / "state.pt")
        check_world_size(tmp_path, 2, saved)
        with pytest.raises(StrategyChanged, match=f"^resume: .* saved under dist.strategy={saved}, this run shards as "
                                                  f"dist.strategy={now}; resume with dist.strategy={saved}$"):
            check_world_size(tmp_path, 2, now)
    torch.save({"world_size": 2}, tmp_path / "state.pt")  # written before the key: ddp
    with pytest.raises(StrategyChanged):
        check_world_size(tmp_path, 2, "fsdp")
