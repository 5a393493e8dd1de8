"""The course checks: a reference solution passes, a stub is "not done yet", a call of sera's own
function is no solution, each typical mistake gets its own hint rather than a traceback, every
message is printed once, and without answers=True no hint holds the expected values or the
formula. The releases: the student one holds no solution and no worked answer (exercises and the
study notebooks' review questions alike), the instructor one every one."""

import math
import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import numpy as np
import pytest

import sera
from sera.fidelity import kappa as _K
from sera.teaching import course, notebook_files, release

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = sorted((ROOT / "notebooks" / "exercises").glob("[0-9][0-9]_*.ipynb"))
STUDY = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ANSWER_KEY = "## Answers to the review questions"
# The reference solutions are the exercise notebooks' solution cells.
solutions = SimpleNamespace(**{k: v for path in EXERCISES
                               for k, v in release.solutions(path).items()})


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("name", sorted(course.CHECKS))
def test_reference_solutions_pass_and_stubs_are_not_done(name, capsys):
    feedback = course.CHECKS[name](getattr(solutions, name))
    assert feedback.passed and feedback.done, feedback.message
    assert feedback.score(3) == 3.0
    feedback = course.CHECKS[name](stub)
    assert not feedback.done and "not done yet" in feedback.message
    assert feedback.score(3) == 0.0
    out = capsys.readouterr().out
    assert "Traceback" not in out and out.count("PASS ") == 1 and out.count("not done") == 1


def _aliased(p, n):
    return _K(p, n)  # `from sera.fidelity import kappa as _K` at the top of this file


@pytest.mark.parametrize("name, package", [
    ("kappa", sera.kappa), ("kappa", lambda p, n: sera.kappa(p, n)), ("pass_at_k", sera.pass_at_k),
    ("multiplicity_weights", lambda c, n0: sera.multiplicity_weights(c, n0)), ("kappa", _aliased)])
def test_calling_sera_is_not_a_solution(name, package):
    feedback = course.CHECKS[name](package)
    assert feedback.done and not feedback.passed and "sera's own" in feedback.message


def test_rounding_accepts_the_papers_rule_and_the_exact_max_min_only():
    # The paper's rule, counted against the exact max-min on the check's 60 batches (32 fall
    # below it), passes; so does an integer water-filling written with heapq alone; largest
    # remainders, which stays within floor and ceiling and keeps the budget, does not.
    import heapq

    message = course.check_rounding(solutions.rounding).message
    assert "below the exact integer max-min in 32." in message

    def exact(p, continuous, level, budget, n_max):
        counts = np.full(p.size, 2)
        heap = [(-(1 - q) ** 1, i) for i, q in enumerate(p)]  # -(1 - kappa(p, 2))
        heapq.heapify(heap)
        while counts.sum() < budget:
            _, i = heapq.heappop(heap)
            counts[i] += 1
            if counts[i] < n_max:
                heapq.heappush(heap, (-(1 - p[i]) ** (counts[i] - 1), i))
        return counts

    assert course.check_rounding(exact).passed

    def largest_remainders(p, continuous, level, budget, n_max):
        counts = np.floor(continuous + 1e-9).astype(int)
        counts[np.argsort(counts - continuous, kind="stable")[:budget - counts.sum()]] += 1
        return counts

    feedback = course.check_rounding(largest_remainders)
    assert not feedback.passed and "largest remainders" in feedback.message


def _waterline_with(h, budget, n_min):
    """Two prompts' continuous counts from hazards h (a student's, right or wrong)."""
    counts = 1 + (budget - 2) / (1 / h[0] + 1 / h[1]) / h
    low = int(np.argmin(counts))
    if counts[low] < n_min:
        counts[low], counts[1 - low] = n_min, budget - n_min
    return counts


def _rounded(rank):
    """A rounding that floors, then adds one rollout to the prompts first in rank(p, floor,
    level)."""
    def rounding(p, continuous, level, budget, n_max):
        counts = np.floor(continuous + 1e-9).astype(int)
        counts[np.argsort(rank(p, counts, level), kind="stable")[:budget - counts.sum()]] += 1
        return counts
    return rounding


