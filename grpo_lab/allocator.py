"""Large CPU tensors reuse freed memory instead of fresh pages from the kernel.

glibc's malloc serves a request over its mmap threshold (32 MB at most by default) with fresh pages and returns them
to the kernel when freed, so every large tensor a generation call makes pays its page faults again: a 512-row
evaluation's logits (100 MB a decoded token at SmolLM2's vocabulary), the KV cache copied when rows finish (48 MB a
layer). Copying 48 MB into fresh memory took 33 ms, into memory already touched 7-10 ms (this VM, 1 thread), and a
SmolLM2 evaluation of 576 rows ran 1.25x faster with the thresholds below (benchmarks/RESULTS.md). Raising the mmap
threshold serves such tensors from the heap, and raising the trim threshold keeps what they free in the process for
the next tensor of their size. The numbers computed are the same; the process keeps the memory of its peak instead of
returning it between steps. Linux with glibc only; elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD = 1 << 30  # a request below 1 GiB comes from the heap
TRIM_THRESHOLD = 2**31 - 1  # freed memory at the heap's top stays in the process (an int's largest)


@functools.cache
def reuse_freed_memory() -> bool:
    """Set glibc's thresholds once per process; True where they were set."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
