"""The run directory's lock under real races (fixtures/races.py): 60 processes start on one directory at once,
on a fresh directory, on a lock left by a holder killed with SIGKILL, and on garbage lock files; exactly one of
them holds it each time. Under churn (holders taking and releasing it in a loop) no two ever hold it together."""

import json
import os
from pathlib import Path

import pytest

from fixtures.races import HOLDS, LEFT_BEHIND, RACERS, churn, killed_holder, prepare, race
from grpo_lab.run import lock as lock_module
from grpo_lab.run.lock import LOCK_NAME, RunDirBusy, RunDirUnwritable, RunLock, filesystem_type


@pytest.mark.parametrize("left", list(LEFT_BEHIND))
def test_sixty_racing_starts_give_one_holder(tmp_path, left):
    dead = prepare(tmp_path, left)
    if dead is not None:
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == dead  # left behind, unlocked
    results = race(tmp_path)
    kinds = [k for k, _ in results]
    assert kinds.count("held") == 1 and kinds.count("busy") == RACERS - 1, kinds
    (holder,) = [v for k, v in results if k == "held"]
    refusals = {v for k, v in results if k == "busy"}
    assert all("\n" not in r and "is being written by" in r for r in refusals)
    assert any(f"pid {holder} on this host" in r for r in refusals)  # its record was there for most of them
    assert not (tmp_path / LOCK_NAME).exists()  # the holder released it cleanly


def test_holders_releasing_under_churn_never_overlap(tmp_path):
    """A release unlinks the file while others may have it open: the unlink-then-lock race."""
    held, overlaps, tries = churn(tmp_path)
    assert overlaps == 0 and held == HOLDS * RACERS, (held, overlaps)
    assert tries > held  # the racers were refused while others held it: the lock was contended


def test_a_taken_over_lock_is_said_and_a_busy_one_named(tmp_path, caplog):
    dead = killed_holder(tmp_path)
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
