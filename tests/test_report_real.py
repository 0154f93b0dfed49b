"""The report on a small real sweep (the tiny model, a few steps): fixed vs resample_on_tie with
pool=all, evaluated at equal samples drawn. Its numbers are recounted from the raw tables."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from reference import both_pages, raw, train_sweep

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 4 * 4 * 6  # six fixed steps of 4 prompts x 4 samples
EVERY = 32  # eval.every_samples: two fixed steps


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return train_sweep(tmp_path_factory.mktemp("real") / "sweep", [
        "experiment=fixed_vs_adaptive", f"max_samples={BUDGET}", "prompts_per_step=4", "sampler.group_size=4",
        "sampler.resample_on_tie.max_rounds=3", "sampler.resample_on_tie.pool=all", "task.levels=[2,3]",
        "task.train_per_level=8", "task.eval_per_level=2", "eval.n=4", f"eval.every_samples={EVERY}", "seed=0",
        "log_completions=4"], timeout=600)


def sampler_of(root):
    """Each job's sampler, read from the config the trainer saved (not through analysis)."""
    return {p.parent.name: json.loads(p.read_text())["sampler.name"] for p in root.glob("*/config.json")}


def test_wasted_fraction_equals_a_recount_of_samples_whose_unit_had_mixed_rewards(sweep):
    groups = raw(sweep, "groups")
    trained = groups[groups["used"]]
    # a unit: the used groups of one prompt at one step (pool=all pools every round of the prompt)
    pooled = trained.groupby(["job", "step", "prompt_id"])["rewards"].agg(lambda r: np.concatenate(list(r)))
    informative = (pooled.map(len) * pooled.map(lambda r: r.min() != r.max())).groupby(level="job").sum()
    drawn = groups.groupby("job")["group_size"].sum()
    recount = (1 - informative / drawn).groupby(drawn.index.map(sampler_of(sweep))).mean()
    spent = pd.read_csv(sweep / "report" / "tables" / "budget_by_arm.csv").set_index("sampler")
    assert spent["wasted_frac"].to_dict() == pytest.approx(recount.to_dict(), abs=1e-12)
    resample = groups[groups["job"].map(sampler_of(sweep)) == "resample_on_tie"]
    assert (resample["round"] > 0).any()  # tied rounds were redrawn...
    tied_but_trained = resample[resample["tie"] & (resample["n_informative"] > 0)]
    assert len(tied_but_trained)  # ...and a tied round pooled with a mixed one trained: the old count missed it
    # the trainer's unit ids: a prompt's rounds share one unit; n_informative from the update's advantages
    assert (trained.groupby(["job", "step", "unit"])["prompt_id"].nunique() == 1).all()
    assert trained.groupby(["job", "step", "prompt_id"])["unit"].nunique().eq(1).all()


