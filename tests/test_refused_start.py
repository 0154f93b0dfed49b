"""A refused start changes nothing: after a resume refused for a changed key, or a start on a busy directory,
every file of the run (or the whole sweep) is byte-identical, train.log included. Real Hydra runs, through
the command line (its preflight refuses before Hydra writes) and through the Hydra app itself (the job's own
guard refuses before .hydra/ or the log is written). Readers take the run's config from config.json."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fixtures.runs import SMALL, app, cli, error_lines, tree
from grpo_lab.run.lock import RunLock
from grpo_lab.run.tables import read_table

SMALL = ["max_steps=2", *SMALL]


def errors(out: subprocess.CompletedProcess) -> list[str]:
    return error_lines(out.stderr)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("single") / "run"
    out = cli(*SMALL, f"hydra.run.dir={run}")
    assert out.returncode == 0, out.stderr[-3000:]
    return run


@pytest.mark.parametrize("via", [cli, app], ids=["command line", "hydra app"])
def test_a_refused_resume_leaves_every_file_of_the_run_as_it_was(single, via):
    before = tree(single)
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "train.log", "config.json",
            "run.json"} <= set(before)
    out = via(*SMALL, "sampler.group_size=4", "task.levels=[1]", f"hydra.run.dir={single}")
    assert out.returncode != 0
    assert errors(out) == [f"error: {single} holds a run started with another config (sampler.group_size 2 -> 4, "
                                "task.levels [1, 2] -> [1]); use another out_dir, or resume=never to delete that run "
                                "and start over"]
    assert tree(single) == before


def test_a_start_on_a_busy_run_leaves_it_as_it_was(single):
    before = tree(single)
    with RunLock(single):
        out = cli(*SMALL, "max_steps=3", f"hydra.run.dir={single}")  # an accepted resume, but the run is busy
    assert out.returncode != 0 and f"is being written by pid {os.getpid()}" in errors(out)[-1]
    assert tree(single) == before


def test_an_accepted_resume_records_its_start(single):
    log_before = (single / "train.log").read_text()
    out = cli(*SMALL, "max_steps=3", f"hydra.run.dir={single}")  # a budget may differ: the run extends
    assert out.returncode == 0, out.stderr[-3000:]
    log = (single / "train.log").read_text()
    assert log.startswith(log_before) and "job 0: loading torch and transformers" in log[len(log_before):]
    assert "resuming" in log[len(log_before):] and "max_steps=3" in (single / ".hydra" / "overrides.yaml").read_text()
    assert json.loads((single / "config.json").read_text())["max_steps"] == 3
    assert read_table(single, "steps").num_rows == 3


def test_evaluate_reads_the_checked_record(single):
    """.hydra/config.yaml made to disagree with config.json (as a refused start once left it): evaluation
    follows config.json, every level of the run."""
    hydra_config = single / ".hydra" / "config.yaml"
    stale = OmegaConf.load(hydra_config)
    stale.task.levels = [1]
    OmegaConf.save(stale, hydra_config)
    out = cli(f"run_dir={single}", "n=2", "steps=[0]", "overwrite=true", module="experiments.evaluate")  # the run's own
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_table(single, "eval").to_pandas()
    assert sorted(rows[rows["step"] == 0]["difficulty"].unique()) == ["1", "2"]
    assert (single / "evaluate.log").exists()


def test_a_refused_sweep_resume_leaves_the_whole_sweep_as_it_was(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", "launcher=joblib", "seed=0,1", *SMALL, f"hydra.sweep.dir={sweep}"]
    out = cli(*args)
    assert out.returncode == 0, out.stderr[-3000:]
    before = tree(sweep)
    assert {"multirun.yaml", "0/config.json", "1/.hydra/overrides.yaml", "1/train.log"} <= set(before)
    out = cli(*args, "sampler.group_size=4")  # the preflight: nothing is written, multirun.yaml included
    assert out.returncode != 0
    assert errors(out) == [f"error: {sweep / '0'} holds a run started with another config (sampler.group_size "
                                "2 -> 4); use another out_dir, or resume=never to delete that run and start over"]
    assert tree(sweep) == before
    out = app(*args, "sampler.group_size=4")  # past the preflight: the sweeper rewrites multirun.yaml first,
    assert out.returncode != 0  # and each job refuses itself before writing
    after = tree(sweep)
    assert {k: v for k, v in after.items() if k != "multirun.yaml"} == {
        k: v for k, v in before.items() if k != "multirun.yaml"}
    out = cli(*args)  # the sweep's own command again resumes it (both jobs finished: they end at once)
    assert out.returncode == 0, out.stderr[-3000:]
    assert all(read_table(sweep / j, "steps").num_rows == 2 for j in ("0", "1"))
