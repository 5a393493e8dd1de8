"""The course checks and the grading: a reference solution passes both, a stub is "not done yet"
and gets no points, a call of sera's own function (under any name) is no solution, each typical
mistake gets its own hint rather than a traceback and no points, every message is printed once,
and no hint holds an expected value or a formula. The grader is each check cell's hidden region,
run here on its own (nothing from the kernel but the student's function) as nbgrader runs it.
The releases: the student one holds no solution, no hidden test and no worked answer (exercises
and the study notebooks' review questions alike), the instructor one every one."""

import math
import re
import types
from pathlib import Path
from types import SimpleNamespace

import nbformat
import numpy as np
import pytest

import sera
from sera.teaching import autograde, course, notebook_files, release
from sera.teaching.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = sorted((ROOT / "notebooks" / "exercises").glob("[0-9][0-9]_*.ipynb"))
STUDY = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ANSWER_KEY = "## Answers to the review questions"
# The reference solutions are the exercise notebooks' solution cells.
solutions = SimpleNamespace(**{k: v for path in EXERCISES
                               for k, v in release.solutions(path).items()})


def stub(*args):
    raise NotImplementedError


@pytest.fixture(autouse=True)
def _fresh_cases_from_a_seed(monkeypatch):
    """The checks' fresh random cases, drawn from a fixed seed here: same test, same cases."""
    from sera.teaching import feedback

    monkeypatch.setattr(feedback, "_FRESH", np.random.default_rng(0))


def _hidden(name: str) -> str:
    """The hidden test region of the check cell for `name` in the exercise notebooks."""
    for path in EXERCISES:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == f"check-{name}":
                return cell.source.split("### BEGIN HIDDEN TESTS\n")[1] \
                    .split("### END HIDDEN TESTS")[0]
    raise KeyError(name)


def graded(name: str, source: str) -> str:
    """What autograde says of the check cell for `name` when a student's cell holds `source`:
    "" for full points, else the message the student reads."""
    return graded_cells(name, ["import math\nimport numpy as np", source])


def graded_cells(name: str, sources: list[str]) -> str:
    """graded() for a notebook whose editable cells are `sources`, as autograde runs them."""
    code, refused = autograde.definitions(sources)
    with Sandbox() as box:
        return autograde.run_cells(box, code, refused) or \
            autograde.grade_cell(_hidden(name), box, [name], refused) or ""


def grade(name: str, fn) -> str:
    """What the hidden grader of `name` says of fn, run with nothing but fn in its namespace: ""
    for full points, else why it gives none (its failed assertion, or the error fn raised)."""
    try:
        with np.errstate(divide="ignore", invalid="ignore"):
            exec(_hidden(name), {"np": np, "math": math, name: fn})  # noqa: S102
    except AssertionError as exc:
        return str(exc) or "an assertion failed"
    except Exception as exc:  # noqa: BLE001 - a student's error costs the cell's points
        return f"{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.parametrize("name", sorted(course.CHECKS))
def test_reference_solutions_pass_and_stubs_are_not_done(name, capsys):
    feedback = course.CHECKS[name](getattr(solutions, name))
    assert feedback.passed and feedback.done, feedback.message
    assert grade(name, getattr(solutions, name)) == ""
    feedback = course.CHECKS[name](stub)
    assert not feedback.done and "not done yet" in feedback.message
    assert grade(name, stub).startswith("NotImplementedError")
    out = capsys.readouterr().out
    assert "Traceback" not in out and out.count("PASS ") == 1 and out.count("not done") == 1


# Routes to the package's own implementation, as a student's cell would write them: the grade is
# 0 for each, with a message that says why. Run as autograde runs them: the definitions in the
# sandbox (where sera is not importable), the hidden region in this process.
BYPASSES = [
    ("kappa", "import sera\ndef kappa(p, n):\n    return sera.kappa(p, n)", "imported from sera"),
    ("kappa", "from sera.fidelity import kappa as K\ndef kappa(p, n):\n    return K(p, n)",
     "imported from sera"),
    ("kappa", "def kappa(p, n):\n    from sera.fidelity import kappa as K\n    return K(p, n)",
     "imports sera"),
    ("pass_at_k", "def pass_at_k(n, c, k):\n    import importlib\n"
                  "    return importlib.import_module('se' + 'ra').pass_at_k(n, c, k)",
     "imports importlib"),
    ("pass_at_k", "def pass_at_k(n, c, k):\n    return __import__('se' + 'ra').pass_at_k(n, c, k)",
     "sera package, which is not there"),
    ("multiplicity_weights", "def multiplicity_weights(counts, n0):\n"
                             "    s = __import__('importlib').import_module('sera')\n"
                             "    return s.multiplicity_weights(counts, n0)",
     "sera package, which is not there"),
    ("kappa", "def kappa(p, n):\n    run = __import__('subprocess').run\n"
              "    out = run(['python', '-c', f'import sera; print(sera.kappa({p}, {n}))'],\n"
              "              capture_output=True, text=True).stdout\n    return float(out)",
     "raised ValueError"),
]


@pytest.mark.parametrize("name, source, why", BYPASSES)
def test_calling_sera_is_not_a_solution(name, source, why):
    assert why in graded(name, source)


def test_the_grade_cannot_be_switched_on_from_the_kernel(monkeypatch):
    # The routes that earned full marks before the grade moved into the hidden regions: patching
    # the feedback, or switching the call watch off from inside the function.
    passing = course.Feedback(True, True, "correct.")
    for name in course.CHECKS:
        monkeypatch.setattr(course, f"check_{name}", lambda fn: passing)
        monkeypatch.setitem(course.CHECKS, name, lambda fn: passing)
        assert grade(name, stub).startswith("NotImplementedError")
    # nothing in a hidden region reads the package or the feedback
    for name in course.CHECKS:
        hidden = _hidden(name)
        assert "feedback" not in hidden and "sera." not in hidden and "import sera" not in hidden


