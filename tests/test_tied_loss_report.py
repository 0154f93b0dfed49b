"""The ties_in_loss study in miniature (the tiny model, ten steps a job): the report's "How tied groups entered the
loss" recounted from the raw steps tables with code of its own, and its Findings asking one question an arm's key."""

import json

import numpy as np
import pandas as pd
import pytest
from reference import raw, train_sweep

ARMS = ("grpo", "tied_kl_mask", "tied_batch_skip", "group_2")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return train_sweep(tmp_path_factory.mktemp("ties_in_loss") / "sweep", [
        "experiment=ties_in_loss", f"arm={','.join(ARMS)}", "seed=0,1", "max_samples=160", "task.train_per_level=8",
        "task.eval_per_level=2", "eval.n=4", "eval.every_samples=80", "eval.every_updates=4", "algo.kl_grad_every=2",
        "launcher=joblib"], timeout=900)


def keys_of(root) -> pd.DataFrame:
    """Each job's three keys as its config.json has them (not through analysis)."""
    rows = {}
    for p in root.glob("*/config.json"):
        c = json.loads(p.read_text())
        rows[p.parent.name] = (c["algo.tied_kl"], c["algo.tied_batch"], c["sampler.group_size"])
    return pd.DataFrame.from_dict(rows, orient="index", columns=["tied_kl", "tied_batch", "group_size"])


def test_the_section_recounts_from_the_steps_tables(sweep):
    steps = raw(sweep, "steps")
    keys = keys_of(sweep)
    arm = {job: ("tied_kl_mask" if k.tied_kl == "mask" else "tied_batch_skip" if k.tied_batch == "skip"
                 else "group_2" if k.group_size == 2 else "grpo") for job, k in keys.iterrows()}
    steps["arm"] = steps["job"].map(arm)
    table = pd.read_csv(sweep / "report" / "tables" / "tied_loss.csv")
    table["arm"] = table["arm"].str.removeprefix("arm=")
    got = table.set_index("arm")
    assert sorted(got.index) == sorted(ARMS)
    for name, rows in steps.groupby("arm"):
        jobs = rows.groupby("job")
        share = jobs["tied_norm_share"].apply(lambda s: s.dropna().mean())
        assert got.loc[name, "tied_share"] == pytest.approx(share.mean(), abs=1e-12)
        assert got.loc[name, "tied_share_low"] == pytest.approx(share.min(), abs=1e-12)
        probed = rows[rows["step"] % 2 == 0]
        measured = probed.dropna(subset=["kl_grad_untied"])
        assert len(measured) == got.loc[name, "probed_steps"] and len(measured) > 0
        assert rows[rows["step"] % 2 == 1]["kl_grad_untied"].isna().all()  # only on the probe's steps
        assert got.loc[name, "kl_grad_untied"] == pytest.approx(np.mean(measured["kl_grad_untied"]), rel=1e-12)
        assert got.loc[name, "kl_grad_ratio"] == pytest.approx(np.mean(measured["kl_grad_tied"])
                                                               / np.mean(measured["kl_grad_untied"]), rel=1e-12)
        if name == "tied_kl_mask":  # the masked term has no gradient from tied units
            assert (measured["kl_grad_tied"] == 0).all()
        all_tied = rows["informative"] == 0  # every step drew a batch (fixed groups)
        assert got.loc[name, "all_tied_frac"] == pytest.approx(all_tied.mean())
        skipped = (rows["opt_steps"] == 0).sum() / jobs.ngroups
        assert got.loc[name, "skipped"] == pytest.approx(skipped)
        assert (skipped > 0) == (name == "tied_batch_skip" and all_tied.any())


def test_the_findings_ask_one_question_a_changed_key(sweep):
    text = (sweep / "report" / "REPORT.md").read_text()
    findings = text[text.index("## Findings"):text.index("## Verdict")]
    asked = [line for line in findings.splitlines() if line.startswith("- **`")]
    assert [line.split("**")[1] for line in asked] == ["`algo.tied_kl`", "`algo.tied_batch`",
                                                         "`sampler.group_size`, `prompts_per_step`"]
    assert "vs keep (grpo)" in asked[0] and "2, 8 vs 8, 2 (grpo)" in asked[2]
    assert "## How tied groups entered the loss" in text
