"""Checks for the course exercises (notebooks/exercises/): each takes the function a student
wrote, tries it on cases chosen to catch the usual mistakes, and prints what it found once, a
hint when something is off, never a traceback. Each returns a Feedback as well, for the tests.

A stub that still raises NotImplementedError is reported as "not done yet"; a function that calls
sera itself is not a solution. A typical mistake is named only where it explains the student's
values (for kappa, the advantages, the weights, the rounding and Pass@K: on every checked case),
else the hint is generic; values right to about six digits pass. Hints say what is wrong, never
what is right (no expected value, no formula). These checks give feedback only: the grade
comes from the hidden test regions of the exercise notebooks (see sera.teaching.feedback).
The reference solutions are the exercise notebooks' solution cells (sera.teaching.release).
The shared Feedback, Hint and report are in sera.teaching.feedback, exercise 2's checks in
sera.teaching.waterline_checks; all are exposed here, with the checks' table CHECKS.
"""

from __future__ import annotations

import math

import numpy as np

from sera.fidelity import kappa as _kappa
from sera.passk import pass_at_k as _pass_at_k
from sera.teaching.feedback import FRESH_CASES, Feedback, Hint, _close, _report
from sera.teaching.waterline_checks import check_rounding, check_two_prompt_waterline

# ---------------------------------------------------------------------- exercise 1: kappa


def check_kappa(fn) -> Feedback:
    """Feedback on fn(p, n), the fidelity of centered MaxRL with n rollouts at success
    probability p."""

    def run(fn):
        p = np.array([0.001, 0.05, 0.2, 0.5, 0.9])
        ns = np.array([2, 3, 8, 32])[:, None]
        got = np.array([[float(fn(q, int(n))) for q in p] for n in ns[:, 0]])
        off_by_one = "Off by one in the exponent: count the terms the estimator keeps."
        mistakes = [
            (_kappa(p, ns, centered=False), "This is the uncentered estimator's fidelity. "
             "The centered one keeps one term fewer of the series."),
            ((1 - p) ** (ns - 1), "You returned the part of the series that is lost, not the "
             "part that is kept."),
            (1 - p ** (ns - 1), "The series is in powers of the failure probability, not of p."),
            (_kappa(p, ns + 1), off_by_one),
            (_kappa(p, np.maximum(ns - 1, 1)), off_by_one),
        ]
        if not _close(got, _kappa(p, ns)):
            for values, hint in mistakes:
                if _close(got, values):
                    return Hint(hint)
            return Hint("The values differ from the fidelity; work out p = 0.2, N = 3 by hand.",
                        named=False)
        if not _close(float(fn(1e-12, 3)), 2e-12, atol=0):
            return Hint("Right formula, but at p = 1e-12 it loses its digits: 1 - (1-p)^2 rounds "
                        "to a multiple of 1e-16. numpy has functions that keep them.")
        return None

    def fresh(fn, rng):
        p, n = rng.uniform(0.01, 0.99, FRESH_CASES), rng.integers(2, 60, FRESH_CASES)
        return _close([float(fn(q, int(m))) for q, m in zip(p, n, strict=True)], _kappa(p, n))

    return _report("kappa", fn, run, fresh)


