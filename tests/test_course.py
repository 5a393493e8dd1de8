"""The course checks: a reference solution passes, a stub is "not done yet", and each typical
mistake gets its own hint rather than a traceback."""

import math

import numpy as np
import pytest

from sera import course
from sera import course_solutions as solutions


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("name", sorted(course.CHECKS))
def test_reference_solutions_pass_and_stubs_are_not_done(name, capsys):
    feedback = course.CHECKS[name](getattr(solutions, name))
    assert feedback.passed and feedback.done, feedback.message
    feedback = course.CHECKS[name](stub)
    assert not feedback.done and "not done yet" in feedback.message
    assert "Traceback" not in capsys.readouterr().out


@pytest.mark.parametrize("name, mistake, hint", [
    ("kappa", lambda p, n: 1 - (1 - p) ** n, "uncentered"),
    ("kappa", lambda p, n: (1 - p) ** (n - 1), "one minus"),
    ("kappa", lambda p, n: 1 - p ** (n - 1), "failure probability"),
    ("kappa", lambda p, n: 1 - (1 - p) ** (n - 2), "Off by one"),
    ("kappa", lambda p, n: 1 - (1 - p) ** (n - 1), "loses its digits"),
    ("centered_advantages", lambda r: r / r.mean() if r.mean() else r * 0, "uncentered"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.std() if r.std() else r * 0, "GRPO"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.mean(), "mean 0"),
    ("centered_advantages", lambda r: (r - r.mean()) / r.size, "group's mean reward"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: np.array(
        [1 + (m - 2) * (1 / p1) / (1 / p1 + 1 / p2), 1 + (m - 2) * (1 / p2) / (1 / p1 + 1 / p2)]),
     "not to 1/p"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: solutions.two_prompt_waterline(p1, p2, m, 0),
     "below N_min"),
    ("two_prompt_waterline", lambda p1, p2, m, lo: np.array([m / 2, m / 2 + 1]), "add up"),
    ("rounding", lambda c, m: np.floor(c), "budget is"),
    ("rounding", lambda c, m: np.r_[np.floor(c[:-1]), m - np.floor(c[:-1]).sum()],
     "rounded down or up"),
    ("multiplicity_weights", lambda counts, n0: counts / n0, "Upside down"),
    ("multiplicity_weights", lambda counts, n0: np.divide(1.0, counts, out=np.zeros(len(counts)),
                                                          where=counts > 0), "Multiply by n0"),
    ("multiplicity_weights", lambda counts, n0: n0 / counts, "weight 0"),
    ("pass_at_k", lambda n, c, k: 1 - (1 - c / n) ** k, "biased"),
    ("pass_at_k", lambda n, c, k: 1 - math.comb(n - c, k - 1) / math.comb(n, k - 1),
     "expected"),
])
def test_each_typical_mistake_gets_its_hint(name, mistake, hint, capsys):
    with np.errstate(divide="ignore", invalid="ignore"):
        feedback = course.CHECKS[name](mistake)
    assert feedback.done and not feedback.passed
    assert hint in feedback.message, feedback.message
    assert "Traceback" not in capsys.readouterr().out


def test_an_error_in_student_code_is_a_message():
    feedback = course.check_pass_at_k(lambda n, c, k: [][0])
    assert not feedback.passed and "raised IndexError" in feedback.message