def test_held_out_checkpoints_sit_at_equal_samples_drawn(sweep):
    eval = raw(sweep, "eval")
    groups = raw(sweep, "groups")
    drawn = groups.groupby(["job", "step"])["samples_total"].max()
    at = eval.drop_duplicates(["job", "step"]).set_index(["job", "step"])["samples_total"]
    assert (at.xs(0, level="step") == 0).all()
    assert (at.drop(0, level="step") == drawn.reindex(at.drop(0, level="step").index)).all()  # as the trainer counted
    for job, steps in at.groupby(level="job"):  # an eval on crossing each multiple of eval.every_samples
        per_step = drawn.loc[job]
        crossed = [s for s in per_step.index if per_step[s] // EVERY > per_step.shift(fill_value=0)[s] // EVERY]
        assert set(crossed) <= set(steps.index.get_level_values("step"))
    table = pd.read_csv(sweep / "report" / "tables" / "at_k_comparisons.csv")
    between = table[table["checkpoint"].str.endswith(" samples") & table["refused"].isna()]
    assert len(between) and not table[table["alignment"] == "samples"]["checkpoint"].str.startswith("step").any()
    at_steps = table[table["alignment"] == "updates"]  # the jobs end at different updates: compared at one count
    assert len(at_steps) and (at_steps["updates_a"] == at_steps["updates_b"]).all()
    assert (at_steps["steps_a"] == at_steps["steps_b"]).all()  # an update every step (algo.tied_batch=step)
    tokens = groups.groupby(["job", "step"])["tokens_total"].max()  # the eval rows' tokens, as the trainer counted
    at_tokens = eval.drop_duplicates(["job", "step"]).set_index(["job", "step"])["tokens_total"].drop(0, level="step")
    assert (at_tokens == tokens.reindex(at_tokens.index)).all()
    text = (sweep / "report" / "REPORT.md").read_text()
    assert text.index("## Findings") < text.index("## Held-out results") < text.index("## What trained")


def test_front_matter_records_the_code_packages_and_what_each_difficulty_is(sweep):
    import json

    import transformers

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    for path in sweep.glob("*/run.json"):
        record = json.loads(path.read_text())
        assert record["difficulty_labels"] == {"2": "2+1 digits", "3": "2+2 digits"}  # task.levels=[2,3]
        assert record["transformers"] == transformers.__version__
        assert record["git"] is None if head.returncode else record["git"]["commit"] == head.stdout.strip()
    text = (sweep / "report" / "REPORT.md").read_text()
    assert text.startswith("# Report: fixed_vs_adaptive\n")
    assert f"transformers {transformers.__version__}" in text
    assert str(sweep) not in text and "/tmp" not in text
    text = both_pages(sweep / "report" / "REPORT.md")
    examples = text[text.index("## Example completions"):text.index("## Jobs")]
    assert "#### Difficulty 2 (2+1 digits)" in examples and "#### Difficulty 3 (2+2 digits)" in examples
    shown = set(re.findall(r"prompt `([^`]+)`", examples))
    kept = set(raw(sweep, "completions")["prompt_id"])
    assert shown and shown <= kept  # every example is a kept completion's group


def test_a_packed_report_ships_its_data_and_rebuilds_the_same(sweep, tmp_path):
    """analysis.pack copies the sweep's records and tables (one zstd part per table per job, no checkpoints) and
    builds the report from the copy: every table and every number equal to the report of the sweep itself, and
    the documented rebuild (`python -m analysis DIR/data --out DIR`) gives the same files again."""
    target = tmp_path / "report"
    out = subprocess.run([sys.executable, "-m", "analysis.pack", str(sweep), str(target)], cwd=ROOT, text=True,
                         capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    data = target / "data"
    assert not list(data.rglob("checkpoints")) and not list(data.rglob("*.safetensors"))
    assert all(len(list(p.glob("part-*.parquet"))) == 1 for p in data.glob("*/groups"))
    for table in ("groups", "steps", "eval"):  # rows and schema as the jobs wrote them
        assert raw(data, table).drop(columns="job").equals(raw(sweep, table).drop(columns="job"))
    original = sorted(p.relative_to(sweep / "report") for p in (sweep / "report" / "tables").glob("*.csv"))
    assert original == sorted(p.relative_to(target) for p in (target / "tables").glob("*.csv"))
    for name in original:
        assert (target / name).read_bytes() == (sweep / "report" / name).read_bytes(), name
    first = {p.relative_to(target): p.read_bytes() for p in target.rglob("*") if p.is_file() and "data" not in p.parts}
    again = subprocess.run([sys.executable, "-m", "analysis", str(data), "--out", str(target)], cwd=ROOT, text=True,
                           capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    rebuilt = {p.relative_to(target): p.read_bytes() for p in target.rglob("*")
               if p.is_file() and "data" not in p.parts}
    assert rebuilt.keys() == first.keys()
    assert [name for name in first if rebuilt[name] != first[name]] == []