def check_centered_advantages(fn) -> Feedback:
    """Feedback on fn(rewards), MaxRL's centered advantages for one group of 0/1 rewards. A
    typical mistake is named only when it explains every group with a success."""

    def run(fn):
        groups = [np.array([1.0, 0, 0, 0]), np.array([1.0, 1, 0]), np.array([0.0, 0, 0]),
                  np.array([1.0, 1, 1, 1]), np.array([0.0, 1])]
        got = [np.asarray(fn(r.copy()), dtype=float) for r in groups]
        if any(g.shape != r.shape for g, r in zip(got, groups, strict=True)):
            return Hint("Return one advantage per response, in the order of the rewards.",
                        named=False)
        want = [(r - r.mean()) / r.mean() if r.mean() > 0 else np.zeros_like(r) for r in groups]
        off = [i for i, r in enumerate(groups) if not _close(got[i], want[i])]
        if any(groups[i].mean() > 0 for i in off):
            i = next(i for i in off if groups[i].mean() > 0)
            shown = f"For rewards {groups[i].tolist()}"
            for mistake, hint in _ADVANTAGE_MISTAKES:
                if _explains(mistake, groups, got):
                    return Hint(hint)
            return Hint(f"{shown} your advantages differ.", named=False)
        if not all(np.all(np.isfinite(got[i])) for i in off):
            return Hint("A group without any success has mean 0: return zeros there instead "
                        "of dividing by it.")
        if off:
            return Hint("A group without any success carries no signal: every advantage there "
                        "should be 0.")
        return None

    def fresh(fn, rng):
        groups = [(rng.random(int(rng.integers(3, 10))) < 0.4).astype(float)
                  for _ in range(FRESH_CASES)]
        groups[0][0] = 1.0  # one group with a success at least
        return all(_close(fn(r.copy()), (r - r.mean()) / r.mean() if r.mean() > 0 else 0 * r)
                   for r in groups)

    return _report("centered advantages", fn, run, fresh)


def _explains(mistake, groups, got) -> bool:
    """True when the mistake gives the student's advantages on every group with a success."""
    for r, advantages in zip(groups, got, strict=True):
        candidates = mistake(r) if r.mean() > 0 else []
        if candidates and not any(_close(advantages, m, rtol=1e-5, atol=1e-5)
                                  for m in candidates):
            return False
    return True


def _grpo(r) -> list:
    """GRPO's advantages as students write them: either standard deviation, with or without a
    small epsilon (none where the rewards are all equal: a guard's zeros and 0/0 alike)."""
    return [(r - r.mean()) / (s + eps) for s in (r.std(), r.std(ddof=1)) if s > 0
            for eps in (0, 1e-6, 1e-8)]


# The typical mistakes: the candidate advantages each gives a group with a success (none: any
# answer fits there), and its hint.
_ADVANTAGE_MISTAKES = [
    (lambda r: [r / r.mean()], "These are the uncentered advantages: subtract the group's mean "
     "first."),
    (_grpo, "Dividing by the standard deviation is GRPO; MaxRL divides by another statistic of "
     "the group."),
    (lambda r: [r - r.mean()], "You centred the rewards but left them unscaled (GRPO without its "
     "division); MaxRL divides the centred rewards by a statistic of the group."),
    (lambda r: [(r - r.mean()) / r.size], "You divided by the group's size; MaxRL divides by "
     "another statistic of the group."),
    (lambda r: [(r - r.mean()) / r.sum(), r / r.sum() - 1], "You used the number of successes "
     "where MaxRL uses a statistic per rollout: a count grows with the group's size, an "
     "advantage should not."),
    (lambda r: [(r.mean() - r) / r.mean()], "Your signs are flipped: a success should get a "
     "positive advantage, a failure a negative one."),
]

# ---------------------------------------------------------------------- exercise 3: weights, Pass@K


