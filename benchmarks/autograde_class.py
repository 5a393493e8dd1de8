"""A class's autograde, timed: the exercises released with nbgrader, N students' submissions (the
solutions, with a typical mistake or a stub in some), and one `nbgrader autograde` call per
assignment with the student code in the course's sandbox, as an instructor runs it.

Usage: python benchmarks/autograde_class.py [--students 10] [--sandbox bubblewrap|none]
                                             [--slow 0] [--hungry 0]

`--slow K` makes K of the students' kappa correct but 9 s a call (under the per-call limit), and
`--hungry K` makes K of them correct but holding 1.5 GiB a call and starting a child that asks
for as much: the per-notebook budget and the memory limits bound what they cost. Prints the
sandbox used and its limits, the wall time of each autograde call and per student and notebook,
and the scores' spread (a check that the class was graded, not skipped). Run it alone: anything
else on the cores is in the numbers.
"""

import argparse
import copy
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from sera.teaching import release, sandbox

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = sorted((ROOT / "notebooks" / "exercises").glob("[0-9][0-9]_*.ipynb"))
MISTAKES = {  # a wrong answer a student may hand in, by solution cell
    "kappa": "def kappa(p, n):\n    return 1 - (1 - p) ** n",
    "pass_at_k": "def pass_at_k(n, c, k):\n    return 1 - (1 - c / n) ** k",
    "multiplicity_weights": "def multiplicity_weights(counts, n0):\n    return counts / n0",
}
_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", re.M)


SLOW = ("import math\ndef kappa(p, n):\n    __import__('time').sleep(9)\n"
        "    return -math.expm1((n - 1) * math.log1p(-p))")
HUNGRY = ("import math\nimport numpy as np\ndef kappa(p, n):\n"
          "    held = np.ones(3 << 26)\n"
          "    if __import__('os').fork() == 0:\n"
          "        try:\n            np.ones(3 << 26).sum()\n        finally:\n"
          "            __import__('os')._exit(0)\n"
          "    return -math.expm1((n - 1) * math.log1p(-p)) + 0 * held[0]")


def submissions(students: int, slow: int = 0, hungry: int = 0) -> dict[str, dict[str, str]]:
    """Each student's solution cells that differ from the reference: every third a mistake,
    every fifth a stub left as released (None); the last `slow` and the `hungry` before them
    correct but slow, or correct but memory-hungry."""
    names = list(MISTAKES)
    chosen = {f"student-{i:02d}": (None if i % 5 == 4 else
                                   {names[i % 3]: MISTAKES[names[i % 3]]} if i % 3 == 0 else {})
              for i in range(students)}
    keys = list(chosen)
    for key in keys[students - slow:]:
        chosen[key] = {"kappa": SLOW}
    for key in keys[students - slow - hungry:students - slow]:
        chosen[key] = {"kappa": HUNGRY}
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=10)
    parser.add_argument("--sandbox", choices=("bubblewrap", "none"), default="bubblewrap")
    parser.add_argument("--slow", type=int, default=0)
    parser.add_argument("--hungry", type=int, default=0)
    args = parser.parse_args()
    chosen = submissions(args.students, args.slow, args.hungry)
    with tempfile.TemporaryDirectory(prefix="sera-class-") as folder:
        course = Path(folder) / "course"
        release.generate_assignments({"exercises": EXERCISES}, course)
        if args.sandbox == "none":
            config = course / "nbgrader_config.py"
            config.write_text(config.read_text() + "c.SandboxedExecute.sandbox = 'none'\n")
        reference = {c.metadata["nbgrader"]["grade_id"]: _MARKERS.sub("", c.source)
                     for path in EXERCISES for c in nbformat.read(path, as_version=4).cells
                     if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}
        for student, changed in chosen.items():
            folder = course / "submitted" / student / "exercises"
            folder.mkdir(parents=True)
            for path in EXERCISES:
                nb = nbformat.read(course / "release" / "exercises" / path.name, as_version=4)
                nb = copy.deepcopy(nb)
                for cell in nb.cells:
                    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                    if changed is not None and grade_id in reference:
                        cell.source = changed.get(grade_id, reference[grade_id])
                nbformat.write(nb, folder / path.name)
        start = time.perf_counter()
        log = release.nbgrader(course, "autograde", "exercises", "--create", "--force")
        seconds = time.perf_counter() - start
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            scores = {s: gradebook.find_submission("exercises", s).score for s in chosen}
    sandboxes = sorted(set(re.findall(r"in a sandbox: (\w+)", log)))
    graded = args.students * len(EXERCISES)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; python "
          f"{platform.python_version()}; sandbox: {', '.join(sandboxes)}")
    print(f"autograde of {args.students} students x {len(EXERCISES)} notebooks: {seconds:.1f} s "
          f"({seconds / args.students:.2f} s a student, {seconds / graded:.2f} s a notebook)")
    print(f"limits: {sandbox.CALL_SECONDS:g} s a call, {sandbox.NOTEBOOK_SECONDS:g} s a notebook, "
          f"{sandbox.MEMORY_BYTES >> 20} MiB of address space a process, "
          f"{sandbox.PROCESSES} processes, {sandbox.NOTEBOOK_MEMORY_BYTES >> 20} MiB a notebook "
          f"where a cgroup can be made, files of {sandbox.FILE_BYTES >> 20} MiB")
    print(f"scores (automatic points): {sorted(scores.values())}")
    special = sorted(chosen)[args.students - args.slow - args.hungry:]
    if special:
        print("slow and hungry students: " + ", ".join(f"{s} {scores[s]:g}" for s in special))
    return 0 if len(sandboxes) == 1 and sandboxes[0] == args.sandbox else 1


if __name__ == "__main__":
    sys.exit(main())
