"""A sweep that lost jobs never reads as a smaller sweep that ran whole (analysis/data/plan.py, records.py): the
report counts the jobs the sweep's multirun.yaml meant to run against those it holds and names each missing one
with its overrides; a job whose run.json says `killed`, or `running` though its process is gone, is left out
as killed and named; a job still running is named as such."""

import json
import os
import platform
import shutil
import subprocess
import sys
import warnings

import pytest
import yaml

from analysis.data.load import SkippedWarning, load
from analysis.data.plan import MissingJobsWarning, missing_jobs, planned_jobs
from analysis.report import build_report
from fixtures.runs import SMALL, cli
from fixtures.synthetic import job_config, prompt_pool, write_sweep


def lost_sweep(root, seeds=(0, 1, 2), overrides=("sampler=fixed,resample_on_tie", "seed=0,1,2,3")):
    """A sweep whose multirun.yaml means `overrides` (by default 8 jobs: two samplers by four seeds) of which
    only jobs 0 .. len(seeds) - 1 began (fixed groups, those seeds)."""
    prompts = prompt_pool(levels=("1", "2"), per_level=4)
    configs = [job_config("fixed", group_size=4, seed=s, max_steps=6, prompts_per_step=4) for s in seeds]
    return write_sweep(root, configs, prompts, overrides=overrides, eval_prompts=prompts, eval_n=4)


def skipped_or_missing(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SkippedWarning)]


def set_record(run, **fields):
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, **fields}))


def gone_pid() -> int:
    """The pid of a process of this host that has ended."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def pages(report):
    return report.read_text(), (report.parent / "DETAILS.md").read_text()


def test_missing_and_killed_jobs_are_counted_and_named(tmp_path):
    root = lost_sweep(tmp_path / "sweep")
    set_record(root / "1", status="running", pid=gone_pid(), host=platform.node())  # its process is gone
    set_record(root / "2", status="killed", error="SIGTERM")  # as the trainer writes it
    with pytest.warns(SkippedWarning) as said:
        report = build_report(root)
    messages = [str(w.message) for w in said]
    gone = "skipped 1: killed (its run.json still says running, but its process, pid "
    assert any(m.startswith(gone) for m in messages)
    assert "skipped 2: killed (SIGTERM)" in messages
    missing = [m for w, m in zip(said, messages) if issubclass(w.category, MissingJobsWarning)]
    assert missing == ["missing 5 of the 8 jobs the sweep meant to run (multirun.yaml), which left no run: 3 "
                       "(sampler=fixed seed=3); 4 (sampler=resample_on_tie seed=0); 5 (sampler=resample_on_tie "
                       "seed=1); 6 (sampler=resample_on_tie seed=2); 7 (sampler=resample_on_tie seed=3)"]
    front, details = pages(report)
    assert ("- **Incomplete sweep**: left no run: 5 of the 8 jobs its multirun.yaml meant to run (jobs 3-7); killed "
            "before finishing, left out: 2 (jobs 1-2).") in front
    assert "- Jobs: 1 loaded, 2 jobs or parts skipped, 5 of the 8 the sweep meant to run missing (no run left)" in front
    assert "- `2`: killed (SIGTERM)" in details
    listed = details.split("### Missing from the sweep", 1)[1].split("###", 1)[0]
    assert [line for line in listed.splitlines() if line.startswith("- ")] == [
        "- `3`: sampler=fixed seed=3", "- `4`: sampler=resample_on_tie seed=0", "- `5`: sampler=resample_on_tie seed=1",
        "- `6`: sampler=resample_on_tie seed=2", "- `7`: sampler=resample_on_tie seed=3"]


@pytest.mark.parametrize("where, note", [("here", "still runs"), ("elsewhere", "cannot tell from here")])
def test_a_job_still_running_is_read_and_named(tmp_path, where, note):
    """Alive on this host (this process), or on another host (which cannot be asked): loaded as far as it got,
    named as running in the Findings and under Jobs, never as done."""
    root = lost_sweep(tmp_path / "sweep", seeds=(0, 1, 2, 3), overrides=["seed=0,1,2,3"])
    host = platform.node() if where == "here" else "another-host"
    set_record(root / "1", status="running", finished=None, pid=os.getpid(), host=host)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = build_report(root)
    assert skipped_or_missing(caught) == []  # nothing skipped, nothing missing
    front, details = pages(report)
    assert "- **Incomplete sweep**: still running, read as far as they got: 1 (job 1)." in front
    assert f"- `1`: status running (pid {os.getpid()} on " in details and note in details
    assert "Missing from the sweep" not in details


def test_a_whole_sweep_says_nothing_of_it(tmp_path):
    root = lost_sweep(tmp_path / "sweep", seeds=(0, 1), overrides=["seed=0,1"])
    assert missing_jobs([root]).meant == 2 and not missing_jobs([root]).missing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        front, details = pages(build_report(root))
    assert skipped_or_missing(caught) == []
    assert "Incomplete sweep" not in front and "Missing from the sweep" not in details


def test_the_plan_is_hydra_s_product_in_hydra_s_order(tmp_path):
    """The sweeper's params first, then the command line's; a key given twice is the last one's; range and
    choice as Hydra reads them; another sweeper or a record Hydra would not read tells nothing (no traceback)."""
    hydra = {"overrides": {"task": ["b=range(0,2)", "c=x", "a=choice(1,3)"]},
             "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                         "params": {"a": "1,2", "d": "u"}}}
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    assert planned_jobs(tmp_path) == [("a=1", "d=u", "b=0", "c=x"), ("a=1", "d=u", "b=1", "c=x"),
                                      ("a=3", "d=u", "b=0", "c=x"), ("a=3", "d=u", "b=1", "c=x")]
    hydra["sweeper"]["_target_"] = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    assert planned_jobs(tmp_path) is None
    (tmp_path / "multirun.yaml").write_text("hydra: {overrides: {task: ['a=[1,']}}")
    assert planned_jobs(tmp_path) is None
    (tmp_path / "multirun.yaml").write_text(": not yaml :\n\t-")
    assert planned_jobs(tmp_path) is None


@pytest.mark.heavy
def test_a_real_sweep_that_lost_a_job_names_it_with_its_own_overrides(tmp_path):
    """A real Hydra sweep of the train command (the built-in model, one step a job): the plan is each job's own
    recorded overrides, in its folder's order; a job folder lost (a worker that died before it began) is named
    with the overrides that job recorded."""
    sweep = tmp_path / "sweep"
    out = cli("-m", "seed=0,1", "sampler=fixed,resample_on_tie", *SMALL, "max_steps=1", f"hydra.sweep.dir={sweep}")
    assert out.returncode == 0, out.stderr[-3000:]
    recorded = [tuple(yaml.safe_load((sweep / str(k) / ".hydra" / "overrides.yaml").read_text())) for k in range(4)]
    assert planned_jobs(sweep) == recorded
    shutil.rmtree(sweep / "2")
    with pytest.warns(MissingJobsWarning, match=r"missing 1 of the 4 jobs .*: 2 \("):
        report = build_report(sweep)
    assert f"- `2`: {' '.join(recorded[2])}" in pages(report)[1]
    assert len(load(sweep).jobs) == 3
