"""algo.tied_batch: a batch whose every advantage is 0 takes its mu optimizer steps (step, the default: the KL
term's gradient, AdamW's moments) or none (skip); the steps table's cost columns (opt_steps, updates, prompt and
generated tokens, token passes, FLOPs, CPU seconds) recounted by hand; the counters across resume; evaluation on an
update schedule; a run started before the key resumes as it ran."""

import copy
import json
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from reference import assert_same_rows

from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.rewards.rules import RewardWeights
from grpo_lab.run.guards import config_diff, flat_config
from grpo_lab.run.record import RunRecord
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import Trainer, train


def trainer_for(cfg) -> Trainer:
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    return Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))


def weights(trainer) -> dict:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def adam_state(trainer) -> dict:
    return {k: {n: t.clone() for n, t in v.items()} for k, v in trainer.optimizer.state_dict()["state"].items()}


def same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].keys() == b[k].keys() and all(torch.equal(a[k][n], b[k][n]) for n in a[k])
                                        for k in a)


@pytest.mark.parametrize("tied_batch", ["step", "skip"])
def test_an_all_tied_batch_steps_on_the_kl_by_default_and_changes_nothing_under_skip(tiny_cfg, tied_batch):
    """A first step moves the policy off the reference; then every reward is 0, so every group ties and every
    advantage is 0. Under step the beta x k3 KL's gradient (and Adam's moments) still take mu optimizer steps; under
    skip the weights and AdamW's state stay bit for bit, and no group is recorded as trained."""
    tiny_cfg.algo.mu, tiny_cfg.algo.tied_batch, tiny_cfg.eval.n = 2, tied_batch, 0
    trainer = trainer_for(tiny_cfg)
    first = trainer.step()
    assert first["informative"] > 0 and first["opt_steps"] == 2  # moved off the reference
    before, moments = weights(trainer), adam_state(trainer)
    trainer.weights = RewardWeights(0.0, 0.0)  # every reward 0 from here: every group ties
    row = trainer.step()
    assert row["tie_frac"] == 1.0 and row["informative"] == 0
    groups = read_table(Path(tiny_cfg.out_dir), "groups").to_pandas().query("step == 2")
    if tied_batch == "step":
        assert row["opt_steps"] == 2 and row["updates"] == 4
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0 and row["kl"] > 0  # the KL's gradient
        assert any(not torch.equal(v, before[k]) for k, v in weights(trainer).items())
        assert not same_state(adam_state(trainer), moments)
        assert all(int(s["step"]) == 4 for s in adam_state(trainer).values())  # two more Adam steps
        assert groups["used"].all() and (groups["n_trained"] == groups["group_size"]).all()
        assert groups["unit"].notna().all() and all((np.asarray(a) == 0).all() for a in groups["advantages"])
        assert row["trained"] == groups["group_size"].sum()
    else:
        assert row["opt_steps"] == 0 and row["updates"] == 2 and math.isnan(row["grad_norm"])
        for k, v in weights(trainer).items():
            assert torch.equal(v, before[k]), k
        assert same_state(adam_state(trainer), moments)
        assert not groups["used"].any() and (groups["n_trained"] == 0).all() and groups["unit"].isna().all()
        assert all(np.isnan(a).all() for a in groups["advantages"]) and row["trained"] == 0


def test_a_zero_gradient_still_takes_adams_step_with_beta_0(tiny_cfg):
    """beta = 0 and every group tied: the gradient is exactly 0 (grad_norm 0, not NaN), and AdamW still steps: its
    moments from the first, informative step move the weights, as TRL and verl do."""
    tiny_cfg.algo.beta, tiny_cfg.eval.n = 0.0, 0
    trainer = trainer_for(tiny_cfg)
    assert trainer.step()["informative"] > 0
    before = weights(trainer)
    trainer.weights = RewardWeights(0.0, 0.0)
    row = trainer.step()
    assert row["informative"] == 0 and row["opt_steps"] == 1 and row["grad_norm"] == 0.0
    assert any(not torch.equal(v, before[k]) for k, v in weights(trainer).items())


def short_run(tmp_path, tied_batch: str, name: str | None = None, **eval_keys):
    from grpo_lab.config import TrainConfig

    cfg = TrainConfig(out_dir=str(tmp_path / (name or tied_batch)), max_steps=8, prompts_per_step=1,
                      checkpoint_every=4)
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = [3], 8, 0  # groups of 2: some tie, some do not
    cfg.sampler.group_size, cfg.algo.mu, cfg.algo.tied_batch = 2, 2, tied_batch
    for key, value in eval_keys.items():
        setattr(cfg.eval, key, value)
    return cfg


