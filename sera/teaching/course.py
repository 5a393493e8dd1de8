"""Checks for the course exercises (notebooks/exercises/): each takes the function a student
wrote, tries it on cases chosen to catch the usual mistakes, and prints what it found once, a
hint when something is off, never a traceback. Each returns a Feedback as well, for the tests.

A stub that still raises NotImplementedError is reported as "not done yet"; a function that calls
sera itself is not a solution. Hints say what is wrong, not what is right: the expected values
and the formula are added only with answers=True (self-study; a graded class leaves it off).
The reference solutions are the exercise notebooks' solution cells (sera.teaching.release).
"""

from __future__ import annotations

import types
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
    credit: float = 0.0
    """The share of the points: 1 when passed, the hint's credit for a named mistake, else 0."""

    def score(self, points: float) -> float:
        """The grade out of `points` (an nbgrader test cell ends with it: partial credit)."""
        return float(points) * (1.0 if self.passed else self.credit)

    def _ipython_display_(self) -> None:
        """Nothing: the check printed its message already, and a check ending a cell would
        otherwise show it twice."""

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Hint:
    """What is wrong (always shown), what is right (shown only with answers=True), and the share
    of the points the mistake keeps when graded: half for a typical mistake the check names, none
    for an answer it can only call different or malformed."""

    wrong: str
    answer: str = ""
    credit: float = 0.5


def _from_sera(value) -> bool:
    """True for the sera package, one of its modules, or anything defined in one."""
    if isinstance(value, types.ModuleType):
        return value.__name__.split(".")[0] == "sera"
    return (getattr(value, "__module__", None) or "").split(".")[0] == "sera"


def _calls_sera(fn) -> bool:
    """True when fn is sera's own function or its code reads a global that is sera or comes from
    it, under any name (kappa = sera.kappa, lambda p, n: sera.kappa(p, n), or
    `from sera.fidelity import kappa as K` and a function that calls K)."""
    if _from_sera(fn):
        return True
    code = getattr(fn, "__code__", None)
    namespace = getattr(fn, "__globals__", {})
    stack = [code] if code is not None else []
    while stack:
        code = stack.pop()
        if "sera" in code.co_names or any(_from_sera(namespace.get(name))
                                          for name in code.co_names):
            return True
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return False


def _report(name: str, fn, run, answers: bool) -> Feedback:
    """Call run(fn) -> None (passed) or a Hint; a stub or an error becomes a message."""
    if _calls_sera(fn):
        feedback = Feedback(True, False, f"{name}: not yet. Your function calls sera's own "
                                         f"code; write it with numpy and math only.")
        print("---- " + feedback.message)
        return feedback
    try:
        hint = run(fn)
    except NotImplementedError:
        feedback = Feedback(False, False, f"{name}: not done yet (fill in the stub, then run "
                                          f"this cell again).")
    except Exception as exc:  # noqa: BLE001 - any error in student code becomes a message
        feedback = Feedback(True, False, f"{name}: your function raised {type(exc).__name__}: "
                                         f"{exc}. Check it on one small case by hand.")
    else:
        if isinstance(hint, Hint):
            text = hint.wrong + (f" {hint.answer}" if answers and hint.answer else "")
            feedback = Feedback(True, False, f"{name}: not yet. {text}", hint.credit)
        else:
            feedback = Feedback(True, True, f"{name}: correct." + (f" {hint}" if hint else ""),
                                1.0)
    print(("PASS " if feedback.passed else "---- ") + feedback.message)
    return feedback


def _close(a, b, rtol=1e-9, atol=1e-12) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


# ---------------------------------------------------------------------- exercise 1: kappa


