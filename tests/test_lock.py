"""The run directory's lock under real races: 60 processes start on one directory at once, on a fresh
directory, on a lock left by a holder killed with SIGKILL, and on garbage lock files; exactly one of them
holds it each time. Under churn (holders taking and releasing it in a loop) no two ever hold it together."""

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_lab.run import lock as lock_module
from grpo_lab.run.lock import LOCK_NAME, RunDirBusy, RunDirUnwritable, RunLock, filesystem_type

ROOT = Path(__file__).resolve().parent.parent
RACERS = 60
FORK = mp.get_context("fork")  # real processes, started cheaply from this one


def _inside(run_dir: str) -> int | None:
    """Enter the critical section: a marker only one process can create. None if another is inside."""
    try:
        return os.open(Path(run_dir) / "inside", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return None


def _leave(run_dir: str, fd: int) -> None:
    os.close(fd)
    os.unlink(Path(run_dir) / "inside")


def _start_once(run_dir, start, tried, outcomes):
    """One start: take the lock or be refused. A holder keeps it until every racer has tried."""
    start.wait()
    try:
        held = RunLock(run_dir).acquire()
    except RunDirBusy as e:
        outcomes.put(("busy", str(e)))
        with tried.get_lock():
            tried.value += 1
        return
    fd = _inside(run_dir)
    with tried.get_lock():
        tried.value += 1
    deadline = time.monotonic() + 120
    while tried.value < RACERS and time.monotonic() < deadline:
        time.sleep(0.01)
    outcomes.put(("held" if fd is not None else "overlap", os.getpid()))
    if fd is not None:
        _leave(run_dir, fd)
    held.release()


def _race(run_dir: Path) -> list[tuple[str, object]]:
    start, tried, outcomes = FORK.Event(), FORK.Value("i", 0), FORK.Queue()
    procs = [FORK.Process(target=_start_once, args=(str(run_dir), start, tried, outcomes)) for _ in range(RACERS)]
    for p in procs:
        p.start()
    start.set()
    results = [outcomes.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


def _killed_holder(run_dir: Path) -> int:
    """A real process that takes the lock and is killed with SIGKILL while holding it. Returns its pid."""
    code = ("import sys, time; from grpo_lab.run.lock import RunLock; RunLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.stdout.readline().strip() == "held"
    p.send_signal(signal.SIGKILL)
    p.wait()
    return p.pid


LEFT_BEHIND = {  # what the lock file holds before the race
    "fresh": None,
    "killed -9": "killed",
    "pid abc": json.dumps({"pid": "abc", "host": "h", "since": "x"}),
    "empty file": "",
    "binary junk": b"\x00\xff\xfe junk \x80" * 7,
    "a JSON list": "[1, 2]",
}


@pytest.mark.parametrize("left", list(LEFT_BEHIND))
def test_sixty_racing_starts_give_one_holder(tmp_path, left):
    content = LEFT_BEHIND[left]
    if content == "killed":
        dead = _killed_holder(tmp_path)
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == dead  # left behind, unlocked
    elif content is not None:
        (tmp_path / LOCK_NAME).write_bytes(content if isinstance(content, bytes) else content.encode())
    results = _race(tmp_path)
    kinds = [k for k, _ in results]
    assert kinds.count("held") == 1 and kinds.count("busy") == RACERS - 1, kinds
    (holder,) = [v for k, v in results if k == "held"]
    refusals = {v for k, v in results if k == "busy"}
    assert all("\n" not in r and "is being written by" in r for r in refusals)
    assert any(f"pid {holder} on this host" in r for r in refusals)  # its record was there for most of them
    assert not (tmp_path / LOCK_NAME).exists()  # the holder released it cleanly


def _churn(run_dir, start, rounds, outcomes):
    """Take and release the lock as fast as possible, checking nobody else is inside while holding it."""
    start.wait()
    held = overlaps = 0
    for _ in range(rounds):
        try:
            lock = RunLock(run_dir).acquire()
        except RunDirBusy:
            continue
        fd = _inside(run_dir)
        if fd is None:
            overlaps += 1
        else:
            held += 1
            time.sleep(0.001)
            _leave(run_dir, fd)
        lock.release()
    outcomes.put((held, overlaps))


def test_holders_releasing_under_churn_never_overlap(tmp_path):
    """A release unlinks the file while others may have it open: the unlink-then-lock race."""
    start, outcomes = FORK.Event(), FORK.Queue()
    procs = [FORK.Process(target=_churn, args=(str(tmp_path), start, 200, outcomes)) for _ in range(RACERS)]
    for p in procs:
        p.start()
    start.set()
    results = [outcomes.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    held, overlaps = sum(h for h, _ in results), sum(o for _, o in results)
    assert overlaps == 0 and held >= RACERS, (held, overlaps)


def test_a_taken_over_lock_is_said_and_a_busy_one_named(tmp_path, caplog):
    dead = _killed_holder(tmp_path)
    with RunLock(tmp_path) as mine:
        assert mine.held
        record = json.loads((tmp_path / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["host"] == os.uname().nodename
        with pytest.raises(RunDirBusy, match=rf"being written by pid {os.getpid()} on this host since "):
            RunLock(tmp_path).acquire()  # a second open file in this same process is refused too
    assert f"left by pid {dead} on {os.uname().nodename}" in caplog.text and "that process is gone" in caplog.text


def test_a_record_from_another_host_is_refused_only_off_a_local_filesystem(tmp_path, monkeypatch):
    other = json.dumps({"pid": 7, "host": "elsewhere", "since": "then"})
    (tmp_path / LOCK_NAME).write_text(other)
    assert filesystem_type(tmp_path) in lock_module.LOCAL_FILESYSTEMS  # this machine's temporary folders
    with RunLock(tmp_path):  # a local filesystem: the kernel's flock is the whole truth, the record is stale
        pass
    assert filesystem_type(Path("/proc/self")) == "proc"
    (tmp_path / LOCK_NAME).write_text(other)
    # no network filesystem can be mounted here: the decision is made as on NFS, whose flock may stop at the host
    monkeypatch.setattr(lock_module, "_local", lambda path: False)
    with pytest.raises(RunDirBusy, match=r"lock from host elsewhere \(pid 7, since then\).*delete"):
        RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["host"] == "elsewhere"  # left as it was


def test_an_unwritable_directory_is_one_line(tmp_path):
    with pytest.raises(RunDirUnwritable, match="cannot write there"):
        RunLock(tmp_path / "missing").acquire()