def test_updates_count_every_optimizer_step_taken(tmp_path):
    """A run whose batches sometimes all tie: updates = steps x mu by default, fewer under skip (mu for each step
    with an informative sample); updates is the running sum of opt_steps."""
    counted = {}
    for tied_batch in ("step", "skip"):
        run = train(short_run(tmp_path, tied_batch))
        steps = read_table(run, "steps").to_pandas()
        assert steps["updates"].tolist() == steps["opt_steps"].cumsum().tolist()
        assert steps["flops_total"].tolist() == pytest.approx(steps["flops"].cumsum().tolist(), rel=1e-12)
        assert steps["gen_tokens"].sum() == steps["tokens_total"].iloc[-1]
        assert (steps["cpu_s"] > 0).all()
        counted[tied_batch] = steps
    step, skip = counted["step"], counted["skip"]
    assert (step["opt_steps"] == 2).all() and step["updates"].iloc[-1] == 16
    assert (skip["tie_frac"] == 1.0).any() and (skip["tie_frac"] < 1.0).any()
    assert skip["opt_steps"].tolist() == [2 * (n > 0) for n in skip["informative"]]
    assert skip["updates"].iloc[-1] < 16
    assert skip["grad_norm"].isna().tolist() == (skip["opt_steps"] == 0).tolist()


def test_flops_and_token_passes_recount_by_hand(tiny_cfg):
    """One step's cost columns against a plain recount: prompt lengths from the task's tokenizer, tokens from the
    groups table, N from the model's parameters (the built-in model ties its embedding to the output layer: all
    count), 2N a sampled position, 6N a trained one per optimizer step, 2N for the reference's forward."""
    tiny_cfg.algo.mu, tiny_cfg.eval.n, tiny_cfg.max_steps = 2, 0, 2
    trainer = trainer_for(tiny_cfg)
    rows = [trainer.step() for _ in range(2)]
    model = trainer.model
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied: nothing left out
    n = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert trainer.flop_params == n and trainer.record.data["flop_params"] == n
    prompts = {p.prompt_id: p.prompt for p in trainer.task.train}
    groups = read_table(Path(tiny_cfg.out_dir), "groups").to_pandas()
    for row in rows:
        g = groups[groups["step"] == row["step"]]
        tokenize = trainer.tokenizer
        lengths = [len(tokenize(prompts[pid], add_special_tokens=False)["input_ids"]) for pid in g["prompt_id"]]
        prompt_tokens, gen_tokens = sum(lengths), int(g["tokens"].sum())
        trained = g["n_trained"] > 0  # fixed groups: a group trains whole, its prompt prefilled once a pass
        positions = sum(length for length, t in zip(lengths, trained) if t) + int(g.loc[trained, "tokens"].sum())
        assert row["prompt_tokens"] == prompt_tokens and row["gen_tokens"] == gen_tokens
        assert row["opt_steps"] == 2
        assert row["token_passes"] == positions * (2 + 1)  # two policy passes, one reference pass
        assert row["flops"] == pytest.approx(2 * n * (prompt_tokens + gen_tokens) + 6 * n * positions * 2
                                             + 2 * n * positions, rel=1e-12)


def test_the_counters_survive_resume_and_an_old_checkpoint_recounts_updates(tmp_path):
    """updates and flops_total are restored from the checkpoint exactly (tests/test_trainer.py compares whole
    tables); a checkpoint written before them recounts updates from the steps table (opt_steps, or in parts written
    before it a finite grad_norm: mu updates) and leaves flops_total NaN: the tables cannot recount it."""
    cfg = short_run(tmp_path, "skip", "full")
    cfg.max_steps, cfg.checkpoint_every = 4, 2
    full = train(copy.deepcopy(cfg))
    cfg.out_dir, cfg.max_steps = str(tmp_path / "old"), 2
    old = train(copy.deepcopy(cfg))
    first = read_table(old, "steps").to_pandas()
    assert first["opt_steps"].tolist() == [2, 0]  # the second step tied: skipped
    ckpt = old / "checkpoints" / "step-000002"
    state = torch.load(ckpt / "state.pt", weights_only=True)
    assert state["counters"]["updates"] == 2
    assert json.loads((ckpt / "counters.json").read_text())["flops_total"] == first["flops"].sum()
    for key in ("updates", "flops_total"):  # as a checkpoint written before they were counted
        del state["counters"][key]
    torch.save(state, ckpt / "state.pt")
    kept = {k: state["counters"][k] for k in ("samples_total", "tokens_total")}
    (ckpt / "counters.json").write_text(json.dumps(kept))
    for step in (1, 2):  # and steps parts written before opt_steps
        part = old / "steps" / f"part-{step:06d}.parquet"
        pq.write_table(pq.read_table(part).drop_columns(["opt_steps", "updates"]), part)
    cfg.max_steps = 4
    train(cfg)
    a, b = (read_table(r, "steps").to_pandas() for r in (full, old))
    assert b["updates"][2:].tolist() == a["updates"][2:].tolist()  # recounted: 2 + 0, then as uninterrupted
    assert b["flops"].tolist() == a["flops"].tolist() and np.isnan(b["flops_total"][2:]).all()
    ev = read_table(old, "eval").to_pandas()
    assert ev.empty or ev.query("step == 4")["flops_total"].isna().all()  # not known: null