def check_kappa(fn, answers: bool = False) -> Feedback:
    """fn(p, n) -> the fidelity of centered MaxRL with n rollouts, 1 - (1-p)^(n-1)."""

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
                    return Hint(hint, "kappa = 1 - (1-p)^(N-1).")
            return Hint("The values differ from the fidelity; work out p = 0.2, N = 3 by hand.",
                        "kappa(0.2, 3) = 0.36.", credit=0.0)
        if abs(float(fn(1e-12, 3)) - 2e-12) > 1e-20:
            return Hint("Right formula, but at p = 1e-12 it loses its digits: 1 - (1-p)^2 rounds "
                        "to a multiple of 1e-16. numpy has functions that keep them.",
                        "Use -expm1((N-1) * log1p(-p)).")
        return None

    return _report("kappa", fn, run, answers)


def check_centered_advantages(fn, answers: bool = False) -> Feedback:
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
            expected = f"For rewards {r.tolist()} expected {np.round(want, 4).tolist()}."
            if mean == 0 and not np.all(np.isfinite(got)):
                return Hint("A group without any success has mean 0: return zeros there instead "
                            "of dividing by it.")
            if mean > 0 and _close(got, r / mean):
                return Hint("These are the uncentered advantages: subtract the group's mean "
                            "first.", expected)
            std = r.std()
            if mean > 0 and std > 0 and any(_close(got, (r - mean) / (s + eps), rtol=1e-5,
                                                   atol=1e-5)
                                            for s in (std, r.std(ddof=1)) for eps in (0, 1e-6,
                                                                                      1e-8)):
                return Hint("Dividing by the standard deviation is GRPO; MaxRL divides by "
                            "another statistic of the group.", expected)
            if mean > 0 and _close(got, (r - mean) / r.size):
                return Hint("Divide by the group's mean reward, not by its size.", expected)
            return Hint(f"For rewards {r.tolist()} your advantages differ.", expected, 0.0)
        return None

    return _report("centered advantages", fn, run, answers)


# ---------------------------------------------------------------------- exercise 2: waterline


def check_two_prompt_waterline(fn, answers: bool = False) -> Feedback:
    """fn(p1, p2, budget, n_min) -> continuous counts (n1, n2) summing to the budget, each at
    least n_min, with equal kappa when the bound does not bind."""

    def run(fn):
        for p1, p2, budget, n_min in [(0.1, 0.4, 20, 2), (0.05, 0.5, 12, 2), (0.3, 0.3, 10, 2),
                                      (0.01, 0.9, 10, 2), (0.2, 0.6, 9, 3)]:
            got = np.asarray(fn(p1, p2, budget, n_min), dtype=float)
            want = waterline([p1, p2], budget, n_min).counts
            if _close(got, want, rtol=1e-6, atol=1e-6):
                continue
            expected = f"For p = ({p1}, {p2}), budget {budget}: expected {np.round(want, 4)}."
            if got.shape != (2,):
                return Hint("Return the two counts as one array of two numbers.", credit=0.0)
            if abs(got.sum() - budget) > 1e-6:
                return Hint(f"The two counts must add up to the budget ({budget}); yours add to "
                            f"{got.sum():.4g}.")
            if got.min() < n_min - 1e-9:
                return Hint(f"One count fell below N_min = {n_min} (p = {p1}, {p2}, budget "
                            f"{budget}): what happens to the other prompt then?", expected)
            if _close(got, _two_prompts(-np.log([p1, p2]), budget, n_min), rtol=1e-6):
                return Hint("Your hazard h shrinks as p grows, so the easier prompt gets more "
                            "rollouts: in kappa = 1 - exp(-(N-1) h), h comes from the chance "
                            "of failing.", "h = -log(1 - p).")
            shares = 1 / np.array([p1, p2])
            if _close(got, 1 + (budget - 2) * shares / shares.sum(), rtol=1e-6):
                return Hint("Your N - 1 is proportional to 1/p; equal kappa asks for another "
                            "function of p (write kappa as an exponential).", expected)
            return Hint(f"For p = ({p1}, {p2}), budget {budget}, N_min = {n_min} your counts "
                        f"do not give the two prompts equal kappa.", expected, 0.0)
        return None

    return _report("two-prompt waterline", fn, run, answers)