def _student(source: str):
    """The function a student's cell defines, with numpy as np and math imported as in the
    exercise notebooks."""
    namespace = {"np": np, "math": math}
    exec(source, namespace)
    return [v for v in namespace.values() if isinstance(v, types.FunctionType)][-1]


def _waterline_with(h, budget, n_min):
    """Two prompts' continuous counts from hazards h (a student's, right or wrong)."""
    counts = 1 + (budget - 2) / (1 / h[0] + 1 / h[1]) / h
    low = int(np.argmin(counts))
    if counts[low] < n_min:
        counts[low], counts[1 - low] = n_min, budget - n_min
    return counts


def _rounded(rank, guard=True):
    """A rounding that floors, then adds one rollout to the prompts first in rank(p, floor,
    level), none past n_max unless guard is off."""
    def rounding(p, continuous, level, budget, n_max):
        counts = np.floor(continuous + 1e-9).astype(int)
        key = np.where(guard & (counts >= n_max), np.inf, rank(p, counts, level))
        counts[np.argsort(key, kind="stable")[:budget - counts.sum()]] += 1
        return counts
    return rounding


# The exact rule as notebook 02 and KEY_EQUATIONS.md word it: raise the lowest kappa, one rollout
# at a time. From N_min it is the exact max-min; from the floors it differs on one batch of the
# check's 60, where a prompt's continuous count sits at N_max and the exact max-min gives it less.
WATER_FILLING = """
def rounding(p, continuous, level, budget, n_max):
    counts = {start}
    while counts.sum() < budget:
        kappa = 1 - (1 - p) ** (counts - 1)
        kappa[counts >= n_max] = np.inf
        counts[np.argmin(kappa)] += 1
    return counts
"""

# The exact max-min written with heapq: right, but outside the import rule.
HEAP = """
import heapq

def rounding(p, continuous, level, budget, n_max):
    counts = np.full(p.size, 2)
    heap = [(-(1 - q) ** 1, i) for i, q in enumerate(p)]  # -(1 - kappa(p, 2))
    heapq.heapify(heap)
    while counts.sum() < budget:
        _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < n_max:
            heapq.heappush(heap, (-(1 - p[i]) ** (counts[i] - 1), i))
    return counts
"""

# Within floor and ceiling and on budget, but ranked by the fractional parts.
LARGEST_REMAINDERS = """
def rounding(p, continuous, level, budget, n_max):
    counts = np.floor(continuous + 1e-9).astype(int)
    counts[np.argsort(counts - continuous, kind="stable")[:budget - counts.sum()]] += 1
    return counts
"""

# Codex's numerically stable product (Chen et al. 2021): right to rounding.
PRODUCT = """
def pass_at_k(n, c, k):
    if n - c < k:
        return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))
"""


def _kappa_after(p, f):
    return 1 - (1 - p) ** f  # kappa(p, floor + 1)


def _kappa_now(p, f):
    return 1 - (1 - p) ** (f - 1)  # kappa(p, floor)


def _weights(per_prompt):
    """Weights from per_prompt(counts with rollouts, n0), 0 for a prompt without rollouts."""
    def weights(counts, n0):
        out = np.zeros(len(counts))
        out[counts > 0] = per_prompt(counts[counts > 0], n0)
        return out
    return weights


