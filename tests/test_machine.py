"""The notebook runner's count of cores and free memory, on cgroup files written here."""

import argparse

import pytest

from sera.teaching import machine


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A cgroup folder and a /proc/meminfo of this test's own, on a process with 8 cores."""
    monkeypatch.setattr(machine, "CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(machine, "MEMINFO", tmp_path / "meminfo")
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: set(range(8)),
                        raising=False)
    (tmp_path / "cgroup").mkdir()

    def write(name, text):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return write


GIB = 2**30


@pytest.mark.parametrize("files, expected", [
    ({}, 8),                                                    # no cgroup: the affinity
    ({"cgroup/cpu.max": "max 100000\n"}, 8),                    # v2, no quota
    ({"cgroup/cpu.max": "150000 100000\n"}, 2),                 # v2, 1.5 cores rounds up
    ({"cgroup/cpu.max": "300000 100000\n"}, 3),
    ({"cgroup/cpu.max": "5000000 100000\n"}, 8),                # a quota above the affinity
    ({"cgroup/cpu/cpu.cfs_quota_us": "-1", "cgroup/cpu/cpu.cfs_period_us": "100000"}, 8),
    ({"cgroup/cpu/cpu.cfs_quota_us": "200000", "cgroup/cpu/cpu.cfs_period_us": "100000"}, 2),
    ({"cgroup/cpu/cpu.cfs_quota_us": "50000", "cgroup/cpu/cpu.cfs_period_us": "100000"}, 1),
])
def test_cores_are_the_affinity_capped_by_the_cgroup_quota(fake, files, expected):
    for name, text in files.items():
        fake(name, text)
    assert machine.cores() == expected


def test_free_memory_is_the_smaller_of_the_system_and_the_cgroup(fake):
    assert machine.free_memory() is None  # nothing to read
    fake("meminfo", "MemTotal:       33554432 kB\nMemAvailable:   16777216 kB\n")
    assert machine.free_memory() == 16 * GIB
    fake("cgroup/memory.max", "max\n")
    fake("cgroup/memory.current", str(GIB))
    assert machine.free_memory() == 16 * GIB  # no limit
    fake("cgroup/memory.max", str(5 * GIB))
    assert machine.free_memory() == 4 * GIB  # 5 GiB limit, 1 GiB used
    fake("cgroup/memory.current", str(6 * GIB))
    assert machine.free_memory() == 0


def test_free_memory_reads_a_v1_cgroup_and_ignores_its_no_limit_value(fake):
    fake("meminfo", "MemAvailable:   8388608 kB\n")
    fake("cgroup/memory/memory.limit_in_bytes", "9223372036854771712")  # v1's "no limit"
    fake("cgroup/memory/memory.usage_in_bytes", str(GIB))
    assert machine.free_memory() == 8 * GIB
    fake("cgroup/memory/memory.limit_in_bytes", str(3 * GIB))
    assert machine.free_memory() == 2 * GIB


@pytest.mark.parametrize("available_gib, notebooks, expected", [
    (64, 8, 8),                       # one a core
    (64, 3, 3),                       # no more than there are notebooks
    (7, 8, 7 * GIB // machine.KERNEL_MEMORY),   # memory holds fewer than the cores
    (0, 8, 1),                        # always at least one
])
def test_auto_jobs_fit_the_cores_the_memory_and_the_notebooks(fake, available_gib, notebooks,
                                                              expected):
    fake("meminfo", f"MemAvailable:   {available_gib * 2**20} kB\n")
    assert machine.auto_jobs(notebooks) == expected


def test_jobs_option_takes_auto_or_a_positive_count():
    assert machine.jobs_option("auto") == "auto" and machine.jobs_option("3") == 3
    for bad in ("0", "-2", "two", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="--jobs takes 'auto'"):
            machine.jobs_option(bad)
