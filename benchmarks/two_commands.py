"""The README's two commands timed in a fresh clone, as a new user runs them, and where the
time goes.

Usage: .venv/bin/python benchmarks/two_commands.py [--keep] [--avx2] [--targets figures test]

Clones the committed HEAD into a temporary folder, runs `make figures` then `make test` there
(each sets up .venv/ on first use, so the first command pays for the set-up), and prints each
command's wall time against its goal (figures 600 s, test 1,200 s on two idle cores), torch's
CPU capability and numpy's SIMD dispatch in the clone (ATEN_CPU_CAPABILITY=avx2 and
NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL" time both libraries' AVX2 code on an AVX-512
machine), the notebooks' own times from `make figures`, the stages of `make test` (the
time from one recipe line to the next), the test files by time and the slowest tests, and for
each command the machine's busy and idle CPU
time (from /proc/stat): the busy core-seconds over the core count is the least wall time any
schedule of that work could take, so it tells a cut of work from a better packing; then the
tracked files the commands changed (none, where every figure is reproducible), and one core's
speed on the same work (benchmarks/core_speed.py, in the clone), so that the times can be read on
another machine. --avx2 sets all four limits of `sera.teaching.machine.avx2_limits()` (torch's
ATen, MKL, oneDNN and numpy run their AVX2 code, as on most laptops). Run it alone: anything else
on the cores is in the numbers.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"figures": 600, "test": 1200}
STAGES = {  # the first words of the recipe lines that open each stage of `make test`
    "ruff": ".venv/bin/ruff check",
    "suite (extra environments installing alongside)": "mkdir -p build; room=",
    "vision environment": "python3 -m venv .venv-vision",
    "vision tests": "SERA_REQUIRE_VISION=1",
    "gpu-check resnet": "OMP_NUM_THREADS=2 .venv-vision",
    "vllm environment": "python3 -m venv .venv-vllm",
    "vllm tests": "SERA_REQUIRE_VLLM=1",
    "scale environment": "python3 -m venv .venv-scale",
    "verl and TRL tests": "SERA_REQUIRE_INTEGRATIONS=1",
    "gpu-check trl, maze": "OMP_NUM_THREADS=2 .venv-scale",
    # the browser tests start with the extra environments' tests and their log is printed when
    # both are done: this stage is the time the browser tests ran on after the extras' last one
    "browser (after the extras)": "--- build/browser.log",
}


def timed(command: list[str], cwd: Path, log: Path, env: dict) -> tuple[int, float, list]:
    """Run command, writing its output to log; return its exit status, wall time and the
    (seconds since start, line) of every output line."""
    start = time.perf_counter()
    lines = []
    with open(log, "w") as out, subprocess.Popen(command, cwd=cwd, env=env, text=True,
                                                 stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT) as proc:
        for line in proc.stdout:
            out.write(line)
            lines.append((time.perf_counter() - start, line.rstrip("\n")))
    return proc.returncode, time.perf_counter() - start, lines


def cpu_seconds() -> tuple[float, float] | None:
    """(busy, idle) CPU seconds of the whole machine since boot, all cores together, from
    /proc/stat's first line (iowait counts as idle); None where there is no /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, first[1:9])
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq + steal) / hz, (idle + iowait) / hz