def _two_prompts(h, budget: int, n_min: int) -> np.ndarray:
    """Two prompts' continuous waterline counts from their hazards h (any h, so that a wrong
    hazard can be recognised), one clipped at n_min if needed."""
    lam = (budget - 2) / (1 / h[0] + 1 / h[1])
    counts = 1 + lam / np.asarray(h, dtype=float)
    low = int(np.argmin(counts))
    if counts[low] < n_min:
        counts[low], counts[1 - low] = n_min, budget - n_min
    return counts


def check_rounding(fn, answers: bool = False) -> Feedback:
    """fn(p, continuous, level, budget, n_max) -> the paper's integer counts: each continuous
    count rounded down, then one more rollout each to the prompts whose fidelity after it,
    kappa(p, floor + 1), lies closest to the level (never above n_max). The exact integer
    max-min passes too. Ties between equally close prompts may go either way."""

    def run(fn):
        rng = np.random.default_rng(0)
        below, wrong = 0, []
        for _ in range(60):
            p = rng.uniform(0.02, 0.95, int(rng.integers(2, 6)))
            budget = int(rng.integers(2 * p.size + 1, 8 * p.size))
            line = waterline(p, budget, 2, 16)
            level = -np.expm1(-line.lam)
            got = np.asarray(fn(p.copy(), line.counts.copy(), level, budget, 16))
            paper = allocate(p, budget, 2, 16, rule="paper").counts
            exact = allocate(p, budget, 2, 16, rule="exact").counts
            below += _kappa(p, paper).min() < _kappa(p, exact).min() - 1e-12
            if got.shape == p.shape and (np.array_equal(got, paper)
                                         or np.array_equal(got, exact)):
                continue
            hint = _rounding_shape(got, line.counts, budget)
            if hint is not None:
                return hint
            batch = _Batch(p, line.counts, level, budget, paper, np.round(got).astype(int))
            if not batch.tie():
                wrong.append(batch)
        if wrong:
            return _rounding_hint(wrong)
        return (f"On the same 60 batches the paper's rule leaves the lowest kappa below the "
                f"exact integer max-min in {below}.")

    return _report("rounding", fn, run, answers)


def _rounding_shape(got, continuous, budget) -> Hint | None:
    """A hint when got is not whole numbers, misses the budget or leaves floor and ceiling."""
    if got.shape != continuous.shape or not np.allclose(got, np.round(got)):
        return Hint("Return one whole number per prompt.", credit=0.0)
    got = np.round(got).astype(int)
    if got.sum() != budget:
        return Hint(f"Your counts add to {got.sum()}; the budget is {budget}.")
    floor = np.floor(continuous + 1e-9).astype(int)
    if np.any(got < floor) or np.any(got > floor + 1):
        return Hint("Each count should be its continuous count rounded down or up.")
    return None


@dataclass(frozen=True)
class _Batch:
    """One checked batch whose rounding differs from the paper's."""

    p: np.ndarray
    continuous: np.ndarray
    level: float
    budget: int
    paper: np.ndarray
    got: np.ndarray

    @property
    def floor(self) -> np.ndarray:
        return np.floor(self.continuous + 1e-9).astype(int)

    def error_after(self) -> np.ndarray:
        return (_kappa(self.p, self.floor + 1) - self.level) ** 2

    def tie(self) -> bool:
        """The same errors as the paper's choice: equally close prompts, ties broken another
        way."""
        after, floor = self.error_after(), self.floor
        return bool(np.allclose(np.sort(after[self.got > floor]),
                                np.sort(after[self.paper > floor])))

    def ranked(self, key) -> np.ndarray:
        """The floors plus one rollout for the prompts first in key."""
        counts = self.floor.copy()
        counts[np.argsort(key, kind="stable")[:self.budget - counts.sum()]] += 1
        return counts


