"""What this machine can give the notebook runner: the cores this process may use and the memory
free for it, each the smaller of what the operating system and the container's cgroup allow.

`make figures` runs `auto_jobs(n)` notebooks side by side, each kernel with one torch thread.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

KERNEL_MEMORY = 2 * 2**30
"""The memory one notebook's kernel is given room for when the runner counts how many fit: the
largest process of `make figures` with the fast profile peaked at 1.5 GiB resident (GNU time's
maximum over the runner and its kernels), with room for the page cache beside it."""

CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup CPU quota (v2's
    cpu.max or v1's cfs quota), rounded up; at least 1."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = None
    if (line := _read(CGROUP / "cpu.max")) is not None:
        limit, period = (line.split() + ["100000"])[:2]
        if limit != "max":
            quota = int(limit) / int(period)
    else:
        limit = _read(CGROUP / "cpu" / "cpu.cfs_quota_us")
        period = _read(CGROUP / "cpu" / "cpu.cfs_period_us")
        if limit and period and int(limit) > 0:
            quota = int(limit) / int(period)
    if quota is not None:
        count = min(count, math.ceil(quota))
    return max(1, count or 1)


def free_memory() -> int | None:
    """Bytes this process could still allocate: /proc/meminfo's MemAvailable, capped by the
    room left under a cgroup memory limit (v2's memory.max, v1's limit_in_bytes); None where
    neither can be read."""
    free = None
    for line in (_read(MEMINFO) or "").splitlines():
        if line.startswith("MemAvailable:"):
            free = int(line.split()[1]) * 1024
    for limit_file, usage_file in ((CGROUP / "memory.max", CGROUP / "memory.current"),
                                   (CGROUP / "memory" / "memory.limit_in_bytes",
                                    CGROUP / "memory" / "memory.usage_in_bytes")):
        limit, usage = _read(limit_file), _read(usage_file)
        if limit and usage and limit.isdigit() and usage.isdigit() and int(limit) < 2**60:
            room = max(0, int(limit) - int(usage))
            free = room if free is None else min(free, room)
            break
    return free


def auto_jobs(notebooks: int) -> int:
    """How many notebooks to run side by side: one a core, no more than the free memory holds
    at KERNEL_MEMORY each, no more than there are notebooks; at least 1."""
    jobs = cores()
    memory = free_memory()
    if memory is not None:
        jobs = min(jobs, memory // KERNEL_MEMORY)
    return max(1, min(jobs, notebooks))


def jobs_option(value: str) -> str | int:
    """argparse type of --jobs: 'auto' or a positive count."""
    if value == "auto":
        return value
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"--jobs takes 'auto' or a count of 1 or more, not "
                                         f"{value!r}")
    return count


def avx2_limits() -> dict[str, str]:
    """The environment under which torch, MKL, oneDNN and numpy run the code they run on an AVX2
    machine (most laptops), on a machine with AVX-512: ATen's own kernels, MKL's and oneDNN's
    matrix products, and numpy's SIMD loops (the dispatch targets above AVX2 that this machine
    has, so that numpy is never asked to disable one it lacks)."""
    limits = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
              "ONEDNN_MAX_CPU_ISA": "AVX2"}
    dispatch, features = _numpy_cpu()
    above = [name for name in dispatch
             if (name.startswith("AVX512") or name == "X86_V4") and features.get(name)]
    if above:
        limits["NPY_DISABLE_CPU_FEATURES"] = " ".join(above)
    return limits


def simd_level() -> str:
    """numpy's widest SIMD dispatch in this process (after NPY_DISABLE_CPU_FEATURES)."""
    _, features = _numpy_cpu()
    for name, label in (("AVX512_ICL", "AVX-512 (Icelake)"), ("X86_V4", "AVX-512"),
                        ("X86_V3", "AVX2"), ("X86_V2", "SSE4.2")):
        if features.get(name):
            return label
    return "baseline"


def _numpy_cpu() -> tuple[list[str], dict[str, bool]]:
    """numpy's dispatch targets and the CPU features it found (and left enabled)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy before 2.0
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return __cpu_dispatch__, __cpu_features__