def stages(lines, total: float) -> list[tuple[str, float]]:
    """Seconds from each stage's opening line to the next stage's (or the end)."""
    starts = []
    for seconds, line in lines:
        for name, prefix in STAGES.items():
            if line.startswith(prefix) and name not in dict(starts):
                starts.append((name, seconds))
    starts.sort(key=lambda item: item[1])
    ends = [s for _, s in starts[1:]] + [total]
    return [(name, end - begin) for (name, begin), end in zip(starts, ends, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=["figures", "test"])
    parser.add_argument("--keep", action="store_true", help="keep the clone")
    parser.add_argument("--avx2", action="store_true",
                        help="run torch, MKL, oneDNN and numpy's AVX2 code on an AVX-512 machine")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    limits = {}
    if args.avx2:
        sys.path.insert(0, str(root))
        from sera.teaching import machine

        limits = machine.avx2_limits()
    folder = Path(tempfile.mkdtemp(prefix="two-commands."))
    subprocess.run(["git", "clone", "-q", str(root), str(folder / "repo")], check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder / "repo",
                          capture_output=True, text=True).stdout.strip()
    print(f"fresh clone of {head} in {folder / 'repo'}; {os.cpu_count()} cores")
    env = {**os.environ, **limits, "PYTEST_ADDOPTS": "--durations=0 --durations-min=0.5"}
    print(", ".join(f"{name}={env.get(name, '(unset)')}" for name in (
        "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA",
        "NPY_DISABLE_CPU_FEATURES")))
    failed = False
    for target in args.targets:
        before = cpu_seconds()
        status, wall, lines = timed(["make", target], folder / "repo", folder / f"{target}.log",
                                    env)
        after = cpu_seconds()
        goal = GOALS.get(target)
        verdict = "" if goal is None else (" within" if wall <= goal else " OVER") + \
            f" its goal of {goal} s"
        print(f"make {target}: {'ok' if status == 0 else 'FAILED'} in {wall:.0f} s{verdict} "
              f"({folder / f'{target}.log'})")
        failed |= status != 0
        if before is not None and after is not None:
            busy, idle = after[0] - before[0], after[1] - before[1]
            cores = os.cpu_count()
            print(f"    CPU: {busy:.0f} core-s busy, {idle:.0f} idle; on {cores} cores the busy "
                  f"work alone takes at least {busy / cores:.0f} s")
        capability = subprocess.run(
            [".venv/bin/python", "-c", "import torch, numpy; from sera.teaching.machine import "
             "simd_level; print(torch.backends.cpu.get_cpu_capability(), torch.__version__, "
             "simd_level(), numpy.__version__)"],
            cwd=folder / "repo", env=env, capture_output=True, text=True).stdout.strip()
        print(f"    torch's CPU capability and version, numpy's SIMD dispatch and version in the "
              f"clone: {capability or '?'}")
        if target == "figures":
            for _, line in lines:
                if match := re.match(r"(\S+\.ipynb) done in ([\d.]+) s", line):
                    print(f"    {match.group(1):40s} {float(match.group(2)):7.1f} s")
        if target == "test":
            for name, seconds in stages(lines, wall):
                print(f"    {name:48s} {seconds:7.0f} s")
            timed_tests = [re.match(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)", line)
                           for _, line in lines]
            timed_tests = [(float(m.group(1)), m.group(2)) for m in timed_tests if m]
            by_file: dict[str, float] = {}
            for seconds, test in timed_tests:
                name = test.split("::")[0]
                by_file[name] = by_file.get(name, 0.0) + seconds
            print("    test files by time (calls, setups and teardowns of 0.5 s or more):")
            for name, seconds in sorted(by_file.items(), key=lambda x: -x[1])[:20]:
                print(f"      {seconds:7.0f} s  {name}")
            print("    slowest tests:")
            for seconds, test in sorted(timed_tests, reverse=True)[:20]:
                print(f"      {seconds:7.1f} s  {test}")
    if (folder / "repo" / ".venv" / "bin" / "python").exists():
        speed = subprocess.run([".venv/bin/python", "benchmarks/core_speed.py"],
                               cwd=folder / "repo", env=env, capture_output=True, text=True)
        print("one core on the same work, timed alone after the commands:")
        for line in (speed.stdout + speed.stderr).strip().splitlines():
            print(f"    {line}")
    left = subprocess.run(["git", "status", "--porcelain"], cwd=folder / "repo",
                          capture_output=True, text=True).stdout.splitlines()
    print(f"files the commands left changed in the clone: {len(left)}")
    for line in left[:10]:
        print(f"    {line}")
    failed |= bool(left)  # a command that rewrites a tracked file is not reproducible
    if not args.keep:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
