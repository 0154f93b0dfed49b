"""grpo_lab.allocator: a freed large tensor's memory stays in the process for the next one (no fresh pages)."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FREED = """
import sys, torch
from grpo_lab.allocator import reuse_freed_memory
if sys.argv[1] == "reuse":
    assert reuse_freed_memory()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
x = torch.ones(64 << 18)  # 64 MiB, over glibc's default mmap threshold
held = rss()
del x
print((held - rss()) >> 20)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
@pytest.mark.parametrize(("mode", "returned"), [("reuse", False), ("default", True)])
def test_a_freed_large_tensor_stays_in_the_process_only_when_asked(mode, returned):
    out = subprocess.run([sys.executable, "-c", FREED, mode], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    given_back_mib = int(out.stdout.split()[-1])
    assert (given_back_mib >= 60) == returned, given_back_mib
