"""One writer per run directory: `<run>/.lock`, held with flock(2) for as long as the writer runs.

    with RunLock(run_dir):          # refuses a second writer in one line, naming it
        ...

The kernel grants an flock to one open file at a time and drops it when its holder exits, however it exits
(kill -9 included), so no process ever judges whether a lock is stale: a lock nobody holds is free. The file
also holds the holder's {pid, host, since}, written once the lock is held, for the message a second writer
gets. A clean release unlinks the file before unlocking it, and a taker checks that the file it locked is
still the one at the path (else it locked a file just released and unlinked, and tries again).

Filesystems: on a local one (ext4, xfs, btrfs, tmpfs, overlay, ...) flock is the kernel's own and covers
every process that can open the file, containers included. On a network filesystem flock may stop at the
host (NFS mounted with local_lock=flock, Lustre with localflock) or be refused (Lustre without -o flock,
NFS without a lock daemon); there a holder record left by another host is refused as a possible live
writer (delete `.lock` by hand once that job is gone), and a filesystem that refuses locks is named in the
error. Two hosts starting on one directory at the same instant on a host-local flock are not detected.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from grpo_lab.errors import InputError

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
# filesystems whose locks are granted by the kernel that serves every open of the file
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "zfs", "f2fs",
                               "jfs", "reiserfs", "bcachefs", "vfat", "exfat", "ntfs3", "hfsplus", "apfs"})
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)  # what flock says where there are none


class RunDirBusy(InputError):
    """Another live process writes this run directory."""


class RunDirUnwritable(InputError):
    """The run directory cannot be written (read-only, no permission, or no locks on its filesystem)."""


class LockNotAFile(InputError):
    """`.lock` is a symlink or no plain file: never followed or written (it would overwrite what it points at)."""


class RunLock:
    """`<run_dir>/.lock` under flock(2): one holder at a time, released by the kernel if the holder dies."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": _now()}
        for _ in range(100):  # only a stream of holders each releasing within our few system calls repeats this
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunDirBusy(self._busy_message()) from None
            except OSError as e:
                os.close(fd)
                if e.errno in NO_LOCKS:
                    raise RunDirUnwritable(
                        f"{self.path.parent}: its filesystem ({filesystem_type(self.path) or 'unknown'}) gives no file "
                        f"locks ({e.strerror}); put out_dir on a local disk, or mount with locks (NFS with a lock "
                        "daemon or v4, Lustre -o flock)") from None
                raise
            if not self._still_at_path(fd):  # locked a file its holder released and unlinked: lock the new one
                os.close(fd)
                continue
            previous = _read_record(fd)
            if previous is not None and previous.get("host") != me["host"] and not _local(self.path):
                os.close(fd)
                raise RunDirBusy(f"{self.path.parent} holds a lock from host {previous.get('host')} (pid "
                                 f"{previous.get('pid')}, since {previous.get('since')}); on a network filesystem its "
                                 f"holder may still run there: delete {self.path} once that job is gone")
            if previous is not None or _has_bytes(fd):
                log.warning("taking over the lock of %s left by %s (that process is gone)", self.path.parent,
                            _describe(previous))
            data = json.dumps(me).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            self._fd = fd
            return self
        raise RunDirBusy(f"{self.path}: could not take the lock (other processes keep taking and releasing it)")

    def _open(self) -> int:
        if self.path.is_symlink():  # never followed: the lock's record would truncate the file it points at
            raise LockNotAFile(f"{self.path}: a symlink (to {os.readlink(self.path)}); the lock is a plain file a run "
                               "writes, so nothing was changed: remove the link, or use another out_dir")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:  # made a symlink since the check above
                raise LockNotAFile(f"{self.path}: a symlink; the lock is a plain file a run writes, so nothing was "
                                   "changed: remove the link, or use another out_dir") from None
            why = "a read-only filesystem" if e.errno == errno.EROFS else e.strerror  # as the preflight says it
            raise RunDirUnwritable(f"{self.path.parent}: cannot write there ({why}); use a writable "
                                   "out_dir") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device named .lock: a run writes a plain file
            os.close(fd)
            raise LockNotAFile(f"{self.path}: not a plain file; the lock is a plain file a run writes, so nothing was "
                               "changed: remove it, or use another out_dir")
        return fd

    def _still_at_path(self, fd: int) -> bool:
        try:
            at_path = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (mine.st_dev, mine.st_ino) == (at_path.st_dev, at_path.st_ino)

    def _busy_message(self) -> str:
        holder = None
        for _ in range(5):  # the holder writes its record just after taking the lock: give it a moment
            try:
                with open(self.path, "rb") as f:
                    holder = _parse(f.read(4096))
            except OSError:
                pass
            if holder is not None:
                break
            time.sleep(0.05)
        if holder is None:
            who = "another process (its record is not readable yet)"
        else:
            host = "this host" if holder["host"] == socket.gethostname() else f"host {holder['host']}"
            who = f"pid {holder['pid']} on {host} since {holder['since']}"
        return f"{self.path.parent} is being written by {who}; wait for it, or use another out_dir"

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self._still_at_path(fd):
                self.path.unlink()  # before unlocking: a waiter that then locks this file sees it gone
        except OSError:  # a read-only or vanished directory: the file stays, unlocked, and is taken over
            pass
        os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _parse(data: bytes) -> dict | None:
    """A holder record {pid, host, since}; None for anything else (empty, half written, junk)."""
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or isinstance(record.get("pid"), bool):
        return None
    return {"pid": record["pid"], "host": str(record.get("host")), "since": str(record.get("since"))}


def _read_record(fd: int) -> dict | None:
    return _parse(os.pread(fd, 4096, 0))


def _has_bytes(fd: int) -> bool:
    return os.fstat(fd).st_size > 0


def _describe(holder: dict | None) -> str:
    if holder is None:
        return "a process whose record is not readable"
    return f"pid {holder['pid']} on {holder['host']} since {holder['since']}"


def _local(path: Path) -> bool:
    return filesystem_type(path) in LOCAL_FILESYSTEMS


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem holding `path` ("ext4", "nfs4", ...), from /proc/self/mountinfo; None where
    it cannot be told (no /proc)."""
    target = os.path.realpath(path.parent if not path.exists() else path)
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                mount_point = left.split()[4].replace("\\040", " ")
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, kind = mount_point, right.split()[0]
    except (OSError, IndexError):
        return None
    return kind


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