def _rounding_hint(wrong: list[_Batch]) -> Hint:
    """The typical mistake that explains every batch where the rounding differs, or a hint on
    the first of them."""
    mistakes = [
        (lambda b: -(b.continuous - b.floor),
         Hint("You handed the missing rollouts out by the size of the fractional parts "
              "(largest remainders). The paper ranks the prompts by the fidelity each would "
              "reach with one more rollout.",
              "Rank by (kappa(p, floor + 1) - level)^2, smallest first.")),
        (lambda b: (_kappa(b.p, b.floor) - b.level) ** 2,
         Hint("You compared the fidelity the prompts have before the extra rollout; the paper "
              "compares the fidelity each would have after it.")),
        (lambda b: -b.error_after(),
         Hint("Your extra rollouts went to the prompts whose fidelity after one more rollout "
              "lies farthest from the level; the paper picks the closest.")),
    ]
    for key, hint in mistakes:
        if all(np.array_equal(b.got, b.ranked(key(b))) for b in wrong):
            return hint
    first = wrong[0]
    return Hint(f"For p = {np.round(first.p, 3).tolist()} and budget {first.budget} your extra "
                f"rollouts went to other prompts than the paper's rule picks: compare each "
                f"prompt's fidelity after one more rollout with the level.",
                f"Expected {first.paper.tolist()}.", 0.0)


# ---------------------------------------------------------------------- exercise 3: weights, Pass@K


def check_multiplicity_weights(fn, answers: bool = False) -> Feedback:
    """fn(counts, n0) -> the per-response weight n0 / N_q, 0 where N_q = 0."""

    def run(fn):
        counts = np.array([2, 4, 8, 32, 0])
        got = np.asarray(fn(counts.copy(), 8), dtype=float)
        want = np.array([4.0, 2.0, 1.0, 0.25, 0.0])
        expected = f"For counts {counts.tolist()} and n0 = 8 expected {want.tolist()}."
        if _close(got, want):
            return None
        if got.shape != want.shape:
            return Hint("Return one weight per prompt.", credit=0.0)
        if not np.all(np.isfinite(got)):
            return Hint("A prompt with no rollouts gets weight 0, not a division by zero.")
        if _close(got[:4], counts[:4] / 8):
            return Hint("Upside down: a prompt with more rollouts gets a smaller weight.",
                        expected)
        if _close(got[:4], 1 / counts[:4]):
            return Hint("Your weights make a prompt's responses sum to 1, not to what it "
                        "carried under uniform counts (n0).", expected)
        return Hint("Check a prompt's total weight, its count times its weight: it should be the "
                    "same for every prompt that got rollouts.", expected, 0.0)

    return _report("multiplicity weights", fn, run, answers)


def check_pass_at_k(fn, answers: bool = False) -> Feedback:
    """fn(n, c, k) -> the unbiased Pass@K from c correct among n samples."""

    def run(fn):
        cases = [(10, 3, 1), (10, 3, 4), (16, 1, 8), (8, 0, 2), (8, 7, 2), (20, 5, 20), (5, 5, 3)]
        for n, c, k in cases:
            got = float(fn(n, c, k))
            want = float(_pass_at_k(n, c, k))
            if abs(got - want) < 1e-9:
                continue
            expected = f"For n = {n}, c = {c}, K = {k} expected {want:.6f}."
            if abs(got - (1 - want)) < 1e-9 and c not in (0, n):
                return Hint("You returned the chance that all K samples miss every correct one; "
                            "Pass@K is the chance that at least one of them is correct.",
                            "Pass@K = 1 - C(n-c, K) / C(n, K).")
            if abs(got - (1 - (1 - c / n) ** k)) < 1e-9:
                return Hint("1 - (1 - c/n)^K draws with replacement: it is biased for K > 1. "
                            "Count the ways K samples drawn without replacement miss every "
                            "correct one.", "Use 1 - C(n-c, K) / C(n, K).")
            return Hint(f"For n = {n}, c = {c}, K = {k} your value {got:.6f} is off.", expected,
                        0.0)
        return None

    return _report("Pass@K", fn, run, answers)


CHECKS = {"kappa": check_kappa, "centered_advantages": check_centered_advantages,
          "two_prompt_waterline": check_two_prompt_waterline, "rounding": check_rounding,
          "multiplicity_weights": check_multiplicity_weights, "pass_at_k": check_pass_at_k}
