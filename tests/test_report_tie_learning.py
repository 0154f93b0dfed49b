"""The learning-from-ties section on a small real sweep (experiment=tie_learning, three arms, two seeds, a few
steps): every number it shows is recounted from the raw parquet tables with plain loops, and a replayed group
is never counted as a draw anywhere in the report."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from reference import raw, train_sweep

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 8 * 4 * 6  # six grpo steps of 8 prompts x 4 samples


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return train_sweep(tmp_path_factory.mktemp("ties") / "sweep", [
        "experiment=tie_learning", "arm=grpo,rl_zvp,replay", "seed=0,1", f"max_samples={BUDGET}", "prompts_per_step=8",
        "sampler.group_size=4", "sampler.replay.size=8", "task.levels=[1,2,4]", "task.train_per_level=8",
        "task.eval_per_level=4", "eval.n=4", f"eval.every_samples={BUDGET // 2}", "threads=1"])


def arms(root):
    """Each job's arm as the report names it: the `arm` preset its command line chose (Hydra's overrides.yaml),
    which sets (algo.advantage, sampler.name) in its config.json."""
    import yaml

    out = {}
    for p in root.glob("*/config.json"):
        config = json.loads(p.read_text())
        chosen = yaml.safe_load((p.parent / ".hydra" / "overrides.yaml").read_text())
        arm = next(o.split("=", 1)[1] for o in chosen if o.startswith("arm="))
        assert (config["algo.advantage"], config["sampler.name"]) == ARMS[arm]
        out[p.parent.name] = arm
    return out


ARMS = {"grpo": ("grpo", "fixed"), "rl_zvp": ("rl_zvp", "fixed"), "replay": ("grpo", "replay")}  # what each sets


def report_table(root, name):
    return pd.read_csv(root / "report" / "tables" / f"{name}.csv")


def test_outcomes_recount_from_the_groups_table(sweep):
    groups = raw(sweep, "groups")
    arm_of = arms(sweep)
    shown = report_table(sweep, "tie_outcomes").set_index("arm")
    assert len(shown) == 3
    expected = {}
    for job, rows in groups.groupby("job"):
        drawn, replayed = rows[~rows["reused"].fillna(False)], rows[rows["reused"].fillna(False)]
        tied = [r for r in drawn.itertuples() if len(set(r.rewards)) == 1]
        trained = [r for r in tied if np.any(np.nan_to_num(np.asarray(r.advantages, float)) != 0)]
        e = expected.setdefault(arm_of[job], {"wrong": [], "trained": 0, "replayed": 0, "replayed_samples": 0,
                                              "groups": 0})
        e["wrong"].append(sum(max(r.rewards) == 0 for r in tied) / len(drawn))
        e["trained"] += len(trained)
        e["replayed"] += len(replayed)
        e["replayed_samples"] += int(replayed["group_size"].sum())
        e["groups"] += len(drawn)
    for arm, e in expected.items():
        row = shown.loc[arm]
        assert row["groups"] == e["groups"] and row["tied_trained"] == e["trained"], (arm, row, e)
        assert row["replayed"] == e["replayed"] and row["replayed_samples"] == e["replayed_samples"]
        assert row["all_wrong_share"] == pytest.approx(np.mean(e["wrong"]), abs=1e-12)
    # the rules did what they say: rl_zvp trains tied groups, grpo never does; the buffer replayed something
    assert shown.loc["rl_zvp", "tied_trained"] > 0 and shown.loc["grpo", "tied_trained"] == 0
    assert shown.loc["replay", "replayed"] > 0


def test_replayed_groups_are_never_draws(sweep):
    groups = raw(sweep, "groups")
    drawn = groups[~groups["reused"].fillna(False)]
    spent = report_table(sweep, "budget_by_arm")
    replay = spent[spent["arm"] == "replay"].iloc[0]
    jobs = [j for j, a in arms(sweep).items() if a == "replay"]
    assert replay["samples"] == drawn[drawn["job"].isin(jobs)]["group_size"].sum()
    # and the jobs' draws end at the budget, as the steps table counts them
    steps = raw(sweep, "steps")
    assert (steps.groupby("job")["samples_total"].max() >= BUDGET).all()


def test_held_out_from_a_unanimous_start_recounts(sweep):
    ev = raw(sweep, "eval")
    arm_of = arms(sweep)
    shown = report_table(sweep, "tie_learning_start").set_index(["arm", "start"])
    for (arm, start), row in shown.iterrows():
        accuracies = []
        for job, rows in ev.groupby("job"):
            if arm_of[job] != arm:
                continue
            first, last = rows[rows["step"] == rows["step"].min()], rows[rows["step"] == rows["step"].max()]
            start_rate = first.groupby("prompt_id")["correct"].mean()
            chosen = start_rate[start_rate == (0.0 if start == "all_wrong" else 1.0)].index
            if len(chosen):
                accuracies.append(last[last["prompt_id"].isin(chosen)]["correct"].mean())
        assert row["jobs"] == len(accuracies)
        assert row["accuracy_end"] == pytest.approx(np.mean(accuracies), abs=1e-12)
    assert "## Learning from ties" in (sweep / "report" / "REPORT.md").read_text()