# One row per answer: the check, the student's function (a lambda or a cell's source), what it is
# (right to ~1e-6, a typical mistake the check names, or another answer the check can only call
# different) and a fragment of the message it gets. The hidden grader gives the right ones full
# points and every other one none.
HINTS = [
    ("kappa", lambda p, n: 1 - (1 - p) ** n, "named", "uncentered"),
    ("kappa", lambda p, n: (1 - p) ** (n - 1), "named", "is lost"),
    ("kappa", lambda p, n: 1 - p ** (n - 1), "named", "failure probability"),
    ("kappa", lambda p, n: 1 - (1 - p) ** (n - 2), "named", "Off by one"),
    ("kappa", lambda p, n: 1 - (1 - p) ** (n - 1) + 0.01, "other", "by hand"),
    ("kappa", lambda p, n: 1 - (1 - p) ** (n - 1), "named", "loses its digits"),
    ("kappa", lambda p, n: -np.expm1((n - 1) * np.log1p(-p)) * (1 + 1e-7), "right", "correct"),
    ("centered_advantages", lambda r: r / r.mean() if r.mean() else r * 0, "named", "uncentered"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.std() if r.std() else r * 0, "named",
     "GRPO"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.std(), "named", "GRPO"),
    ("centered_advantages", lambda r: (r - r.mean()) / (r.std() + 1e-6), "named", "GRPO"),
    ("centered_advantages", lambda r: (r - r.mean()) / (r.std(ddof=1) + 1e-6), "named", "GRPO"),
    ("centered_advantages", lambda r: r - r.mean(), "named", "left them unscaled"),
    ("centered_advantages", lambda r: r / r.sum() - 1 / r.size if r.sum() else r * 0, "named",
     "number of successes"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.sum() if r.sum() else r * 0, "named",
     "number of successes"),
    ("centered_advantages", lambda r: r / r.sum() - 1 if r.sum() else r * 0, "named",
     "number of successes"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.size, "named", "group's size"),
    ("centered_advantages", lambda r: (r.mean() - r) / r.mean() if r.mean() else r * 0, "named",
     "signs are flipped"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.mean(), "named", "mean 0"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.mean() if r.mean() else r + 1, "named",
     "carries no signal"),
    ("centered_advantages", lambda r: 2 * r - 1, "other", "your advantages differ"),
    ("centered_advantages", lambda r: r.mean(), "other", "one advantage per response"),
    ("centered_advantages", lambda r: (r - r.mean()) / (r.mean() + 1e-8), "right", "correct"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: np.array(
        [1 + (m - 2) * (1 / p1) / (1 / p1 + 1 / p2), 1 + (m - 2) * (1 / p2) / (1 / p1 + 1 / p2)]),
     "named", "1/p"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: solutions.two_prompt_waterline(p1, p2, m, 0),
     "named", "below N_min"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: np.array([m / 2, m / 2 + 1]), "named", "add up"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: _waterline_with(-np.log([p1, p2]), m, lo),
     "named", "chance of failing"),
    ("rounding", solutions.rounding, "right", "below the exact integer max-min in 32."),
    ("rounding", WATER_FILLING.format(start="np.full(p.size, 2)"), "right", "correct"),
    ("rounding", WATER_FILLING.format(start="np.floor(continuous + 1e-9).astype(int)"), "named",
     "started from the floors"),
    ("rounding", _rounded(lambda p, f, lv: (_kappa_after(p, f) - lv) ** 2, guard=False), "named",
     "N_max = 16 got one more"),
    ("rounding", lambda p, c, lv, m, hi: np.floor(c), "named", "budget is"),
    ("rounding", lambda p, c, lv, m, hi: np.r_[np.floor(c[:-1]), m - np.floor(c[:-1]).sum()],
     "named", "rounded down or up"),
    ("rounding", LARGEST_REMAINDERS, "named", "largest remainders"),
    ("rounding", _rounded(lambda p, f, lv: (_kappa_now(p, f) - lv) ** 2), "named", "before"),
    ("rounding", _rounded(lambda p, f, lv: -(_kappa_after(p, f) - lv) ** 2), "named", "farthest"),
    ("rounding", _rounded(lambda p, f, lv: np.arange(p.size)), "other", "other prompts"),
    ("rounding", lambda p, c, lv, m, hi: c, "other", "whole number"),
    ("multiplicity_weights", lambda counts, n0: counts / n0, "named", "Upside down"),
    ("multiplicity_weights", _weights(lambda c, n0: 1 / c), "named", "sum to 1"),
    ("multiplicity_weights", lambda counts, n0: n0 / counts, "named", "weight 0"),
    ("multiplicity_weights", _weights(lambda c, n0: c.mean() / c), "named", "mean count"),
    ("multiplicity_weights", lambda counts, n0: _weights(lambda c, _: counts.mean() / c)(
        counts, n0), "named", "mean count"),
    ("multiplicity_weights", _weights(lambda c, n0: (1 / c) / (1 / c).sum()), "named",
     "rest of the batch"),
    ("multiplicity_weights", _weights(lambda c, n0: c.size * n0 / c / (n0 / c).sum()), "named",
     "rest of the batch"),
    ("multiplicity_weights", lambda counts, n0: np.where(counts > 0, n0 / np.maximum(counts, 1),
                                                         n0), "named", "no responses to weigh"),
    ("multiplicity_weights", _weights(lambda c, n0: n0 / c ** 2), "other", "total weight"),
    ("multiplicity_weights", _weights(lambda c, n0: n0 / c * (1 + 1e-8)), "right", "correct"),
    ("pass_at_k", lambda n, c, k: math.comb(n - c, k) / math.comb(n, k), "named",
     "all K samples miss"),
    ("pass_at_k", lambda n, c, k: 1 - (1 - c / n) ** k, "named", "biased"),
    ("pass_at_k", lambda n, c, k: 1 - math.comb(c, k) / math.comb(n, k), "named",
     "subtracted the chance that all K samples are correct"),
    ("pass_at_k", lambda n, c, k: math.comb(c, k) / math.comb(n, k), "named", "at least one"),
    ("pass_at_k", lambda n, c, k: c / n, "named", "does not change with K"),
    ("pass_at_k", lambda n, c, k: 1 - math.comb(n - c, k - 1) / math.comb(n, k - 1), "other",
     "is off"),
    ("pass_at_k", PRODUCT, "right", "correct"),
]


@pytest.mark.parametrize("name, student, kind, hint", HINTS,
                         ids=[f"{row[0]}: {row[3]}" for row in HINTS])
def test_each_answer_gets_the_hint_for_what_it_is_and_the_grade(name, student, kind, hint,
                                                                 capsys):
    fn = _student(student) if isinstance(student, str) else student
    with np.errstate(divide="ignore", invalid="ignore"):
        feedback = course.CHECKS[name](fn)
        out = capsys.readouterr().out
    assert feedback.done and hint in feedback.message, feedback.message
    assert feedback.passed == (kind == "right"), feedback.message
    assert feedback.named == (kind == "named"), feedback.message
    assert "Traceback" not in out and out.count(feedback.message) == 1
    # no expected values, no formula
    for secret in ("expected", "xpected", "expm1", "log1p", "C(n-c", "1 - (1-p)^(N-1)", "0.36"):
        assert secret not in feedback.message, feedback.message
    # the hidden grader: full points for a right answer, none for any other
    assert (grade(name, fn) == "") == (kind == "right"), grade(name, fn)


def test_no_check_has_a_switch_or_docstring_that_gives_the_answer():
    import inspect

    for name, check in course.CHECKS.items():
        assert list(inspect.signature(check).parameters) == ["fn"], name
        for secret in ("expm1", "log1p", "(1-p)^", "/ mean", "n0 / N", "C(n-c", "closest to"):
            assert secret not in (check.__doc__ or ""), (name, secret)


def test_an_error_in_student_code_is_a_message():
    feedback = course.check_pass_at_k(lambda n, c, k: [][0])
    assert not feedback.passed and "raised IndexError" in feedback.message


