"""The predicted-pass-rate table against a plain recount, its interval's coverage over seeds, and its place in a
report built from a real SPO run and a real MoPPS run."""

import numpy as np
import pandas as pd
import pytest

from analysis.measures.predictions import NEAR, prediction_errors
from analysis.report import build_report
from grpo_lab.config import TrainConfig
from grpo_lab.train.trainer import train


def synthetic(seeds: int, rng: np.random.Generator, bias: float = 0.1) -> pd.DataFrame:
    """Groups of 8 whose predicted rate is the true rate plus a known bias: each job's errors centre on known
    values, so the mean absolute error over seeds is known in expectation."""
    rows = []
    for seed in range(seeds):
        for k in range(40):
            level = "1" if k % 2 else "2"
            p = 0.8 if level == "1" else 0.3
            right = rng.binomial(8, p)
            rows.append({"job": f"a-{seed}", "arm": "mopps", "difficulty": level, "group_size": 8,
                         "n_correct": right, "predicted_rate": p + bias})
            rows.append({"job": f"b-{seed}", "arm": "fixed", "difficulty": level, "group_size": 8,
                         "n_correct": right, "predicted_rate": np.nan})
    return pd.DataFrame(rows)


def test_the_table_is_a_plain_recount():
    g = synthetic(3, np.random.default_rng(0))
    table = prediction_errors(g, ["arm"]).set_index(["arm", "difficulty"])
    assert set(table.index.get_level_values(0)) == {"mopps"}  # no prediction: no row
    for level in ("1", "2", "all"):
        cell = g[g["predicted_rate"].notna() & ((g["difficulty"] == level) | (level == "all"))]
        errors = {job: [] for job in dict.fromkeys(cell["job"])}
        near = 0
        for r in cell.itertuples():
            e = abs(r.predicted_rate - r.n_correct / r.group_size)
            errors[r.job].append(e)
            near += e <= NEAR
        row = table.loc[("mopps", level)]
        assert row["jobs"] == 3 and row["groups"] == len(cell)
        assert row["abs_error"] == pytest.approx(np.mean([np.mean(v) for v in errors.values()]), abs=1e-12)
        assert row["near"] == pytest.approx(near / len(cell))
        assert row["realised"] == pytest.approx((cell["n_correct"] / 8).mean())


def test_the_interval_over_seeds_covers_about_as_stated():
    """Per-job mean errors of jobs drawn alike: the 95% t interval over 6 seeds covers the expected error."""
    rng = np.random.default_rng(1)
    from math import comb
    expected = np.mean([sum(comb(8, k) * p**k * (1 - p) ** (8 - k) * abs(p + 0.1 - k / 8) for k in range(9))
                        for p in (0.8, 0.3)])  # E|p + 0.1 - X/8|, X ~ Binomial(8, p), over the two levels
    hits = 0
    for _ in range(300):
        row = prediction_errors(synthetic(6, rng), ["arm"]).set_index("difficulty").loc["all"]
        hits += row["ci_low"] <= expected <= row["ci_high"]
    assert 0.9 <= hits / 300 <= 0.99, hits / 300


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A real SPO run and a real MoPPS run (mean selection), four steps each."""
    root = tmp_path_factory.mktemp("predicting")
    out = []
    for name in ("spo", "mopps"):
        cfg = TrainConfig(out_dir=str(root / name), max_steps=4, prompts_per_step=4, checkpoint_every=4)
        cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = [1, 2, 4], 8, 0
        cfg.sampler.name, cfg.sampler.group_size = name, 4
        if name == "spo":
            cfg.algo.advantage, cfg.sampler.spo.offline_n = "spo", 4
        else:
            cfg.sampler.mopps.selection, cfg.sampler.mopps.candidates = "mean", 2
        out.append(train(cfg))
    return out


def test_a_report_shows_each_predicting_run(runs, tmp_path):
    report = build_report(runs, tmp_path / "report")
    details = (report.parent / "DETAILS.md").read_text()
    assert "## Predicted pass rates" in details
    table = pd.read_csv(report.parent / "tables" / "predictions.csv")
    assert len(table[table["difficulty"] == "all"]) == 2
    for run, arm in zip(runs, table[table["difficulty"] == "all"]["arm"]):
        g = pd.concat([pd.read_parquet(p) for p in sorted((run / "groups").glob("*.parquet"))])
        had = g[g["predicted_rate"].notna()]
        row = table[(table["difficulty"] == "all") & (table["arm"] == arm)].iloc[0]
        assert row["groups"] == len(had)
        assert row["abs_error"] == pytest.approx((had["predicted_rate"] - had["n_correct"] / had["group_size"])
                                                 .abs().mean(), rel=1e-9)
