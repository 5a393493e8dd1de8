"""Checks for the course exercises (notebooks/exercises/): each takes the function a student
wrote, tries it on cases chosen to catch the usual mistakes, and prints what it found once, a
hint when something is off, never a traceback. Each returns a Feedback as well, for the tests.

A stub that still raises NotImplementedError is reported as "not done yet"; a function that calls
sera itself is not a solution. A typical mistake is named only where it explains the student's
values (for kappa, the advantages, the weights, the rounding and Pass@K: on every checked case),
else the hint is generic; values right to about six digits pass. Hints say what is wrong, not
what is right: the expected values and the formula are added only with answers=True
(self-study; a graded class leaves it off).
The reference solutions are the exercise notebooks' solution cells (sera.teaching.release).
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, replace

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


def _close(a, b, rtol=1e-6, atol=1e-9) -> bool:
    """Equal to about six digits: an answer right to rounding (or to a 1e-8 guard) passes."""
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
        if not _close(float(fn(1e-12, 3)), 2e-12, atol=0):
            return Hint("Right formula, but at p = 1e-12 it loses its digits: 1 - (1-p)^2 rounds "
                        "to a multiple of 1e-16. numpy has functions that keep them.",
                        "Use -expm1((N-1) * log1p(-p)).")
        return None

    return _report("kappa", fn, run, answers)


def check_centered_advantages(fn, answers: bool = False) -> Feedback:
    """fn(rewards) -> MaxRL's centered advantages (r - mean) / mean for one group (0 if no
    success). A typical mistake is named only when it explains every group with a success."""

    def run(fn):
        groups = [np.array([1.0, 0, 0, 0]), np.array([1.0, 1, 0]), np.array([0.0, 0, 0]),
                  np.array([1.0, 1, 1, 1]), np.array([0.0, 1])]
        got = [np.asarray(fn(r.copy()), dtype=float) for r in groups]
        if any(g.shape != r.shape for g, r in zip(got, groups, strict=True)):
            return Hint("Return one advantage per response, in the order of the rewards.",
                        credit=0.0)
        want = [(r - r.mean()) / r.mean() if r.mean() > 0 else np.zeros_like(r) for r in groups]
        off = [i for i, r in enumerate(groups) if not _close(got[i], want[i])]
        if any(groups[i].mean() > 0 for i in off):
            i = next(i for i in off if groups[i].mean() > 0)
            shown = f"For rewards {groups[i].tolist()}"
            expected = f"{shown} expected {np.round(want[i], 4).tolist()}."
            for mistake, hint in _ADVANTAGE_MISTAKES:
                if _explains(mistake, groups, got):
                    return Hint(hint, expected)
            return Hint(f"{shown} your advantages differ.", expected, 0.0)
        if not all(np.all(np.isfinite(got[i])) for i in off):
            return Hint("A group without any success has mean 0: return zeros there instead "
                        "of dividing by it.")
        if off:
            return Hint("A group without any success carries no signal: every advantage there "
                        "should be 0.")
        return None

    return _report("centered advantages", fn, run, answers)


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
        batches = []
        for batch in _rounding_batches():
            got = np.asarray(fn(batch.p.copy(), batch.continuous.copy(), batch.level,
                                batch.budget, batch.n_max))
            if not (got.shape == batch.p.shape and (np.array_equal(got, batch.paper)
                                                    or np.array_equal(got, batch.exact))):
                hint = _rounding_shape(got, batch.continuous, batch.budget, batch.n_max)
                if hint is not None:
                    return hint
            batches.append(replace(batch, got=np.round(got).astype(int)))
        if not all(b.accepted() for b in batches):
            return _rounding_hint(batches)
        below = sum(_kappa(b.p, b.paper).min() < _kappa(b.p, b.exact).min() - 1e-12
                    for b in batches)
        return (f"On the same 60 batches the paper's rule leaves the lowest kappa below the "
                f"exact integer max-min in {below}.")

    return _report("rounding", fn, run, answers)


def _rounding_shape(got, continuous, budget, n_max) -> Hint | None:
    """A hint when got is not whole numbers, misses the budget, passes n_max or leaves floor and
    ceiling."""
    if got.shape != continuous.shape or not np.allclose(got, np.round(got)):
        return Hint("Return one whole number per prompt.", credit=0.0)
    got = np.round(got).astype(int)
    if got.sum() != budget:
        return Hint(f"Your counts add to {got.sum()}; the budget is {budget}.")
    if np.any(got > n_max):
        return Hint(f"A prompt already at N_max = {n_max} got one more rollout: no count may "
                    f"pass N_max.")
    floor = np.floor(continuous + 1e-9).astype(int)
    if np.any(got < floor) or np.any(got > floor + 1):
        return Hint("Each count should be its continuous count rounded down or up.")
    return None


@dataclass(frozen=True)
class _Batch:
    """One checked batch: the waterline's input and solution, the paper's and the exact counts,
    and the student's (once asked)."""

    p: np.ndarray
    continuous: np.ndarray
    level: float
    budget: int
    n_max: int
    paper: np.ndarray
    exact: np.ndarray
    got: np.ndarray | None = None

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

    def accepted(self) -> bool:
        return (np.array_equal(self.got, self.paper) or np.array_equal(self.got, self.exact)
                or self.tie())

    def ranked(self, key) -> np.ndarray:
        """The floors plus one rollout for the prompts first in key, none past n_max."""
        counts = self.floor.copy()
        key = np.where(counts >= self.n_max, np.inf, key)
        counts[np.argsort(key, kind="stable")[:self.budget - counts.sum()]] += 1
        return counts


