"""A job stopped by a signal says so (the training half): SIGTERM or SIGINT end it with run.json
`killed` and the signal, in one line; the same command resumes it to the rows an uninterrupted run writes. A
start that finds `running` from a writer that is gone records that start as killed. In a joblib sweep a SIGTERM
to one worker ends that job only (the sibling and the rest finish); a SIGKILLed worker takes its pool down, and
the next run of the command records and resumes every job."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from analysis.sections.provenance import running_seconds
from grpo_lab.config import TrainConfig
from grpo_lab.run.guards import RunLock, prepare
from grpo_lab.run.tables import read_table

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
STEPS = 16
ARGS = [f"max_steps={STEPS}", "prompts_per_step=2", "sampler.group_size=2", "task.levels=[1,2]",
        "task.train_per_level=4", "eval=none", "checkpoint_every=2", "threads=1", "seed=0"]


def _default_signals() -> None:
    """In the child, before Python starts: SIGINT as a terminal gives it. A test run started in the background
    of a shell without job control ignores SIGINT, and a child inherits that (the job then rightly leaves an
    ignored signal alone)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "experiments.train", *args], cwd=ROOT, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_signals)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=ROOT, env=ENV, text=True,
                          capture_output=True, timeout=900)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _record(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def _groups(run: Path) -> list[dict]:
    return read_table(run, "groups").drop_columns(["run_id"]).to_pylist()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("whole") / "run"
    out = _cli(*ARGS, f"hydra.run.dir={run}")
    assert out.returncode == 0, out.stderr[-3000:]
    return run


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_records_killed_and_the_same_command_resumes_exactly(tmp_path, uninterrupted, sig):
    run = tmp_path / "run"
    proc = _start(*ARGS, f"hydra.run.dir={run}")
    try:
        _wait_for(run / "checkpoints" / "step-000002", proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: stopped by {name} at step ") and last.endswith(
        f"({run}); run.json: killed; the same command resumes it from its last checkpoint"), err[-3000:]
    assert "Traceback" not in err
    record = _record(run)
    assert record["status"] == "killed" and record["signal"] == name and record["finished"]
    assert record["error"].startswith(f"Killed: stopped by {name} at step ")
    assert 2 <= read_table(run, "steps").num_rows < STEPS

    time.sleep(3)  # a pause between the kill and the resume, which the report's running time leaves out
    again = _cli(*ARGS, f"hydra.run.dir={run}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert _record(run)["status"] == "done" and _record(run)["signal"] is None
    done = _record(run)
    wall = (datetime.fromisoformat(done["finished"]) - datetime.fromisoformat(done["started"])).total_seconds()
    assert running_seconds(done) <= wall - 2  # each start's own time, summed (timestamps in whole seconds)
    assert "ended without recording how" not in again.stderr  # it was recorded
    # the killed start stays in the run's history: when, how it ended, by which process
    (earlier,) = _record(run)["earlier_starts"]
    assert earlier["status"] == "killed" and earlier["signal"] == name and earlier["pid"] == proc.pid
    assert earlier["started"] == record["started"] and earlier["error"] == record["error"][:300]
    assert _groups(run) == _groups(uninterrupted)  # the redrawn rows are the lost ones


def test_a_start_that_finds_a_gone_writer_running_records_it_killed(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "status": "running", "started": "then",
                                              "pid": gone.pid, "host": os.uname().nodename}))
    with RunLock(run):
        prepare(run, TrainConfig(out_dir=str(run)))
    record = _record(run)
    assert record["status"] == "killed" and record["run_id"] == "r1" and record["signal"] is None
    assert f"pid {gone.pid}" in record["error"] and "ended without recording how" in record["error"]
    assert "recorded as killed" in caplog.text


def _joblib(sweep: Path) -> list[str]:
    return ["-m", "launcher=joblib", "seed=0,1,2", *[a for a in ARGS if not a.startswith("seed=")],
            f"hydra.sweep.dir={sweep}"]


def test_sigterm_to_one_joblib_worker_ends_that_job_only(tmp_path, uninterrupted):
    """The issue's case: the whole sweep died with a traceback, the sibling was killed, both run.json said
    running. Now the killed job says killed, its sibling and the job after them finish, the sweep ends in one
    line naming the job, and the same command resumes it to the uninterrupted rows."""
    sweep = tmp_path / "sweep"
    proc = _start(*_joblib(sweep))
    try:
        _wait_for(sweep / "0" / "checkpoints" / "step-000002", proc)
        worker = _record(sweep / "0")["pid"]
        assert worker != proc.pid  # a pool's worker
        os.kill(worker, signal.SIGTERM)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "Traceback" not in err
    assert "stopped by SIGTERM at step " in err and f"({sweep}/0); run.json: killed" in err, err[-3000:]
    assert [_record(sweep / j)["status"] for j in "012"] == ["killed", "done", "done"]

    again = _cli(*_joblib(sweep))
    assert again.returncode == 0, again.stderr[-3000:]
    assert [_record(sweep / j)["status"] for j in "012"] == ["done", "done", "done"]
    assert _groups(sweep / "0") == _groups(uninterrupted)
    assert (sweep / "report" / "REPORT.md").exists()


def test_sigkill_to_a_joblib_worker_is_recorded_by_the_next_start(tmp_path):
    """SIGKILL cannot be caught: joblib's pool breaks and SIGKILLs the sibling. The run.json left `running` are
    recorded as killed by the next run of the command, which resumes every job to its end."""
    sweep = tmp_path / "sweep"
    proc = _start(*_joblib(sweep))
    try:
        _wait_for(sweep / "0" / "checkpoints" / "step-000002", proc)
        os.kill(_record(sweep / "0")["pid"], signal.SIGKILL)
        proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    left = {j: _record(sweep / j)["status"] for j in "012" if (sweep / j / "run.json").exists()}
    assert left["0"] == "running"

    again = _cli(*_joblib(sweep))
    assert again.returncode == 0, again.stderr[-3000:]
    assert [_record(sweep / j)["status"] for j in "012"] == ["done", "done", "done"]
    assert "recorded as killed" in (sweep / "0" / "train.log").read_text()
    for j, status in left.items():
        assert ("recorded as killed" in (sweep / j / "train.log").read_text()) == (status == "running"), j
        assert read_table(sweep / j, "steps").to_pandas()["step"].tolist() == list(range(1, STEPS + 1))
