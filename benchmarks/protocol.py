"""One way to time and label every speed figure (issue 40): what the machine is, and how busy it was.

A figure is only comparable with the machine it was measured on: its CPU model, the vector units torch can use
(AVX2, AVX-512, AVX-512 BF16, AMX: bf16 autocast is 1.6-1.9x faster than fp32 with bf16 units and far slower
without), the threads torch ran with, and the load the run shared the machine with. Every benchmark prints
`machine()` once and `Load` over its timed part; RESULTS.md writes both beside the figure.

The timing itself stays in each benchmark (each knows what a block of its work is); they share the rule:
interleaved blocks after one warm-up block each, a ratio per block, the median with the min-max (`spread`), in
wall time (what a user waits for) and in this process's CPU time."""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Sequence

ISA = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")  # the units that change what torch's CPU kernels can do


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC 9B14"), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                        platform.processor() or platform.machine())
    except OSError:
        return platform.processor() or platform.machine()


def cpu_flags() -> str:
    """Which of `ISA` this CPU has, in that order ("avx2 avx512f avx512_bf16"), or a phrase saying none."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        pass
    return " ".join(f for f in ISA if f in flags) or "none of " + "/".join(ISA)


def machine(threads: int | None = None) -> str:
    """The machine in one line: model, CPUs, ISA flags, torch and its threads, the load average now."""
    import torch

    one, five, fifteen = os.getloadavg()
    return (f"machine: {cpu_model()}, {os.cpu_count()} CPUs, flags {cpu_flags()}; torch {torch.__version__}, "
            f"{threads if threads is not None else torch.get_num_threads()} thread(s); load average {one:.1f} "
            f"{five:.1f} {fifteen:.1f} (1, 5, 15 min)")


class Load:
    """The highest 1-minute load average seen at the start, at each `look()` and at the end of a timed part: a
    figure measured beside another busy process says so."""

    def __init__(self) -> None:
        self.highest = os.getloadavg()[0]

    def __enter__(self) -> Load:
        return self

    def __exit__(self, *exc) -> None:
        self.look()

    def look(self) -> None:
        self.highest = max(self.highest, os.getloadavg()[0])

    def __str__(self) -> str:
        return f"highest 1-min load average while timed: {self.highest:.1f} on {os.cpu_count()} CPUs"


def spread(values: Sequence[float], digits: int = 2) -> str:
    """"median (min-max)" of per-block figures."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"
