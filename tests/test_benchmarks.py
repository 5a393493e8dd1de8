"""The speed benchmarks that docs/speed.md names run as written, at small sizes: each prints its
table (what it measured is printed, never asserted: a busy machine must not fail a test)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_allocation_benchmark_prints_its_simd_code_and_a_row_per_size():
    out = _run("benchmarks/allocation_speed.py", "--sizes", "100", "1000", "--repeats", "1")
    lines = out.splitlines()
    assert lines[0].startswith("numpy ") and "SIMD dispatch" in lines[0]
    for size in ("100", "1,000"):
        rows = [line for line in lines if line.split()[:1] == [size]]
        assert len(rows) == 4, (size, rows)  # two p distributions x two n_max
        assert all(row.endswith(("ok", "OVER LIMIT")) for row in rows)
    assert "one-shot allocators" in out and "water level" in out


def test_the_slider_benchmark_prints_the_tracks_cost_for_an_explorer():
    out = _run("benchmarks/slider_frames.py", "kappa")
    header, row = out.splitlines()[-2:]
    assert header.split()[:3] == ["explorer", "stops", "ms/stop"]
    name, stops, per_stop, whole, _, frame, png, ratio = row.split()
    assert name == "kappa" and int(stops) == 99 + 63  # p's stops and N's
    assert abs(float(per_stop) * int(stops) / 1000 - float(whole)) < 0.1 * float(whole) + 0.1
    assert abs(float(frame) / float(png) - float(ratio)) < 0.02 + 0.05 * float(ratio)


def test_the_core_speed_benchmark_prints_a_step_time_per_model_and_a_speed():
    out = _run("benchmarks/core_speed.py", "--steps", "2")
    lines = out.splitlines()
    assert lines[0].startswith("one torch thread; torch ") and "dispatch" in lines[0]
    rows = [line for line in lines if "ms a step" in line]
    assert [row.split()[0] for row in rows] == ["maze", "digits"]
    for row in rows:  # steps/s is the inverse of the step time, as printed
        ms, rate = float(row.split("ms a step")[0].split()[-1]), float(row.split()[-2])
        assert abs(ms * rate - 1000) < 0.05 * 1000, row
    assert lines[-1].startswith("per-core speed: ")