def check_multiplicity_weights(fn) -> Feedback:
    """Feedback on fn(counts, n0), the multiplicity weight of each prompt's responses."""

    def run(fn):
        counts, n0 = np.array([2, 4, 8, 32, 0]), 8
        got = np.asarray(fn(counts.copy(), n0), dtype=float)
        want = np.array([4.0, 2.0, 1.0, 0.25, 0.0])
        if _close(got, want):
            return None
        if got.shape != want.shape:
            return Hint("Return one weight per prompt.", named=False)
        if not np.all(np.isfinite(got)):
            return Hint("A prompt with no rollouts gets weight 0, not a division by zero.")
        used, totals = counts > 0, counts * got
        if _close(got[used], want[used]):
            return Hint("A prompt with no rollouts has no responses to weigh: its weight is 0.")
        if _close(got[used], counts[used] / n0):
            return Hint("Upside down: a prompt with more rollouts gets a smaller weight.")
        if not _close(totals[used], np.full(used.sum(), totals[used][0])):
            return Hint("Check a prompt's total weight, its count times its weight: it should be "
                        "the same for every prompt that got rollouts.", named=False)
        total = totals[used][0]
        if _close(total, 1):
            return Hint("Your weights make a prompt's responses sum to 1, not to what it "
                        "carried under uniform counts (n0).")
        if any(_close(total, counts[kept].mean()) for kept in (used, slice(None))):
            return Hint("Every prompt gets the same total weight, as it should, but you used the "
                        "batch's mean count where the uniform count n0 belongs.")
        return Hint(f"Every prompt gets the same total weight, as it should, but yours is "
                    f"{total:.4g}, not what a prompt carried under uniform counts (n0): a "
                    f"weight should not depend on the rest of the batch.")

    def fresh(fn, rng):
        counts, n0 = rng.integers(0, 40, (FRESH_CASES, 5)), rng.integers(2, 16, FRESH_CASES)
        return all(_close(fn(c.copy(), int(m)), np.where(c > 0, m / np.maximum(c, 1), 0.0))
                   for c, m in zip(counts, n0, strict=True))

    return _report("multiplicity weights", fn, run, fresh)


def check_pass_at_k(fn) -> Feedback:
    """Feedback on fn(n, c, k), the unbiased Pass@K from c correct among n samples. A typical
    mistake is named only when it explains every checked case."""

    def run(fn):
        cases = [(10, 3, 1), (10, 3, 4), (16, 1, 8), (8, 0, 2), (8, 7, 2), (20, 5, 20), (5, 5, 3)]
        got = np.array([float(fn(n, c, k)) for n, c, k in cases])
        want = np.array([float(_pass_at_k(n, c, k)) for n, c, k in cases])
        if _close(got, want):
            return None
        for mistake, hint in _PASS_AT_K_MISTAKES:
            if _close(got, [mistake(n, c, k) for n, c, k in cases]):
                return hint
        i = int(np.flatnonzero(~np.isclose(got, want, rtol=1e-6, atol=1e-9))[0])
        (n, c, k), value = cases[i], got[i]
        return Hint(f"For n = {n}, c = {c}, K = {k} your value {value:.6f} is off.", named=False)

    def fresh(fn, rng):
        n = rng.integers(5, 60, FRESH_CASES)
        cases = [(int(m), int(rng.integers(0, m + 1)), int(rng.integers(1, m + 1))) for m in n]
        return _close([float(fn(*case)) for case in cases],
                      [float(_pass_at_k(*case)) for case in cases])

    return _report("Pass@K", fn, run, fresh)


# The typical mistakes: each one's value for (n, c, K), and its hint.
_PASS_AT_K_MISTAKES = [
    (lambda n, c, k: math.comb(n - c, k) / math.comb(n, k),
     Hint("You returned the chance that all K samples miss every correct one; Pass@K is "
          "the chance that at least one of them is correct.")),
    (lambda n, c, k: 1 - (1 - c / n) ** k,
     Hint("1 - (1 - c/n)^K draws with replacement: it is biased for K > 1. Count the ways K "
          "samples drawn without replacement miss every correct one.")),
    (lambda n, c, k: 1 - math.comb(c, k) / math.comb(n, k),
     Hint("You subtracted the chance that all K samples are correct; a draw of K fails only "
          "when none of its samples is correct.")),
    (lambda n, c, k: math.comb(c, k) / math.comb(n, k),
     Hint("You returned the chance that all K samples are correct; Pass@K asks for at least "
          "one.")),
    (lambda n, c, k: c / n,
     Hint("Your value does not change with K: c/n is Pass@1, and more samples give more chances "
          "that one of them is correct.")),
]


CHECKS = {"kappa": check_kappa, "centered_advantages": check_centered_advantages,
          "two_prompt_waterline": check_two_prompt_waterline, "rounding": check_rounding,
          "multiplicity_weights": check_multiplicity_weights, "pass_at_k": check_pass_at_k}