@pytest.mark.parametrize("name, mistake, hint", [
    ("kappa", lambda p, n: 1 - (1 - p) ** n, "uncentered"),
    ("kappa", lambda p, n: (1 - p) ** (n - 1), "is lost"),
    ("kappa", lambda p, n: 1 - p ** (n - 1), "failure probability"),
    ("kappa", lambda p, n: 1 - (1 - p) ** (n - 2), "Off by one"),
    ("kappa", lambda p, n: 1 - (1 - p) ** (n - 1) + 0.01, "by hand"),
    ("kappa", lambda p, n: 1 - (1 - p) ** (n - 1), "loses its digits"),
    ("centered_advantages", lambda r: r / r.mean() if r.mean() else r * 0, "uncentered"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.std() if r.std() else r * 0, "GRPO"),
    ("centered_advantages", lambda r: (r - r.mean()) / (r.std() + 1e-6), "GRPO"),
    ("centered_advantages", lambda r: (r - r.mean()) / (r.std(ddof=1) + 1e-6), "GRPO"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.mean(), "mean 0"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.size, "group's mean reward"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: np.array(
        [1 + (m - 2) * (1 / p1) / (1 / p1 + 1 / p2), 1 + (m - 2) * (1 / p2) / (1 / p1 + 1 / p2)]),
     "1/p"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: solutions.two_prompt_waterline(p1, p2, m, 0),
     "below N_min"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: np.array([m / 2, m / 2 + 1]), "add up"),
    ("rounding", lambda p, c, lv, m, hi: np.floor(c), "budget is"),
    ("rounding", lambda p, c, lv, m, hi: np.r_[np.floor(c[:-1]), m - np.floor(c[:-1]).sum()],
     "rounded down or up"),
    ("rounding", _rounded(lambda p, f, lv: (1 - (1 - p) ** (f - 1) - lv) ** 2), "before"),
    ("rounding", _rounded(lambda p, f, lv: -(1 - (1 - p) ** f - lv) ** 2), "farthest"),
    ("rounding", _rounded(lambda p, f, lv: np.arange(p.size)), "other prompts"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: _waterline_with(-np.log([p1, p2]), m, lo),
     "chance of failing"),
    ("pass_at_k", lambda n, c, k: math.comb(n - c, k) / math.comb(n, k), "all K samples miss"),
    ("multiplicity_weights", lambda counts, n0: counts / n0, "Upside down"),
    ("multiplicity_weights", lambda counts, n0: np.divide(1.0, counts, out=np.zeros(len(counts)),
                                                          where=counts > 0), "sum to 1"),
    ("multiplicity_weights", lambda counts, n0: n0 / counts, "weight 0"),
    ("pass_at_k", lambda n, c, k: 1 - (1 - c / n) ** k, "biased"),
    ("pass_at_k", lambda n, c, k: 1 - math.comb(n - c, k - 1) / math.comb(n, k - 1),
     "is off"),
])
def test_each_typical_mistake_gets_its_hint(name, mistake, hint, capsys):
    with np.errstate(divide="ignore", invalid="ignore"):
        feedback = course.CHECKS[name](mistake)
        out = capsys.readouterr().out
        revealed = course.CHECKS[name](mistake, answers=True)
    assert feedback.done and not feedback.passed
    assert hint in feedback.message, feedback.message
    assert "Traceback" not in out and out.count(feedback.message) == 1
    # Graded mode: no expected values, no formula; answers=True adds them where there are any.
    for secret in ("expected", "expm1", "log1p", "C(n-c", "1 - (1-p)^(N-1)", "0.36"):
        assert secret not in feedback.message, feedback.message
    assert revealed.message.startswith(feedback.message)
    # graded: a named mistake keeps half the points, an answer the check can only call off none
    generic = hint in ("by hand", "is off", "other prompts")
    assert feedback.score(2) == (0.0 if generic else 1.0)


def test_an_error_in_student_code_is_a_message():
    feedback = course.check_pass_at_k(lambda n, c, k: [][0])
    assert not feedback.passed and "raised IndexError" in feedback.message