def test_a_feedback_is_shown_once_in_a_notebook():
    # The check prints; the returned Feedback ending a cell displays nothing more.
    assert course.Feedback(True, True, "x")._ipython_display_() is None
    assert not hasattr(course.Feedback, "_repr_markdown_")


def test_the_student_release_holds_no_solution(built):
    root, written = built
    student = "\n".join(path.read_text() for path in written["student"])
    bodies = [body for path in EXERCISES for body in release.solution_bodies(path)]
    assert len(bodies) >= 6
    for body in bodies:
        for line in body.splitlines():
            # Every line of a solution that says anything (not a bare `return counts`).
            if len(line.strip()) > 20:
                assert line.strip() not in student, line
    notebooks = "\n".join(p.read_text() for p in written["student"] if p.suffix == ".ipynb")
    assert "course_solutions" not in student and "BEGIN SOLUTION" not in notebooks
    assert notebooks.count("raise NotImplementedError") == len(course.CHECKS)
    # Each check cell has a hidden test for grading (nbgrader's markers): instructor copy only.
    assert "HIDDEN TESTS" not in notebooks and "_watch" not in notebooks
    instructor_notebooks = "\n".join(p.read_text() for p in written["instructor"]
                                      if p.suffix == ".ipynb")
    assert instructor_notebooks.count("### BEGIN HIDDEN TESTS") == len(course.CHECKS)
    # The instructor release has every solution, the student one the same files otherwise.
    instructor = "\n".join(_text(path) for path in written["instructor"])
    assert all(body.strip().splitlines()[-1].strip() in instructor for body in bodies)
    assert [p.relative_to(root / "student") for p in written["student"]] == \
        [p.relative_to(root / "instructor") for p in written["instructor"]
         if p.name != "LECTURE_PLAN.md"]  # the instructor's own page


def test_each_release_gets_the_guide_its_reader_needs(built):
    # the student guide has no recipe, no grading, no switch that reveals expected values and
    # no maintainer section, and says what the student's copies are; the instructor's has the
    # grading recipe and not the student's block
    root, written = built
    student, instructor = ((root / kind / "README.md").read_text()
                           for kind in ("student", "instructor"))
    for text in (student, instructor):
        assert "<!--" not in text and "Keeping the repository clean" not in text
        assert "## The path" in text and "## Glossary of the methods" in text
    for hidden in ("instructor's copies", "nbgrader autograde", "JupyterHub"):
        assert hidden not in student and hidden in instructor, hidden
    assert "answers=True" not in student + instructor
    assert "Your copies:" in student and "Your copies:" not in instructor
    # the student release has no Makefile and no .venv: its guide names neither
    assert not re.search(r"`make \w+|\.venv/", student), re.findall(r".*make \w+.*", student)
    parameters = "\n".join(p.read_text() for p in written["student"] if p.suffix == ".ipynb")
    assert "answers = False" not in parameters and "answers=answers" not in parameters
    with pytest.raises(ValueError, match="reader"):
        notebook_files.guide_for(student, "maintainer")


def test_released_cells_keep_what_is_not_a_solution():
    import nbformat
    code = nbformat.v4.new_code_cell("def f(x):\n    # doubles\n    ### BEGIN SOLUTION\n"
                                     "    return 2 * x\n    ### END SOLUTION\n\n\ncheck(f)\n"
                                     "### BEGIN HIDDEN TESTS\nassert f(1) == 2\n"
                                     "### END HIDDEN TESTS")
    assert release.student_cell(code).source == ("def f(x):\n    # doubles\n    raise "
                                                 "NotImplementedError  # your code here\n\n\n"
                                                 "check(f)")
    text = nbformat.v4.new_markdown_cell("**Answer.**\n### BEGIN SOLUTION\nIt is 2.\n"
                                         "### END SOLUTION")
    assert release.student_cell(text).source == "**Answer.**\nYOUR ANSWER HERE"


def _numbered(text: str) -> list[int]:
    """The numbers of a markdown list's numbered items, in order."""
    return [int(n) for n in re.findall(r"^(\d+)\. ", text, re.M)]


@pytest.mark.parametrize("path", STUDY, ids=lambda p: p.stem)
def test_every_study_notebook_ends_with_an_answer_key_to_its_review_questions(path):
    # After the summary and review questions, one markdown cell answers each question under the
    # same number, the whole answer between solution markers, with the nbgrader metadata of a
    # manually graded answer worth a point per question; only the self-check quiz comes after.
    cells = [c for c in nbformat.read(path, as_version=4).cells
             if "quiz" not in c.metadata.get("tags", [])]
    key, closing = cells[-1], cells[-2]
    assert key.cell_type == "markdown" and key.source.startswith(ANSWER_KEY), \
        f"{path.name} has no answer key after its review questions"
    assert "## Review questions" in closing.source
    questions = _numbered(closing.source.split("## Review questions", 1)[1])
    assert questions == list(range(1, len(questions) + 1)) and questions, questions
    assert release.student_cell(key).source == f"{ANSWER_KEY}\n\nYOUR ANSWER HERE"
    (body,) = release.solution_bodies_of(key.source)
    assert _numbered(body) == questions, path.name
    answers = re.split(r"^\d+\. ", body, flags=re.M)[1:]
    assert all(len(answer.strip()) > 80 for answer in answers), path.name
    assert key.metadata.get("nbgrader") == {
        "grade": True, "solution": True, "locked": False, "points": len(questions),
        "grade_id": f"review-answers-{path.name[:2]}", "schema_version": 3, "task": False}


def _text(path: Path) -> str:
    """What a released file shows: a notebook's cell sources (the file stores them escaped), or
    the page itself."""
    if path.suffix == ".ipynb":
        return "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
    return path.read_text()


