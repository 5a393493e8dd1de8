"""Checks for the course exercises (notebooks/exercises/): each takes the function a student
wrote, tries it on cases chosen to catch the usual mistakes, and prints what it found, a hint
when something is off, never a traceback. Each returns a Feedback as well, for the tests.

A stub that still raises NotImplementedError is reported as "not done yet". Reference solutions
live in sera.course_solutions; the exercise notebooks load them when run with solutions=True.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sera.allocation import allocate, waterline
from sera.fidelity import kappa as _kappa
from sera.passk import pass_at_k as _pass_at_k


@dataclass(frozen=True)
class Feedback:
    """The outcome of a check: done (the stub was filled in), passed, and the message shown."""

    done: bool
    passed: bool
    message: str

    def _repr_markdown_(self) -> str:
        return self.message

    def __str__(self) -> str:
        return self.message


def _report(name: str, fn, run) -> Feedback:
    """Call run(fn) -> None (passed) or a hint; a stub or an error becomes a message."""
    try:
        hint = run(fn)
    except NotImplementedError:
        feedback = Feedback(False, False, f"{name}: not done yet (fill in the stub, then run "
                                          f"this cell again).")
    except Exception as exc:  # noqa: BLE001 - any error in student code becomes a message
        feedback = Feedback(True, False, f"{name}: your function raised {type(exc).__name__}: "
                                         f"{exc}. Check it on one small case by hand.")
    else:
        feedback = Feedback(True, hint is None, f"{name}: correct." if hint is None
                            else f"{name}: not yet. {hint}")
    print(("PASS " if feedback.passed else "---- ") + feedback.message)
    return feedback


def _close(a, b, rtol=1e-9, atol=1e-12) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


# ---------------------------------------------------------------------- exercise 1: kappa


def check_kappa(fn) -> Feedback:
    """fn(p, n) -> the fidelity of centered MaxRL with n rollouts, 1 - (1-p)^(n-1)."""

    def run(fn):
        p = np.array([0.001, 0.05, 0.2, 0.5, 0.9])
        ns = np.array([2, 3, 8, 32])[:, None]
        got = np.array([[float(fn(q, int(n))) for q in p] for n in ns[:, 0]])
        mistakes = [
            (_kappa(p, ns, centered=False), "This is the uncentered estimator's fidelity "
             "(exponent N). The centered one keeps only the first N-1 terms of the series: "
             "exponent N-1."),
            ((1 - p) ** (ns - 1), "You returned (1-p)^(N-1), the part that is lost: kappa is "
             "one minus it."),
            (1 - p ** (ns - 1), "The series is in powers of (1-p), the failure probability, "
             "not of p."),
            (_kappa(p, ns + 1), "Off by one in the exponent: with N rollouts it is N-1."),
            (_kappa(p, np.maximum(ns - 1, 1)), "Off by one in the exponent: with N rollouts "
             "it is N-1."),
        ]
        if not _close(got, _kappa(p, ns)):
            for values, hint in mistakes:
                if _close(got, values):
                    return hint
            return "The values differ from 1 - (1-p)^(N-1); try p = 0.2, N = 3 by hand: 0.36."
        if abs(float(fn(1e-12, 3)) - 2e-12) > 1e-20:
            return ("Right formula, but at p = 1e-12 it loses its digits: 1 - (1-p)^2 rounds. "
                    "Use -expm1((N-1) * log1p(-p)).")
        return None

    return _report("kappa", fn, run)


def check_centered_advantages(fn) -> Feedback:
    """fn(rewards) -> MaxRL's centered advantages (r - mean) / mean for one group (0 if no
    success)."""

    def run(fn):
        cases = [np.array([1.0, 0, 0, 0]), np.array([1.0, 1, 0]), np.array([0.0, 0, 0]),
                 np.array([1.0, 1, 1, 1]), np.array([0.0, 1])]
        for r in cases:
            got = np.asarray(fn(r.copy()), dtype=float)
            mean = r.mean()
            want = (r - mean) / mean if mean > 0 else np.zeros_like(r)
            if _close(got, want):
                continue
            if mean == 0 and not np.all(np.isfinite(got)):
                return ("A group without any success has mean 0: return zeros there instead of "
                        "dividing by it.")
            if mean > 0 and _close(got, r / mean):
                return ("These are the uncentered advantages r / mean; subtract the mean first: "
                        "(r - mean) / mean.")
            if mean > 0 and r.std() > 0 and _close(got, (r - mean) / r.std()):
                return "Dividing by the standard deviation is GRPO; MaxRL divides by the mean."
            if mean > 0 and _close(got, (r - mean) / r.size):
                return "Divide by the group's mean reward, not by its size."
            return f"For rewards {r.tolist()} expected {np.round(want, 4).tolist()}."
        return None

    return _report("centered advantages", fn, run)


# ---------------------------------------------------------------------- exercise 2: waterline


def check_two_prompt_waterline(fn) -> Feedback:
    """fn(p1, p2, budget, n_min) -> continuous counts (n1, n2) summing to the budget, each at
    least n_min, with equal kappa when the bound does not bind."""

    def run(fn):
        for p1, p2, budget, n_min in [(0.1, 0.4, 20, 2), (0.05, 0.5, 12, 2), (0.3, 0.3, 10, 2),
                                      (0.01, 0.9, 10, 2), (0.2, 0.6, 9, 3)]:
            got = np.asarray(fn(p1, p2, budget, n_min), dtype=float)
            want = waterline([p1, p2], budget, n_min).counts
            if _close(got, want, rtol=1e-6, atol=1e-6):
                continue
            if abs(got.sum() - budget) > 1e-6:
                return f"The two counts must add up to the budget ({budget}); yours add to " \
                       f"{got.sum():.4g}."
            if got.min() < n_min - 1e-9:
                return (f"One count fell below N_min = {n_min} (p = {p1}, {p2}, budget "
                        f"{budget}): clip it at N_min and give the rest to the other prompt.")
            shares = 1 / np.array([p1, p2])
            if _close(got, 1 + (budget - 2) * shares / shares.sum(), rtol=1e-6):
                return ("N - 1 is proportional to 1/h with h = -log(1-p), not to 1/p: equal "
                        "kappa means (N1-1) h1 = (N2-1) h2.")
            return f"For p = ({p1}, {p2}), budget {budget}: expected {np.round(want, 4)}."
        return None

    return _report("two-prompt waterline", fn, run)


def check_rounding(fn) -> Feedback:
    """fn(continuous, budget) -> integer counts with the same sum, each the floor or the ceiling
    of its continuous count. Prints how its minimum kappa compares with the exact max-min."""

    def run(fn):
        rng = np.random.default_rng(0)
        worse = 0
        for _ in range(60):
            p = rng.uniform(0.02, 0.95, int(rng.integers(2, 6)))
            budget = int(rng.integers(2 * p.size + 1, 8 * p.size))
            continuous = waterline(p, budget, 2, 16).counts
            got = np.asarray(fn(continuous.copy(), budget))
            if got.shape != continuous.shape or not np.allclose(got, np.round(got)):
                return "Return one whole number per prompt."
            if int(round(got.sum())) != budget:
                return f"Your counts add to {int(round(got.sum()))}; the budget is {budget}."
            if np.any(got < np.floor(continuous - 1e-9)) or np.any(got > np.ceil(continuous +
                                                                                  1e-9)):
                return "Each count should be its continuous count rounded down or up."
            exact = allocate(p, budget, 2, 16, method="exact")
            worse += _kappa(p, got).min() < exact.fidelity.min() - 1e-12
        print(f"      your rounding's lowest kappa is below the exact max-min in {worse} of 60 "
              f"batches (the paper's rule: about 5%).")
        return None

    return _report("rounding", fn, run)


# ---------------------------------------------------------------------- exercise 3: weights, Pass@K


def check_multiplicity_weights(fn) -> Feedback:
    """fn(counts, n0) -> the per-response weight n0 / N_q, 0 where N_q = 0."""

    def run(fn):
        counts = np.array([2, 4, 8, 32, 0])
        got = np.asarray(fn(counts.copy(), 8), dtype=float)
        want = np.array([4.0, 2.0, 1.0, 0.25, 0.0])
        if _close(got, want):
            return None
        if _close(got[:4], counts[:4] / 8):
            return "Upside down: a prompt with more rollouts gets a smaller weight, n0 / N_q."
        if _close(got[:4], 1 / counts[:4]):
            return "Multiply by n0: 1 / N_q makes the weights of the batch sum to B, not B n0."
        if not np.all(np.isfinite(got)):
            return "A prompt with no rollouts gets weight 0, not a division by zero."
        return f"For counts {counts.tolist()} and n0 = 8 expected {want.tolist()}."

    return _report("multiplicity weights", fn, run)


def check_pass_at_k(fn) -> Feedback:
    """fn(n, c, k) -> the unbiased Pass@K from c correct among n samples."""

    def run(fn):
        cases = [(10, 3, 1), (10, 3, 4), (16, 1, 8), (8, 0, 2), (8, 7, 2), (20, 5, 20), (5, 5, 3)]
        for n, c, k in cases:
            got = float(fn(n, c, k))
            want = float(_pass_at_k(n, c, k))
            if abs(got - want) < 1e-9:
                continue
            if abs(got - (1 - (1 - c / n) ** k)) < 1e-9:
                return ("1 - (1 - c/n)^K draws with replacement: it is biased for K > 1. Use "
                        "1 - C(n-c, K) / C(n, K), the chance that K samples drawn without "
                        "replacement miss every correct one.")
            return f"For n = {n}, c = {c}, K = {k} expected {want:.6f}, got {got:.6f}."
        return None

    return _report("Pass@K", fn, run)


CHECKS = {"kappa": check_kappa, "centered_advantages": check_centered_advantages,
          "two_prompt_waterline": check_two_prompt_waterline, "rounding": check_rounding,
          "multiplicity_weights": check_multiplicity_weights, "pass_at_k": check_pass_at_k}