def test_a_feedback_is_shown_once_in_a_notebook():
    # The check prints; the returned Feedback ending a cell displays nothing more.
    assert course.Feedback(True, True, "x")._ipython_display_() is None
    assert not hasattr(course.Feedback, "_repr_markdown_")


def test_the_student_release_holds_no_solution(tmp_path):
    written = release.release(tmp_path)
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
    assert "HIDDEN TESTS" not in notebooks and "feedback.score" not in notebooks
    instructor_notebooks = "\n".join(p.read_text() for p in written["instructor"]
                                      if p.suffix == ".ipynb")
    assert instructor_notebooks.count("### BEGIN HIDDEN TESTS") == len(course.CHECKS)
    # The instructor release has every solution, the student one the same files otherwise.
    instructor = "\n".join(path.read_text() for path in written["instructor"])
    assert all(body.strip().splitlines()[-1].strip() in instructor for body in bodies)
    assert [p.relative_to(tmp_path / "student") for p in written["student"]] == \
        [p.relative_to(tmp_path / "instructor") for p in written["instructor"]]


def test_each_release_gets_the_guide_its_reader_needs(tmp_path):
    # the student guide has no recipe, no grading, no switch that reveals expected values and
    # no maintainer section, and says what the student's copies are; the instructor's has the
    # grading recipe and not the student's block
    written = release.release(tmp_path)
    student, instructor = ((tmp_path / kind / "README.md").read_text()
                           for kind in ("student", "instructor"))
    for text in (student, instructor):
        assert "<!--" not in text and "Keeping the repository clean" not in text
        assert "## The path" in text and "## Glossary of the methods" in text
    for hidden in ("answers=True", "instructor's copies", "nbgrader autograde", "JupyterHub"):
        assert hidden not in student and hidden in instructor, hidden
    assert "Your copies:" in student and "Your copies:" not in instructor
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
    # manually graded answer worth a point per question.
    cells = nbformat.read(path, as_version=4).cells
    key, closing = cells[-1], cells[-2]
    assert key.cell_type == "markdown" and key.source.startswith(ANSWER_KEY), \
        f"{path.name} has no answer key after its review questions"
    assert "## Review questions" in closing.source
    questions = _numbered(closing.source.split("## Review questions", 1)[1])
    assert questions == list(range(1, len(questions) + 1)) and questions, questions
    assert release.student_cell(key).source == f"{ANSWER_KEY}\n\nYOUR ANSWER HERE"
    (body,) = release.solution_bodies(path)
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


def test_the_student_release_holds_no_review_answer_and_the_instructor_one_each(tmp_path):
    written = release.release(tmp_path)
    keyed = [path for path in STUDY if release.solution_bodies(path)]
    assert len(keyed) >= 7
    lines = [line.strip() for path in keyed for body in release.solution_bodies(path)
             for line in body.splitlines() if line.strip()]
    student = "\n".join(_text(path) for path in written["student"])
    instructor = "\n".join(_text(path) for path in written["instructor"])
    for line in lines:
        assert line not in student, line[:80]
        assert line in instructor, line[:80]
    for path in keyed:
        source = nbformat.read(path, as_version=4).cells[-1]
        given = nbformat.read(tmp_path / "student" / path.name, as_version=4).cells[-1]
        kept = nbformat.read(tmp_path / "instructor" / path.name, as_version=4).cells[-1]
        assert given.source == f"{ANSWER_KEY}\n\nYOUR ANSWER HERE", path.name
        assert kept.source == source.source, path.name
        # nbgrader finds the graded cell in both releases (the student's also carries the
        # checksum nbgrader recorded, which tells an unanswered cell at autograde).
        assert kept.metadata["nbgrader"] == source.metadata["nbgrader"]
        assert {k: v for k, v in given.metadata["nbgrader"].items()
                if k not in ("checksum", "cell_type")} == source.metadata["nbgrader"]
        assert given.metadata["nbgrader"]["checksum"]


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_every_graded_cell_ends_with_its_score(path):
    # nbgrader gives full points to a test cell that runs without error unless its last output
    # is a number (partial credit): each graded check cell must end with feedback.score(points).
    import nbformat

    nb = nbformat.read(path, as_version=4)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
              and c.cell_type == "code"]
    assert len(graded) == sum("sera.teaching.course.check_" in c.source for c in nb.cells
                              if c.cell_type == "code")
    for cell in graded:
        meta = cell.metadata["nbgrader"]
        assert meta["locked"] and not meta["solution"] and meta["points"] > 0
        last = cell.source.strip().splitlines()[-2]  # the line before END HIDDEN TESTS
        assert last.startswith(f"feedback.score({meta['points']})"), cell.source
        assert cell.source.strip().endswith("### END HIDDEN TESTS")
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]
    assert len(ids) == len(set(ids))