def test_the_student_release_holds_no_review_answer_and_the_instructor_one_each(built):
    root, written = built
    keyed = [path for path in STUDY if release.solution_bodies(path)]
    assert len(keyed) >= 7
    lines = [line.strip() for path in keyed for body in release.solution_bodies(path)
             for line in body.splitlines() if line.strip()]
    student = "\n".join(_text(path) for path in written["student"])
    instructor = "\n".join(_text(path) for path in written["instructor"])
    for line in lines:
        assert line not in student, line[:80]
        assert line in instructor, line[:80]
    for path in keyed:  # the answer key: the last cell before the self-check quiz
        source = nbformat.read(path, as_version=4).cells[-2]
        given = nbformat.read(root / "student" / path.name, as_version=4).cells[-2]
        kept = nbformat.read(root / "instructor" / path.name, as_version=4).cells[-2]
        assert given.source == f"{ANSWER_KEY}\n\nYOUR ANSWER HERE", path.name
        assert kept.source == source.source, path.name
        # nbgrader finds the graded cell in both releases (the student's also carries the
        # checksum nbgrader recorded, which tells an unanswered cell at autograde).
        assert kept.metadata["nbgrader"] == source.metadata["nbgrader"]
        assert {k: v for k, v in given.metadata["nbgrader"].items()
                if k not in ("checksum", "cell_type")} == source.metadata["nbgrader"]
        assert given.metadata["nbgrader"]["checksum"]


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_every_graded_cell_grades_in_its_hidden_region(path):
    # nbgrader gives a test cell its points when it runs without error and none when it raises:
    # each check cell is locked, shows its check and ends with a hidden region that asserts.
    nb = nbformat.read(path, as_version=4)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
              and c.cell_type == "code"]
    assert len(graded) == sum("sera.teaching.course.check_" in c.source for c in nb.cells
                              if c.cell_type == "code")
    for cell in graded:
        meta = cell.metadata["nbgrader"]
        assert meta["locked"] and not meta["solution"] and meta["points"] > 0
        visible, hidden = cell.source.split("### BEGIN HIDDEN TESTS\n")
        assert visible.startswith("feedback = sera.teaching.course.check_"), cell.source
        assert hidden.rstrip().endswith("### END HIDDEN TESTS") and "assert " in hidden
        # the grader gives the hidden region numpy, math and the student's functions only
        assert "import" not in hidden and "sera" not in hidden
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]
    assert len(ids) == len(set(ids))


def _without_markers(source: str) -> str:
    """A solution cell as the instructor wrote it, without nbgrader's marker lines."""
    return "\n".join(line for line in source.splitlines()
                     if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)


def _routes(course: Path) -> dict[str, dict[str, str]]:
    """Every route found to a grade without the work, as a student's cells (grade_id -> source):
    each one's check-kappa must score 0. They import through __import__, which the allow-list
    does not read, so that each meets the sandbox itself."""
    nb_path = f"{course}/source/ex/{EXERCISES[0].name}"
    db = f"{course}/gradebook.db"
    stub = "    return 0.0\n"
    return {
        # read the instructor's notebook from the course folder and run its solution
        "walk-up": {"kappa": (
            "def kappa(p, n):\n    json = __import__('json')\n"
            f"    cells = json.load(open({nb_path!r}))['cells']\n    space = {{}}\n"
            "    exec([''.join(c['source']) for c in cells if 'def kappa' in ''.join("
            "c['source'])][0], space)\n    return space['kappa'](p, n)\n")},
        # the gradebook: extra credit for oneself, and the hidden tests rewritten for everyone
        "extra-credit": {"kappa": (
            f"__import__('sqlite3').connect({db!r}).execute('UPDATE grade SET extra_credit = 99')"
            f"\ndef kappa(p, n):\n    con = __import__('sqlite3').connect({db!r})\n"
            "    con.execute('UPDATE grade SET extra_credit = 99')\n    con.commit()\n" + stub)},
        "rewrite-tests": {"kappa": (
            f"def kappa(p, n):\n    con = __import__('sqlite3').connect({db!r})\n"
            "    con.execute(\"UPDATE source_cell SET source = 'pass'\")\n    con.commit()\n"
            + stub)},
        # the grader's own tools, reached through the frame
        "frame-globals": {"kappa": (
            "def kappa(p, n):\n    frame = __import__('sys')._getframe(0)\n"
            "    frame.f_globals['zip'] = lambda *a, **k: iter(())\n"
            "    frame.f_back and frame.f_back.f_globals.update(zip=lambda *a, **k: iter(()))\n"
            + stub)},
        "linecache": {"kappa": (
            "def kappa(p, n):\n    sys, linecache = __import__('sys'), __import__('linecache')\n"
            "    frame = sys._getframe(1)\n"
            "    lines = linecache.getlines(frame.f_code.co_filename)\n"
            "    line = [x for x in lines if 'w = ' in x][0]\n"
            "    return eval(line.split('=', 1)[1], {'math': __import__('math'), 'p': p, "
            "'n': n})\n")},
        "builtins-setattr": {"kappa": (
            "def kappa(p, n):\n    frame = __import__('sys')._getframe(0)\n"
            "    frame.f_builtins['setattr'](__import__('math'), 'isclose', "
            "lambda *a, **k: True)\n" + stub)},
        # the package's own function, in a child process or re-filed from its bytecode
        "child-process": {"kappa": (
            "def kappa(p, n):\n    run = __import__('subprocess').run\n"
            "    out = run([__import__('sys').executable, '-c', "
            "f'import sera; print(float(sera.kappa({p}, {n})))'],\n"
            "              capture_output=True, text=True).stdout\n    return float(out)\n")},
        "bytecode": {"kappa": (
            "def kappa(p, n):\n    f = __import__('sera').kappa\n"
            "    g = __import__('types').FunctionType(getattr(f, '__code__').replace(), "
            "f.__globals__)\n    return g(p, n)\n")},
        # an input transformer that empties every later cell (the hidden tests' included)
        "input-transformer": {"kappa": (
            "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n"
            "def kappa(p, n):\n" + stub)},
        # the hidden inputs carried out in an error's text
        "leak-inputs": {"kappa": "def kappa(p, n):\n    raise ValueError(repr((p, n)))\n"},
        # the hidden inputs in a "no such function" answer forged on the answer stream
        "forged-missing": {"kappa": (
            "def kappa(p, n):\n    __import__('os').write(3, ('{\"error\": \"Missing\", "
            "\"message\": \"inputs ' + repr((p, n)) + '\"}\\n').encode())\n" + stub)},
        # an answer nested past what a JSON parser takes, written on the answer stream
        "deep-answer": {"kappa": (
            "def kappa(p, n):\n    __import__('os').write(3, b'[' * 100000 + b']' * 100000"
            " + b'\\n')\n" + stub)},
        # a root grader's Python made writable, and a .pth planted for its next command
        "remount": {"kappa": (
            f"def kappa(p, n):\n    site = {SITE!r}\n"
            "    __import__('subprocess').run(['mount', '-o', 'remount,bind,rw', site])\n"
            "    open(site + '/zz_sera_planted.pth', 'w').write('import os')\n" + stub)},
    }


