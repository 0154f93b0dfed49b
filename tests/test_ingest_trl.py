"""A real TRL GRPOTrainer run on CPU (the README's recipe, read out of README.md and run as written), ingested and
reported: its ties recount from TRL's own parquet files with plain pandas and equal TRL's logged
`frac_reward_zero_std` step by step; beside a verl dump, the two compare as arms in one report."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.ingest import Reading, ingest
from analysis.report import build_report
from fixtures.synthetic import prompt_pool
from fixtures.tool_logs import read_jsonl, read_parts, verl_run

trl = pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
G = 8  # experiments/trl_example.py's num_generations


def readme_recipe() -> list[list[str]]:
    """The commands of the README's TRL recipe, in order, `pip install` left out (the test environment has TRL)."""
    text = (ROOT / "README.md").read_text().split("\n## Runs made with TRL or verl\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    commands = [shlex.split(part) for line in block.strip().splitlines() for part in line.split("&&")]
    return [c for c in commands if c[:2] != ["pip", "install"]]


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> dict[str, Path]:
    """The recipe run as written, its `runs/` folder under a temporary one."""
    base = tmp_path_factory.mktemp("recipe")
    outputs = []
    for command in readme_recipe():
        assert command[:2] == ["python", "-m"], command
        args = [a.replace("runs/", f"{base}/runs/") for a in command[2:]]
        if args[0] == "experiments.trl_example":
            args += ["--threads", "1"]
        out = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                             timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        outputs.append(out.stdout)
    return {"trl": base / "runs" / "trl", "run": base / "runs" / "trl-run", "stdout": outputs}


def tied(rewards: pd.Series) -> bool:
    """A group ties where its rewards are one value."""
    return rewards.nunique() == 1


def trl_frames(trl: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(p) for p in sorted((trl / "completions").glob("completions_*.parquet"))],
                     ignore_index=True)


def test_the_readme_recipe_ties_recount_from_trls_parquet_and_equal_trls_own_count(recipe):
    raw = trl_frames(recipe["trl"])
    state = json.loads((recipe["trl"] / "trainer_state.json").read_text())
    logged = {e["step"]: e["frac_reward_zero_std"] for e in state["log_history"] if "frac_reward_zero_std" in e}
    steps = sorted(raw["step"].unique())
    assert len(steps) == 12 and sorted(logged) == steps
    # plain pandas: each step's rows in groups of G in order, a group tied where its rewards are one value
    raw["group"] = raw.groupby("step").cumcount() // G
    assert (raw.groupby(["step", "group"])["prompt"].nunique() == 1).all()
    recount = raw.groupby(["step", "group"])["accuracy"].nunique().eq(1).groupby("step").mean()
    groups = read_parts(recipe["run"], "groups")
    ours = groups.groupby("step")["tie"].mean()
    np.testing.assert_array_equal(ours.to_numpy(), recount.to_numpy())
    np.testing.assert_allclose(ours.to_numpy(), [logged[s] for s in steps], atol=1e-6)
    assert 0 < ours.mean() < 1  # the check can tell: some groups tie and some do not
    assert f"at {len(steps)} of {len(steps)} steps" in recipe["stdout"][1]
    # by difficulty (the level each reward call logged), pooled over training
    by_level = raw.groupby(["step", "group"]).agg(level=("level", "first"), tie=("accuracy", tied))
    expected = by_level.groupby("level")["tie"].mean()
    table = pd.read_csv(recipe["run"] / "report" / "tables" / "ties_by_difficulty.csv", dtype={"difficulty": str})
    np.testing.assert_allclose(table.set_index("difficulty")["tie_frac"].loc[expected.index], expected.to_numpy())
    # TRL's own per-step metrics land in the steps table
    loss = {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e and "frac_reward_zero_std" in e}
    step_rows = read_parts(recipe["run"], "steps")
    np.testing.assert_allclose(step_rows["loss"], [loss[s] for s in step_rows["step"]])
    report = (recipe["run"] / "report" / "REPORT.md").read_text()
    assert (f"the ties recomputed from the rewards equal TRL's own logged fraction (frac_reward_zero_std) at "
            f"{len(steps)} of {len(steps)} steps") in report
    assert ("No eval tables were found: no pass@k or cons@k. Not in the imported runs' sources: held-out "
            "evaluation (TRL") in report


