"""The course checks of exercise 2 (notebooks/exercises/02_waterline_and_rounding.ipynb): the
two-prompt waterline, and the rounding with its 60 checked batches and its typical mistakes.
Exposed as sera.teaching.course.check_two_prompt_waterline and .check_rounding."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sera.allocation import allocate, waterline
from sera.fidelity import kappa as _kappa
from sera.teaching.feedback import FRESH_CASES, Feedback, Hint, _close, _report


def check_two_prompt_waterline(fn) -> Feedback:
    """Feedback on fn(p1, p2, budget, n_min), the two prompts' continuous waterline counts."""

    def run(fn):
        for p1, p2, budget, n_min in [(0.1, 0.4, 20, 2), (0.05, 0.5, 12, 2), (0.3, 0.3, 10, 2),
                                      (0.01, 0.9, 10, 2), (0.2, 0.6, 9, 3)]:
            got = np.asarray(fn(p1, p2, budget, n_min), dtype=float)
            want = waterline([p1, p2], budget, n_min).counts
            if _close(got, want, rtol=1e-6, atol=1e-6):
                continue
            if got.shape != (2,):
                return Hint("Return the two counts as one array of two numbers.", named=False)
            if abs(got.sum() - budget) > 1e-6:
                return Hint(f"The two counts must add up to the budget ({budget}); yours add to "
                            f"{got.sum():.4g}.")
            if got.min() < n_min - 1e-9:
                return Hint(f"One count fell below N_min = {n_min} (p = {p1}, {p2}, budget "
                            f"{budget}): what happens to the other prompt then?")
            if _close(got, _two_prompts(-np.log([p1, p2]), budget, n_min), rtol=1e-6):
                return Hint("Your hazard h shrinks as p grows, so the easier prompt gets more "
                            "rollouts: in kappa = 1 - exp(-(N-1) h), h comes from the chance "
                            "of failing.")
            shares = 1 / np.array([p1, p2])
            if _close(got, 1 + (budget - 2) * shares / shares.sum(), rtol=1e-6):
                return Hint("Your N - 1 is proportional to 1/p; equal kappa asks for another "
                            "function of p (write kappa as an exponential).")
            return Hint(f"For p = ({p1}, {p2}), budget {budget}, N_min = {n_min} your counts "
                        f"do not give the two prompts equal kappa.", named=False)
        return None

    def fresh(fn, rng):
        cases = [(*rng.uniform(0.02, 0.95, 2), int(rng.integers(6, 40)), int(rng.integers(2, 4)))
                 for _ in range(FRESH_CASES)]
        return all(_close(fn(float(p1), float(p2), m, lo), waterline([p1, p2], m, lo).counts,
                          rtol=1e-6, atol=1e-6) for p1, p2, m, lo in cases)

    return _report("two-prompt waterline", fn, run, fresh)


def _two_prompts(h, budget: int, n_min: int) -> np.ndarray:
    """Two prompts' continuous waterline counts from their hazards h (any h, so that a wrong
    hazard can be recognised), one clipped at n_min if needed."""
    lam = (budget - 2) / (1 / h[0] + 1 / h[1])
    counts = 1 + lam / np.asarray(h, dtype=float)
    low = int(np.argmin(counts))
    if counts[low] < n_min:
        counts[low], counts[1 - low] = n_min, budget - n_min
    return counts


def check_rounding(fn) -> Feedback:
    """Feedback on fn(p, continuous, level, budget, n_max), integer counts by the paper's
    rounding (the exercise states the rule); the exact integer max-min passes too, and equally
    close prompts may be served in either order."""

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

    def fresh(fn, rng):
        batches = [replace(b, got=np.asarray(
            fn(b.p.copy(), b.continuous.copy(), b.level, b.budget, b.n_max), dtype=float))
            for b in _rounding_batches(rng, FRESH_CASES)]
        return all(_fresh_accepted(b) for b in batches)

    return _report("rounding", fn, run, fresh)


def _fresh_accepted(batch: _Batch) -> bool:
    """A fresh batch's counts pass as the paper's rounding (equally close prompts either way), or
    as any valid allocation (whole counts in [2, N_max] that spend the budget) whose lowest kappa
    reaches the exact max-min's: an exact rule may break its ties another way."""
    got = batch.got
    if got.shape != batch.p.shape or not np.allclose(got, np.round(got)):
        return False
    got = np.round(got).astype(int)
    if got.sum() != batch.budget or got.min() < 2 or got.max() > batch.n_max:
        return False
    counted = replace(batch, got=got)
    if _rounding_shape(got, batch.continuous, batch.budget, batch.n_max) is None \
            and counted.accepted():
        return True
    return bool(_kappa(batch.p, got).min() >= _kappa(batch.p, batch.exact).min() - 1e-12)


def _rounding_shape(got, continuous, budget, n_max) -> Hint | None:
    """A hint when got is not whole numbers, misses the budget, passes n_max or leaves floor and
    ceiling."""
    if got.shape != continuous.shape or not np.allclose(got, np.round(got)):
        return Hint("Return one whole number per prompt.", named=False)
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


def _rounding_batches(rng=None, count: int = 60):
    """The checked batches (2 to 5 prompts, N_min = 2, N_max = 16): the same 60 every time, or
    `count` fresh ones from `rng`."""
    rng = np.random.default_rng(0) if rng is None else rng
    for _ in range(count):
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
                f"prompt's fidelity after one more rollout with the level.", named=False)


def _rounding_mistakes(first: _Batch) -> list:
    """Each typical mistake: the ranking of the prompts that get the extra rollouts, smallest
    first, and its hint (first: the first batch the student's rounding gets wrong)."""
    return [
        (lambda b: _kappa(b.p, b.floor), _from_the_floors(first)),
        (lambda b: -(b.continuous - b.floor),
         Hint("You handed the missing rollouts out by the size of the fractional parts "
              "(largest remainders). The paper ranks the prompts by the fidelity each would "
              "reach with one more rollout.")),
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