SITE = str(Path(np.__file__).parents[1])
"""The grader's site-packages, which the sandbox shows read-only."""
SHADOWS = {"centered_advantages": ("def centered_advantages(r):\n    return [0.0] * len(r)\n"
                                   "def all(*a):\n    return True\n")}
"""A builtin the hidden tests call, replaced by the submission (with a zero stub)."""


@pytest.mark.slow
def test_nbgrader_autogrades_in_the_sandbox_and_no_route_around_it_scores(tmp_path):
    # nbgrader itself: generate_assignment releases exercises 1 and 3, one autograde call grades
    # the class (the hidden tests in the grader, the students' definitions in bubblewrap). The
    # solution and two correct solutions that once lost points get every point; the stub, a named
    # mistake (its hint in the graded output), a call of sera and every route above none.
    # An untouched check cell raises no checksum alarm; an edited one does, and is graded as
    # released. The gradebook is as autograde left it: no extra credit, no test rewritten.
    import copy
    import time

    from nbgrader.api import Gradebook

    paths = [EXERCISES[0], EXERCISES[2]]
    course = tmp_path / "course"
    release.generate_assignments({"ex": paths}, course)
    released = {p.name: nbformat.read(course / "release" / "ex" / p.name, as_version=4)
                for p in paths}
    source = {c.metadata["nbgrader"]["grade_id"]: _without_markers(c.source)
              for p in paths for c in nbformat.read(p, as_version=4).cells
              if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"}
    routes = _routes(course)
    submissions = {
        "solution": {}, "stub": None,
        "uncentered": {"kappa": "def kappa(p, n):\n    return 1 - (1 - p) ** n"},
        "aliased": {"kappa": "from sera.fidelity import kappa as K\n"
                             "def kappa(p, n):\n    return K(p, n)"},
        # correct, and once scored 0: a warning on stderr, numpy's names over the builtins
        "where-warning": {"multiplicity_weights": (
            "def multiplicity_weights(counts, n0):\n    c = np.asarray(counts, dtype=float)\n"
            "    return np.where(c > 0, n0 / c, 0.0)")},
        "numpy-names": {"kappa": ("from numpy import expm1, log1p, sum, abs\n"
                                  "def kappa(p, n):\n    return -expm1((n - 1) * log1p(-p))")},
        "edited": {"check-kappa": "feedback = None"},
        "shadow-builtins": SHADOWS,
        **routes,
        "zz-after": {},  # graded after every route: the gradebook still grades
    }
    for student, cells in submissions.items():
        for name, nb in released.items():
            nb = copy.deepcopy(nb)
            for cell in nb.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                if cells is not None and grade_id in source:
                    cell.source = cells.get(grade_id, source[grade_id])
                if cells is not None and grade_id in cells and grade_id not in source:
                    cell.source = cells[grade_id]
            folder = course / "submitted" / student / "ex"
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, folder / name)
    start = time.perf_counter()
    log = release.nbgrader(course, "autograde", "ex", "--create", "--force")
    seconds = time.perf_counter() - start
    assert "in a sandbox: bubblewrap" in log
    parts = log.split("Creating/updating student with ID '")[1:]
    logs = {part.split("'", 1)[0]: part for part in parts}
    assert sorted(logs) == sorted(submissions)
    alarms = {s for s, log in logs.items() if "Attribute 'checksum'" in log}
    assert alarms == {"edited"}, {s: logs[s][-600:] for s in alarms}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {s: {g.name: g.score for nb in gradebook.find_submission("ex", s).notebooks
                      for g in nb.grades if g.name.startswith("check-")} for s in submissions}
        extra = [g.extra_credit for s in submissions
                 for nb in gradebook.find_submission("ex", s).notebooks for g in nb.grades]
        sources = [c.source for nb in gradebook.find_assignment("ex").notebooks
                   for c in nb.source_cells]
    full = {"check-kappa": 2.0, "check-centered_advantages": 2.0,
            "check-multiplicity_weights": 2.0, "check-pass_at_k": 2.0}
    kappa_zero = {**full, "check-kappa": 0.0}
    assert scores == {
        "solution": full, "stub": dict.fromkeys(full, 0.0), "uncentered": kappa_zero,
        "aliased": kappa_zero, "where-warning": full, "numpy-names": full, "edited": full,
        "shadow-builtins": {**full, "check-centered_advantages": 0.0},
        **dict.fromkeys(routes, kappa_zero), "zz-after": full}, scores
    assert not Path(SITE, "zz_sera_planted.pth").exists()
    assert not any(extra) and "pass" not in sources
    graded = {s: (course / "autograded" / s / "ex" / paths[0].name).read_text()
              for s in submissions}
    assert "uncentered" not in graded["uncentered"] or "off on ordinary" in graded["uncentered"]
    assert "imported from sera" in graded["aliased"]
    leak = nbformat.reads(graded["leak-inputs"], as_version=4)
    said = [o.get("evalue") for c in leak.cells if c.metadata.get("nbgrader", {}).get(
        "grade_id") == "check-kappa" for o in c.outputs]
    assert said == ["Your function raised ValueError on a hidden case."], said
    forged = nbformat.reads(graded["forged-missing"], as_version=4)
    said = [o.get("evalue") for c in forged.cells if c.metadata.get("nbgrader", {}).get(
        "grade_id") == "check-kappa" for o in c.outputs]
    assert said and all("no function kappa" in x and "inputs" not in x for x in said), said
    for student in routes:  # nothing of the hidden tests in any graded notebook
        assert "BEGIN HIDDEN" not in graded[student] and "expm1" not in graded[student]
    # The feedback students get: the failed kind of case and the likely mistake, and nothing of
    # the hidden region (its cases, its reference, its messages for other kinds; 1e-12 is in the
    # exercise's own text).
    release.nbgrader(course, "generate_feedback", "ex", "--force")
    html = (course / "feedback" / "uncentered" / "ex" / paths[0].with_suffix(".html").name)
    html = html.read_text()
    assert "off on ordinary cases" in html
    for line in _hidden("kappa").splitlines():  # its code lines (not the messages)
        code = line.split("#")[0].strip().rstrip(",)")
        if len(code) > 12 and not code.startswith(("assert", "for ", '"', "f\"")):
            assert code not in html, code
    for secret in ("3e-14", "expm1", "log1p", "BEGIN HIDDEN", "_ordinary"):
        assert secret not in html, secret
    print(f"autograde of {len(submissions)} students, 2 notebooks each: {seconds:.1f} s")
    # A rebuild of the release (make course) over the collected course keeps every grade and
    # every collected and graded file.
    kept = sorted(p.relative_to(course) for p in course.rglob("*")
                  if p.parts[len(course.parts)] in ("submitted", "autograded"))
    release.generate_assignments({"ex": paths}, course)
    assert sorted(p.relative_to(course) for p in course.rglob("*")
                  if p.parts[len(course.parts)] in ("submitted", "autograded")) == kept
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        again = {s: {g.name: g.score for nb in gradebook.find_submission("ex", s).notebooks
                     for g in nb.grades if g.name.startswith("check-")} for s in submissions}
    assert again == scores