def test_two_reward_functions_sum_as_trl_summed_them(tmp_path):
    """A second reward function (`finished`, 0.5): TRL trains on the sum, the ingest ties on it, and each
    function's values are kept; the sum's ties still equal TRL's own count."""
    trl = tmp_path / "trl"
    out = subprocess.run([sys.executable, "-m", "experiments.trl_example", "--out", str(trl), "--steps", "4",
                          "--format-weight", "0.5", "--threads", "1"], cwd=ROOT, env=ENV, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    run = ingest("trl", trl, tmp_path / "run", Reading(correct_from="accuracy"))
    raw = trl_frames(trl)
    groups = read_parts(run, "groups")
    total = (raw["accuracy"] + raw["finished"]).to_numpy().reshape(-1, G)
    np.testing.assert_allclose(np.stack(groups["rewards"]), total, rtol=1e-6)
    np.testing.assert_array_equal(np.stack(groups["rewards_finished"]), raw["finished"].to_numpy().reshape(-1, G))
    record = json.loads((run / "run.json").read_text())["imported"]
    assert record["how"]["reward"] == "the sum of `accuracy`, `finished`"
    assert record["tie_check"]["equal"] == record["tie_check"]["steps"] == 4


def test_a_verl_dump_and_a_trl_log_compare_as_two_arms(recipe, tmp_path):
    prompts = prompt_pool(levels=("1", "2", "3", "4", "5"), per_level=16)
    held_out = prompt_pool(levels=("1", "2", "3", "4", "5"), per_level=2, seed=1).assign(
        prompt_id=lambda d: "H" + d["prompt_id"])
    rollouts, validation = verl_run(tmp_path / "verl", prompts, held_out, steps=12, batch=8, n=G, val_n=4)
    verl = ingest("verl", rollouts, tmp_path / "verl-run",
                  Reading(difficulty_from="level", correct_from="acc", tokens_from="response_length",
                          answer_from="pred"), validation=validation)
    report = build_report([recipe["run"], verl], tmp_path / "both", by=["source.tool"])
    text = report.read_text()
    assert "source.tool=trl vs source.tool=verl" in text or "source.tool=verl vs source.tool=trl" in text
    assert f"TRL {trl.__version__}, 12 files" in text and "verl (version not recorded)" in text
    # each arm's tie fraction by difficulty recounts from its own raw files
    table = pd.read_csv(tmp_path / "both" / "tables" / "ties_by_difficulty.csv", dtype={"difficulty": str})
    raw = trl_frames(recipe["trl"])
    raw["group"] = raw.groupby("step").cumcount() // G
    trl_ties = raw.groupby(["step", "group"]).agg(level=("level", "first"), tie=("accuracy", tied))
    dump = read_jsonl(rollouts)
    verl_ties = dump.groupby(["step", "uid"]).agg(level=("level", "first"), tie=("score", lambda s: s.nunique() == 1))
    for tool, truth in (("trl", trl_ties), ("verl", verl_ties)):
        rows = table[table["source.tool"] == tool].set_index("difficulty")["tie_frac"]
        expected = truth.groupby("level")["tie"].mean()
        np.testing.assert_allclose(rows.loc[expected.index].to_numpy(), expected.to_numpy())


def test_a_plain_trl_run_ingests_with_no_flags_and_reports(tmp_path):
    """A run whose reward function logs nothing beside its reward (a user's own script: log_completions=True
    alone): `python -m analysis.ingest trl DIR --out RUN` with no other flag ingests it, its ties still equal TRL's
    own count, its token counts absent (said once in the summary) and its report built without them."""
    trl = tmp_path / "trl"
    made = subprocess.run([sys.executable, "-m", "experiments.trl_example", "--out", str(trl), "--steps", "3",
                           "--plain", "--threads", "1"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stderr[-3000:]
    raw = trl_frames(trl)
    assert "completion_tokens" not in raw and "level" not in raw
    out = subprocess.run([sys.executable, "-m", "analysis.ingest", "trl", str(trl), "--out", str(tmp_path / "run")],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "equal TRL's own logged frac_reward_zero_std at 3 of 3 steps" in out.stdout
    assert sum(line.startswith("not in the source: token counts") for line in out.stdout.splitlines()) == 1
    groups = read_parts(tmp_path / "run", "groups")
    assert groups["tokens"].isna().all() and len(groups) == len(raw) // G
    report = subprocess.run([sys.executable, "-m", "analysis", str(tmp_path / "run"), "--out",
                             str(tmp_path / "report")], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    assert "generated tokens not recorded" in (tmp_path / "report" / "REPORT.md").read_text()