def _without_markers(source: str) -> str:
    """A solution cell as the instructor wrote it, without nbgrader's marker lines."""
    return "\n".join(line for line in source.splitlines()
                     if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)


@pytest.mark.slow
def test_nbgrader_autogrades_the_solution_the_stub_and_each_typical_mistake(tmp_path):
    # nbgrader itself: generate_assignment releases exercises 1, autograde scores filled-in
    # copies. The solution gets every point, the stub none, a mistake the check names half of
    # its cell's points with the hint in the graded output, an answer it cannot name none.
    import copy

    import nbformat
    from nbgrader.api import Gradebook

    path = EXERCISES[0]
    course = tmp_path / "course"
    release.generate_assignments({"ex1": [path]}, course)
    released = nbformat.read(course / "release" / "ex1" / path.name, as_version=4)
    source = {c.metadata["nbgrader"]["grade_id"]: _without_markers(c.source)
              for c in nbformat.read(path, as_version=4).cells
              if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"}
    mistakes = {
        "kappa": "def kappa(p, n):\n    return 1 - (1 - p) ** n",  # uncentered: named
        "centered_advantages": ("def centered_advantages(rewards):\n"
                                "    r = np.asarray(rewards, dtype=float)\n"
                                "    return (r - r.mean()) / (r.std() + 1e-6)"),  # GRPO: named
    }
    submissions = {"solution": dict(source), "stub": {},
                   "uncentered": {**source, "kappa": mistakes["kappa"]},
                   "grpo": {**source, "centered_advantages": mistakes["centered_advantages"]},
                   "unnamed": {**source, "kappa": "def kappa(p, n):\n    return p"}}
    for student, cells in submissions.items():
        nb = copy.deepcopy(released)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in cells:
                cell.source = cells[grade_id]
        folder = course / "submitted" / student / "ex1"
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / path.name)
        release.nbgrader(course, "autograde", "ex1", "--student", student, "--create", "--force")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {s: {g.name: g.score for nb in gradebook.find_submission("ex1", s).notebooks
                      for g in nb.grades if g.name.startswith("check-")} for s in submissions}
    assert scores == {
        "solution": {"check-kappa": 2.0, "check-centered_advantages": 2.0},
        "stub": {"check-kappa": 0.0, "check-centered_advantages": 0.0},
        "uncentered": {"check-kappa": 1.0, "check-centered_advantages": 2.0},
        "grpo": {"check-kappa": 2.0, "check-centered_advantages": 1.0},
        "unnamed": {"check-kappa": 0.0, "check-centered_advantages": 2.0}}
    graded = (course / "autograded" / "uncentered" / "ex1" / path.name).read_text()
    assert "uncentered estimator's fidelity" in graded  # the hint, in the graded output
    # A rebuild of the release (make course) over the collected course keeps every grade and
    # every collected and graded file.
    kept = sorted(p.relative_to(course) for p in course.rglob("*")
                  if p.parts[len(course.parts)] in ("submitted", "autograded"))
    release.generate_assignments({"ex1": [path]}, course)
    assert sorted(p.relative_to(course) for p in course.rglob("*")
                  if p.parts[len(course.parts)] in ("submitted", "autograded")) == kept
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        again = {s: {g.name: g.score for nb in gradebook.find_submission("ex1", s).notebooks
                     for g in nb.grades if g.name.startswith("check-")} for s in submissions}
    assert again == scores