def _rounding_batches():
    """The 60 checked batches (2 to 5 prompts, N_min = 2, N_max = 16), the same every time."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        p = rng.uniform(0.02, 0.95, int(rng.integers(2, 6)))
        budget = int(rng.integers(2 * p.size + 1, 8 * p.size))
        line = waterline(p, budget, 2, 16)
        yield _Batch(p, line.counts, float(-np.expm1(-line.lam)), budget, 16,
                     allocate(p, budget, 2, 16, rule="paper").counts,
                     allocate(p, budget, 2, 16, rule="exact").counts)


def _rounding_hint(batches: list[_Batch]) -> Hint:
    """The typical mistake that gives the student's counts on every batch, or a hint on the first
    batch the rounding gets wrong."""
    first = next(b for b in batches if not b.accepted())
    for key, hint in _rounding_mistakes(first):
        if all(np.array_equal(b.got, b.ranked(key(b))) for b in batches):
            return hint
    return Hint(f"For p = {np.round(first.p, 3).tolist()} and budget {first.budget} your extra "
                f"rollouts went to other prompts than the paper's rule picks: compare each "
                f"prompt's fidelity after one more rollout with the level.",
                f"Expected {first.paper.tolist()}.", 0.0)


def _rounding_mistakes(first: _Batch) -> list:
    """Each typical mistake: the ranking of the prompts that get the extra rollouts, smallest
    first, and its hint (first: the first batch the student's rounding gets wrong)."""
    return [
        (lambda b: _kappa(b.p, b.floor), _from_the_floors(first)),
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


def _from_the_floors(first: _Batch) -> Hint:
    """The hint for the exact rule's water-filling started from the floors, which misses the
    exact max-min where a floor is more than the exact count (a prompt held at N_max)."""
    over = np.flatnonzero(first.floor > first.exact)
    held = "a prompt" if not over.size else f"the prompt with p = {first.p[over[0]]:.3g}"
    if over.size and first.floor[over[0]] >= first.n_max:
        held += ", at N_max,"
    return Hint(f"Raising the lowest fidelity one rollout at a time is the exact max-min's idea, "
                f"but started from the floors it never takes a rollout back: for p = "
                f"{np.round(first.p, 3).tolist()} and budget {first.budget} {held} keeps a "
                f"rollout that would raise the lowest fidelity more on another prompt.")


# ---------------------------------------------------------------------- exercise 3: weights, Pass@K


def check_multiplicity_weights(fn, answers: bool = False) -> Feedback:
    """fn(counts, n0) -> the per-response weight n0 / N_q, 0 where N_q = 0."""

    def run(fn):
        counts, n0 = np.array([2, 4, 8, 32, 0]), 8
        got = np.asarray(fn(counts.copy(), n0), dtype=float)
        want = np.array([4.0, 2.0, 1.0, 0.25, 0.0])
        expected = f"For counts {counts.tolist()} and n0 = {n0} expected {want.tolist()}."
        if _close(got, want):
            return None
        if got.shape != want.shape:
            return Hint("Return one weight per prompt.", credit=0.0)
        if not np.all(np.isfinite(got)):
            return Hint("A prompt with no rollouts gets weight 0, not a division by zero.")
        used, totals = counts > 0, counts * got
        if _close(got[used], want[used]):
            return Hint("A prompt with no rollouts has no responses to weigh: its weight is 0.")
        if _close(got[used], counts[used] / n0):
            return Hint("Upside down: a prompt with more rollouts gets a smaller weight.",
                        expected)
        if not _close(totals[used], np.full(used.sum(), totals[used][0])):
            return Hint("Check a prompt's total weight, its count times its weight: it should be "
                        "the same for every prompt that got rollouts.", expected, 0.0)
        total = totals[used][0]
        if _close(total, 1):
            return Hint("Your weights make a prompt's responses sum to 1, not to what it "
                        "carried under uniform counts (n0).", expected)
        if any(_close(total, counts[kept].mean()) for kept in (used, slice(None))):
            return Hint("Every prompt gets the same total weight, as it should, but you used the "
                        "batch's mean count where the uniform count n0 belongs.")
        return Hint(f"Every prompt gets the same total weight, as it should, but yours is "
                    f"{total:.4g}, not what a prompt carried under uniform counts (n0): a "
                    f"weight should not depend on the rest of the batch.")

    return _report("multiplicity weights", fn, run, answers)


def check_pass_at_k(fn, answers: bool = False) -> Feedback:
    """fn(n, c, k) -> the unbiased Pass@K from c correct among n samples. A typical mistake is
    named only when it explains every checked case."""

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
        return Hint(f"For n = {n}, c = {c}, K = {k} your value {value:.6f} is off.",
                    f"For n = {n}, c = {c}, K = {k} expected {want[i]:.6f}.", 0.0)

    return _report("Pass@K", fn, run, answers)


_WITHOUT = "Use 1 - C(n-c, K) / C(n, K)."
# The typical mistakes: each one's value for (n, c, K), and its hint.
_PASS_AT_K_MISTAKES = [
    (lambda n, c, k: math.comb(n - c, k) / math.comb(n, k),
     Hint("You returned the chance that all K samples miss every correct one; Pass@K is "
          "the chance that at least one of them is correct.", _WITHOUT)),
    (lambda n, c, k: 1 - (1 - c / n) ** k,
     Hint("1 - (1 - c/n)^K draws with replacement: it is biased for K > 1. Count the ways K "
          "samples drawn without replacement miss every correct one.", _WITHOUT)),
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
