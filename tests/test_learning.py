"""The built-in model is partly competent across levels, and GRPO really teaches it."""

import pandas as pd

from grpo_lab.config import TrainConfig
from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.rollout.evaluation import accuracy_by_difficulty, evaluate
from grpo_lab.run.tables import read_table
from grpo_lab.tasks import ArithmeticTask
from grpo_lab.train.trainer import train


def test_base_model_spans_the_levels():
    model, tok = load_policy("tiny", None, device="cpu", dtype="float32")
    task = ArithmeticTask.build(eval_per_level=16)
    rows = evaluate(model, tok, task.held_out, n=16, temperature=1.0, max_new_tokens=6, end_ids=eos_ids(model, tok),
                    answer_kind="integer", seed=0, run_id="base", step=0)
    acc = accuracy_by_difficulty(rows)
    levels = sorted(acc)
    assert acc[levels[0]] >= 0.8, acc  # easiest: mostly all-correct groups
    assert acc[levels[-1]] <= 0.15, acc  # hardest: mostly all-wrong groups
    assert 0.2 <= acc[levels[1]] <= 0.8, acc  # a middle level: mixed groups


def test_grpo_raises_held_out_accuracy_on_a_middle_level(tmp_path):
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), max_steps=200, prompts_per_step=16, checkpoint_every=1000, seed=0)
    cfg.task.levels = [2]
    cfg.task.train_per_level = 64
    cfg.task.eval_per_level = 25
    cfg.eval.n = 16
    run = train(cfg)
    ev = read_table(run, "eval").to_pandas()
    acc = ev.groupby("step")["correct"].mean()
    assert acc.loc[200] >= acc.loc[0] + 0.1, acc.to_dict()


def test_group_table_ties_follow_difficulty(tmp_path):
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), max_steps=6, prompts_per_step=16, checkpoint_every=1000)
    cfg.task.levels = [1, 2, 4]
    cfg.task.train_per_level = 16
    cfg.eval.n = 0
    g = read_table(train(cfg), "groups").to_pandas()
    kinds = pd.crosstab(g["difficulty"], g["tie_kind"].fillna("mixed"), normalize="index")
    assert kinds.loc["1", "all_correct"] > 0.5, kinds  # easiest: mostly unanimous right
    assert kinds.loc["4", "all_wrong"] > 0.8, kinds  # hardest: mostly unanimous wrong
    assert kinds.loc["2", "mixed"] > 0.5, kinds  # middle: the groups that teach
    assert (g["tie"] == g["tie_kind"].notna()).all()