def test_the_rounding_grader_accepts_the_packages_paper_and_exact_rules_on_its_batches():
    # An independent oracle for the hidden grader: the package's own rules, computed before the
    # grade on the batches the grader hands out, each pass; the floors alone fail.
    asked = []

    def record(p, continuous, level, budget, n_max):
        asked.append((p.copy(), budget, n_max))
        return solutions.rounding(p, continuous, level, budget, n_max)

    assert grade("rounding", record) == "" and len(asked) >= 60
    for rule in ("paper", "exact"):
        answers = {(p.tobytes(), budget): sera.allocate(p, budget, 2, n_max, rule=rule).counts
                   for p, budget, n_max in asked}
        given = grade("rounding", lambda p, c, lv, m, hi, known=answers: known[p.tobytes(), m])
        assert given == "", (rule, given)
    floors = grade("rounding", lambda p, c, lv, m, hi: np.floor(c + 1e-9).astype(int))
    assert "budget" in floors, floors


def test_a_released_notebook_writes_its_figures_inside_the_release(built):
    root, written = built
    for kind, files in written.items():
        for path in files:
            if path.suffix != ".ipynb":
                continue
            sources = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
            (folder,) = re.findall(r'^figures_dir = "(.*?)"', sources, re.M)
            assert (path.parent / folder).resolve() == (root / kind / "figures").resolve()


@pytest.mark.parametrize("path", [p for p in STUDY if p.name[:2] >= "04"], ids=lambda p: p.stem)
def test_04_to_08_end_with_an_open_ended_exercise_whose_rubric_only_the_instructor_sees(path):
    cells = nbformat.read(path, as_version=4).cells
    tagged = [i for i, c in enumerate(cells) if "open-ended" in c.metadata.get("tags", [])]
    assert len(tagged) == 2, path.name
    task, answer = (cells[i] for i in tagged)
    assert task.source.startswith("## Open-ended exercise") and len(task.source.split()) > 40
    assert answer.metadata["nbgrader"] == {
        "grade": True, "solution": True, "locked": False, "points": 3,
        "grade_id": f"open-ended-{path.name[:2]}", "schema_version": 3, "task": False}
    (rubric,) = release.solution_bodies_of(answer.source)
    assert rubric.startswith("**Rubric (3 points).**") and rubric.count("(1 point)") == 3
    assert "### BEGIN SOLUTION" not in release.student_cell(answer).source
    assert release.student_cell(answer).source.endswith("YOUR ANSWER HERE")
    # it comes after the notebook's material, before the review questions (and the quiz last)
    review = next(i for i, c in enumerate(cells) if "## Review questions" in c.source)
    assert tagged == [review - 2, review - 1]


