"""The course checks: a reference solution passes, a stub is "not done yet", a call of sera's own
function is no solution, each typical mistake gets its own hint rather than a traceback, every
message is printed once, and without answers=True no hint holds the expected values or the
formula."""

import math

import numpy as np
import pytest

import sera
from sera import course
from sera import course_solutions as solutions


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("name", sorted(course.CHECKS))
def test_reference_solutions_pass_and_stubs_are_not_done(name, capsys):
    reference = getattr(solutions, name)
    feedback = course.CHECKS[name](lambda *args: reference(*args))
    assert feedback.passed and feedback.done, feedback.message
    feedback = course.CHECKS[name](stub)
    assert not feedback.done and "not done yet" in feedback.message
    out = capsys.readouterr().out
    assert "Traceback" not in out and out.count("PASS ") == 1 and out.count("not done") == 1


@pytest.mark.parametrize("name, package", [
    ("kappa", sera.kappa), ("kappa", lambda p, n: sera.kappa(p, n)), ("pass_at_k", sera.pass_at_k),
    ("multiplicity_weights", lambda c, n0: sera.multiplicity_weights(c, n0))])
def test_calling_sera_is_not_a_solution(name, package):
    feedback = course.CHECKS[name](package)
    assert feedback.done and not feedback.passed and "sera's own" in feedback.message


def test_rounding_is_compared_with_the_papers_rule_on_the_same_batches():
    # On the check's 60 batches largest remainders falls below the exact max-min in 20, the
    # paper's rounding in 32 (both counted here, not quoted).
    message = course.check_rounding(lambda c, m: solutions.rounding(c, m)).message
    assert "in 20 of 60 batches" in message and "on the same batches, in 32" in message


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
    ("rounding", lambda c, m: np.floor(c), "budget is"),
    ("rounding", lambda c, m: np.r_[np.floor(c[:-1]), m - np.floor(c[:-1]).sum()],
     "rounded down or up"),
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


def test_an_error_in_student_code_is_a_message():
    feedback = course.check_pass_at_k(lambda n, c, k: [][0])
    assert not feedback.passed and "raised IndexError" in feedback.message


def test_a_feedback_is_shown_once_in_a_notebook():
    # The check prints; the returned Feedback ending a cell displays nothing more.
    assert course.Feedback(True, True, "x")._ipython_display_() is None
    assert not hasattr(course.Feedback, "_repr_markdown_")