def test_eval_every_updates_evaluates_where_updates_cross_its_multiples(tmp_path):
    """eval.every_updates=3 with mu=2 (every step steps): updates 2, 4, 6, ... cross 3, 6, 9, 12 at steps 2, 3, 5,
    6; the base model and the last step as always."""
    cfg = short_run(tmp_path, "step", "every", every_updates=3)
    cfg.eval.n, cfg.task.eval_per_level = 2, 2
    run = train(cfg)
    ev = read_table(run, "eval").to_pandas()
    assert sorted(set(ev["step"])) == [0, 2, 3, 5, 6, 8]
    steps = read_table(run, "steps").to_pandas().set_index("step")
    for step, rows in ev.groupby("step"):
        assert set(rows["updates"]) == {0 if step == 0 else steps.loc[step, "updates"]}
        assert set(rows["flops_total"]) == {0.0 if step == 0 else steps.loc[step, "flops_total"]}


def test_an_evaluation_of_an_unchanged_model_is_the_earlier_ones_rows_and_resumes_exactly(tmp_path, caplog):
    """Issue 56: a scheduled evaluation after a step that took no update measured the unchanged model again (~70 s a
    job). Under skip, evaluated every step: after a step of no optimizer step the rows are the last evaluation's
    (the same weights), with this step's counters, said in one line and in evaluations.jsonl (same_as); the other
    steps sample. Killed in such an evaluation, the same command resumes to identical tables."""
    from grpo_lab.run.evaluations import read_evaluations

    cfg = short_run(tmp_path, "skip", "full", every=1)
    cfg.eval.n, cfg.task.eval_per_level, cfg.checkpoint_every = 2, 2, 1
    with caplog.at_level(logging.INFO, logger="grpo_lab.train.held_out"):
        full = train(copy.deepcopy(cfg))
    steps = read_table(full, "steps").to_pandas().set_index("step")
    skipped = [s for s in steps.index if steps.loc[s, "opt_steps"] == 0]
    assert skipped and len(skipped) < len(steps)
    ev = read_table(full, "eval").to_pandas()
    drawn = ["prompt_id", "difficulty", "sample", "answer", "answered", "correct", "tokens", "n", "temperature"]
    for step in steps.index:
        rows = ev[ev["step"] == step].reset_index(drop=True)
        for key in ("samples_total", "tokens_total", "updates", "flops_total"):
            assert set(rows[key]) == {steps.loc[step, key]}, (step, key)
        assert rows["completion"].isna().all() and len(rows) == 4
        if step in skipped:
            pd.testing.assert_frame_equal(rows[drawn], ev[ev["step"] == step - 1].reset_index(drop=True)[drawn])
    said = [r.getMessage() for r in caplog.records if "no optimizer step since the evaluation" in r.getMessage()]
    assert said == [f"eval at step {s}: no optimizer step since the evaluation at step {s - 1} "
                    f"({steps.loc[s, 'updates']} updates), so the model is the one measured there: its rows recorded "
                    "again, not sampled" for s in skipped]
    assert {r["step"]: r.get("same_as") for r in read_evaluations(full)} == {
        s: s - 1 if s in skipped else None for s in range(9)}

    first = skipped[0]  # killed in the evaluation after it: its checkpoint saved, its rows not yet
    cfg.out_dir, cfg.max_steps = str(tmp_path / "killed"), first
    killed = train(copy.deepcopy(cfg))
    (killed / "eval" / f"part-{first:06d}.parquet").unlink()
    cfg.max_steps = 8
    train(cfg)
    assert_same_rows(full, killed, tables=("groups", "steps", "eval"))


def test_a_run_started_before_the_key_resumes_as_it_ran(tmp_path):
    """A config.json without algo.tied_batch is a run that skipped tied batches: the same command (whose default is
    step) resumes it, as skip, to the rows an uninterrupted skip run writes, and its config.json then says so."""
    full = train(short_run(tmp_path, "skip", "full"))
    cfg = short_run(tmp_path, "skip", "old")
    cfg.max_steps = 4
    old = train(cfg)
    saved = json.loads((old / "config.json").read_text())
    del saved["algo.tied_batch"]
    (old / "config.json").write_text(json.dumps(saved))
    assert config_diff(saved, flat_config(short_run(tmp_path, "step", "old"))) == []  # not a change: it resumes
    cfg = short_run(tmp_path, "step", "old")  # the default now
    cfg.max_steps = 6  # the first resume: steps 5-6
    train(cfg)
    written = json.loads((old / "config.json").read_text())
    assert written["algo.tied_batch"] == "skip" and written["_as_it_ran"] == ["algo.tied_batch"]
    # the same command again (the budget raised) resumes too, still as skip: the run keeps the value it ran with
    assert config_diff(written, flat_config(cfg)) == []
    train(short_run(tmp_path, "step", "old"))
    assert_same_rows(full, old, ("groups", "steps"))


def test_the_config_check_refuses_another_value_in_one_line(tiny_cfg):
    tiny_cfg.algo.tied_batch = "maybe"
    with pytest.raises(ConfigError, match=r"^algo\.tied_batch='maybe' is invalid: must be one of 'step', 'skip'"):
        validate(tiny_cfg)
    tiny_cfg.algo.tied_batch = "skip"
    tiny_cfg.eval.every_updates = -1
    with pytest.raises(ConfigError, match=r"^eval\.every_updates=-1 is invalid"):
        validate(tiny_cfg)
