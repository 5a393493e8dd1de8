"""The course releases from one source (`make course`): a student release without solutions and
an instructor release with them, nbgrader-style.

    python -m sera.teaching.release build/course

The exercise notebooks (notebooks/exercises/) and the study notebooks' answer keys to their
review questions mark what only the instructor sees, the way nbgrader does: in a code cell, the
lines between `### BEGIN SOLUTION` and `### END SOLUTION` become `raise NotImplementedError` in
the student copy, and the lines between `### BEGIN HIDDEN TESTS` and `### END HIDDEN TESTS` go;
a markdown cell's worked answer between the same solution markers becomes "YOUR ANSWER HERE".
build/course/student/ gets the released exercises, the study notebooks 01-08 (without outputs),
the guide, the notation page and the key equations; build/course/instructor/ the same with
solutions, worked answers and answer keys.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

import nbformat

from sera.teaching.notebook_files import HIDDEN, ROOT, guide_for, notebooks, strip

_SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION[ \t]*\n?",
                       re.M | re.S)


def student_notebook(nb):
    """The notebook as the student gets it, in place: every cell through student_cell."""
    nb.cells = [student_cell(cell) for cell in nb.cells]
    return nb


def student_cell(cell):
    """A cell as the student gets it (a copy): solutions, hidden tests and a quoted cell's
    template (which may hold an answer key) removed."""
    cell = nbformat.from_dict(dict(cell))
    cell.metadata = {k: v for k, v in cell.metadata.items() if k != "sera"}
    if cell.cell_type == "code":
        cell.source = _SOLUTION.sub(lambda m: f"{m.group(1)}raise NotImplementedError  # your "
                                              f"code here\n", cell.source)
        cell.source = HIDDEN.sub("", cell.source).rstrip("\n")
    elif cell.cell_type == "markdown":
        cell.source = _SOLUTION.sub("YOUR ANSWER HERE\n", cell.source).rstrip("\n")
    return cell


def solution_bodies(path: Path) -> list[str]:
    """The text between each pair of solution markers in a notebook (what a student must not
    see), for the tests."""
    return solution_bodies_of("\n".join(c.source for c in nbformat.read(path, as_version=4).cells))


def solution_bodies_of(text: str) -> list[str]:
    """The text between each pair of solution or hidden-test markers in text."""
    text += "\n"
    bodies = [m.group(0) for m in _SOLUTION.finditer(text)] + \
             [m.group(0) for m in HIDDEN.finditer(text)]
    return ["\n".join(line for line in body.splitlines()[1:-1]) for body in bodies]


def solutions(path: Path) -> dict:
    """The reference solutions: the exercise notebook's solution cells run in a fresh namespace
    (names -> functions), for the tests."""
    namespace: dict = {"__name__": "solutions"}
    exec("import math\nimport numpy as np", namespace)  # noqa: S102 - the course's own source
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            exec(cell.source, namespace)  # noqa: S102
    return {k: v for k, v in namespace.items() if getattr(v, "__module__", "") == "solutions"}


def generate_assignments(folders: dict[str, list[Path]], course: Path) -> dict[Path, Path]:
    """nbgrader's student copies: each assignment's notebooks through `nbgrader
    generate_assignment` in the course directory `course` (its gradebook included), which removes
    solutions and hidden tests, marks locked cells read-only and records the checksums autograde
    compares. Returns source notebook -> released notebook.

    A rebuild replaces only each assignment's source/ and release/ folders: what the course
    collected and graded (submitted/, autograded/, feedback/, gradebook.db) stays as it is."""
    course.mkdir(parents=True, exist_ok=True)
    from sera.teaching.autograde import config_lines

    (course / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.root = {str(course.resolve())!r}\n"
        + config_lines())
    released = {}
    for assignment, paths in folders.items():
        for kind in ("source", "release"):
            shutil.rmtree(course / kind / assignment, ignore_errors=True)
        (course / "source" / assignment).mkdir(parents=True)
        for path in paths:
            _copy_with_release_paths(path, course / "source" / assignment / path.name)
        nbgrader(course, "generate_assignment", assignment, "--force")
        released.update({path: course / "release" / assignment / path.name for path in paths})
    return released


# In the repository a notebook writes its figures to the repository's figures/ folder; in a
# release, to the release's own figures/ folder (one level up from the exercises).
_FIGURES_DIR = re.compile(r'^figures_dir = "(?:\.\./)+figures"', re.M)


def _copy_with_release_paths(path: Path, dest: Path) -> None:
    """Copy a notebook into a release, its figures_dir pointing inside the release."""
    nb = nbformat.read(path, as_version=4)
    inside = "../figures" if path.parent.name == "exercises" else "figures"
    for cell in nb.cells:
        # a quoted cell's template (sera.teaching.quotes) is the repository's, and an answer
        # key's template holds the answers: no release carries it
        cell.metadata.pop("sera", None)
        if cell.cell_type == "code":
            cell.source = _FIGURES_DIR.sub(f'figures_dir = "{inside}"', cell.source)
    nbformat.write(nb, dest)


def nbgrader(course: Path, *args: str) -> str:
    """Run an nbgrader command in the course directory and return its output (RuntimeError with
    it if the command fails); nbgrader runs alembic, which sits beside this interpreter."""
    import os
    import subprocess

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{done.stdout[-2000:]}"
                           f"{done.stderr[-2000:]}")
    return done.stdout + done.stderr


def release(output: Path, source: Path | None = None) -> dict[str, list[Path]]:
    """Write output/student/ (through nbgrader generate_assignment, whose course directory with
    its gradebook stays in output/nbgrader/ for autograding) and output/instructor/; return the
    files of each."""
    source = source or ROOT / "notebooks"
    studies, exercises = notebooks(source), notebooks(source / "exercises")
    student = generate_assignments({"notebooks": studies, "exercises": exercises},
                                   output / "nbgrader")
    written: dict[str, list[Path]] = {}
    for kind in ("student", "instructor"):
        target = output / kind
        if target.exists():
            shutil.rmtree(target)
        (target / "exercises").mkdir(parents=True)
        files = []
        for path in [*studies, *exercises]:
            dest = target / path.relative_to(source)
            if kind == "student":
                shutil.copy(student[path], dest)  # as nbgrader wrote it: locks kept
            else:
                _copy_with_release_paths(path, dest)
                strip(dest)
            files.append(dest)
        (target / "README.md").write_text(guide_for((source / "README.md").read_text(), kind))
        pages = ["NOTATION.md", "KEY_EQUATIONS.md"] + (["LECTURE_PLAN.md"]
                                                       if kind == "instructor" else [])
        for name in pages:
            shutil.copy(source / name, target / name)
        files += [target / name for name in ("README.md", *pages)]
        written[kind] = files
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path, nargs="?", default=ROOT / "build" / "course")
    args = parser.parse_args(argv)
    written = release(args.output)
    for kind, files in written.items():
        print(f"{kind}: {len(files)} files in {(args.output / kind).resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