def test_the_lecture_plan_names_sections_that_exist_and_only_the_instructor_gets_it(built):
    plan = (ROOT / "notebooks" / "LECTURE_PLAN.md").read_text()
    named = re.findall(r'(\d\d) › "([^"]+)"', plan)
    assert len(named) >= 20
    headings = {path.name[:2]: re.findall(r"^## (.*)$", "\n".join(
        c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"),
        re.M) for path in STUDY}
    for number, heading in named:
        assert heading in headings[number], (number, heading)
    assert {number for number, _ in named} == set(headings)  # every notebook has its time
    root, written = built
    assert (root / "instructor" / "LECTURE_PLAN.md") in written["instructor"]
    assert not (root / "student" / "LECTURE_PLAN.md").exists()


@pytest.mark.parametrize("name", sorted(course.CHECKS))
def test_a_lookup_table_of_the_checks_cases_is_not_told_it_is_right(name, monkeypatch, capsys):
    # A student who records the check's cases from a working function and answers from the
    # table: the check's fresh random cases (another draw each call) find it out.
    from sera.teaching import feedback

    solution, table = getattr(solutions, name), {}

    def recorded(*args):
        table[repr(args)] = solution(*args)
        return table[repr(args)]

    def looked_up(*args):
        return table.get(repr(args), np.zeros_like(np.asarray(solution(*args), dtype=float)))

    monkeypatch.setattr(feedback, "_FRESH", np.random.default_rng(1))
    assert course.CHECKS[name](recorded).passed
    monkeypatch.setattr(feedback, "_FRESH", np.random.default_rng(2))
    looked = course.CHECKS[name](looked_up)
    assert not looked.passed and "new random ones" in looked.message
    monkeypatch.setattr(feedback, "_FRESH", np.random.default_rng(3))
    assert course.CHECKS[name](solution).passed  # and the real function passes any draw
    capsys.readouterr()


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_each_exercise_notebook_asks_one_problem_beyond_a_transcription(path):
    # A problem to derive, find or predict (not a formula the text states), graded by hand: its
    # worked answer ends with a rubric whose points add up to the cell's, hidden from students.
    cells = nbformat.read(path, as_version=4).cells
    thinking = [(task, answer) for task, answer in zip(cells, cells[1:], strict=False)
                if task.source.startswith("## 3. ") and "nbgrader" in answer.metadata]
    assert len(thinking) == 1, path.name
    task, answer = thinking[0]
    assert re.search(r"\((a limit|find a failure|predict)", task.source), task.source[:120]
    (body,) = release.solution_bodies_of(answer.source)
    rubric = body.split("**Rubric (")[1]
    points = answer.metadata["nbgrader"]["points"]
    assert rubric.startswith(f"{points} points).**") and rubric.count("(1 point)") == points
    assert release.student_cell(answer).source.endswith("YOUR ANSWER HERE")


_KAPPA = "    return -math.expm1((n - 1) * math.log1p(-p))\n"
CORRECT_FORMS = {  # a correct kappa written as students write it: each gets every point
    "computed constants": ("import math\nimport numpy as np\nEPS = np.finfo(float).eps\n"
                           "LOG2 = math.log(2)\nTINY = 10 ** -12\nHALF = 1 / 2\n"
                           "def kappa(p, n):\n    assert EPS < TINY < HALF < LOG2\n" + _KAPPA),
    "annotated and unpacked": ("import math\nEPS: float = 1e-300\nLO, HI = 0.0, 1.0\n"
                               "def kappa(p, n):\n    assert LO <= p + EPS <= HI + EPS\n" + _KAPPA),
    "a lambda": "import math\nkappa = lambda p, n: -math.expm1((n - 1) * math.log1p(-p))",
    "a %timeit line": "import math\ndef kappa(p, n):\n" + _KAPPA + "%timeit kappa(0.5, 10)",
    "a %%time cell": "%%time\nimport math\ndef kappa(p, n):\n" + _KAPPA,
    "a default naming a constant": ("import math\nEPS = 1e-300\ndef kappa(p, n, eps=EPS):\n"
                                    + _KAPPA),
    "typing annotations": ("import math\nfrom typing import Union\n"
                           "def kappa(p: Union[float, int], n: int) -> float:\n" + _KAPPA),
    "np.longdouble": ("import numpy as np\ndef kappa(p, n):\n"
                      "    return -np.expm1(np.longdouble(n - 1) * np.log1p(-np.longdouble(p)))"),
}


@pytest.mark.parametrize("form", sorted(CORRECT_FORMS))
def test_a_correct_kappa_gets_every_point_in_any_form_a_kernel_runs(form):
    assert graded("kappa", CORRECT_FORMS[form]) == ""


def test_a_scratch_cells_import_does_not_refuse_a_function_with_its_own_name():
    scratch = "from scipy.special import comb\nprint(comb(5, 2))"
    own = "import math\ndef pass_at_k(n, c, k):\n    comb = math.comb\n" \
          "    return 1 - comb(n - c, k) / comb(n, k) if n - c >= k else 1.0"
    assert graded_cells("pass_at_k", ["import math\nimport numpy as np", scratch, own]) == ""
    uses = "def pass_at_k(n, c, k):\n    return 1 - comb(n - c, k) / comb(n, k)"
    assert "uses comb, imported from scipy" in graded_cells(
        "pass_at_k", ["import math", scratch, uses])


def test_the_public_check_and_the_grader_refuse_an_import_for_the_same_reason(capsys):
    # A right answer that imports heapq: the student's own check and the grader both say it
    # uses heapq, imported from heapq, and neither gives the points.
    feedback = course.CHECKS["rounding"](_student(HEAP))
    assert not feedback.passed and "uses heapq, imported from heapq" in feedback.message
    assert "uses heapq, imported from heapq" in graded("rounding", HEAP)
    from scipy.special import comb

    def pass_at_k(n, c, k):  # a scratch cell's scipy comb, as the grader sees it
        return 1 - comb(n - c, k) / comb(n, k)
    feedback = course.CHECKS["pass_at_k"](pass_at_k)
    assert not feedback.passed and "uses comb, imported from scipy" in feedback.message
