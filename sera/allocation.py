"""Fixed-budget rollout allocation: the waterline, integerization, the observability safeguard.

Derived in notebooks/02_waterline_allocation.ipynb (waterline, rounding) and
notebooks/03_allocation_vs_success.ipynb (safeguard). All arrays are numpy; one call handles 10^6
prompts in about the time of a sort.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sera import _checks
from sera.fidelity import kappa, mixed_probability

METHODS = ("paper", "exact", "uniform")


class Waterline(NamedTuple):
    """Continuous solution: counts (float, summing to the budget) and the water level lam."""

    counts: np.ndarray
    lam: float


@dataclass(frozen=True)
class Allocation:
    """An integer allocation of a fixed rollout budget over a batch of prompts.

    Attributes:
        p: the success probabilities (or estimates) the allocation was computed from.
        counts: rollouts per prompt (int64), 0 for prompts that were not retained.
        weights: per-response weight n0 / N_q of each prompt, 0 where not retained, so that every
            retained prompt carries the same total weight n0 in a response-mean loss.
        retained: which prompts receive rollouts.
        level: common fidelity 1 - exp(-lam) of the continuous solution over the retained prompts
            (for method "uniform": the smallest fidelity in the batch).
        lam: the water level of the continuous solution (nan for "uniform").
        continuous: the continuous waterline counts (0 where not retained).
        fallback: True when the safeguard found no prefix meeting u_min and kept the top
            capacity-minimal set, or when a batch fell back to uniform counts.
        method: "paper", "exact" or "uniform".
        n0: the reference count in the weights.
    """

    p: np.ndarray
    counts: np.ndarray
    weights: np.ndarray
    retained: np.ndarray
    level: float
    lam: float
    continuous: np.ndarray
    fallback: bool
    method: str
    n0: float

    @property
    def budget(self) -> int:
        return int(self.counts.sum())

    @property
    def fidelity(self) -> np.ndarray:
        """kappa(p_q, N_q) per prompt (0 where not retained)."""
        out = np.zeros_like(self.p)
        kept = self.retained
        out[kept] = kappa(self.p[kept], self.counts[kept])
        return out

    def to_frame(self):
        """One row per prompt: p, counts, weights, retained, fidelity (a pandas DataFrame)."""
        import pandas as pd

        return pd.DataFrame({"p": self.p, "counts": self.counts, "continuous": self.continuous,
                             "weights": self.weights, "retained": self.retained,
                             "fidelity": self.fidelity})


# ----------------------------------------------------------------------------- validation


def _bounds(n_prompts: int, budget, n_min, n_max):
    """Check the budget against the bounds; return (M, lo, hi), hi = M - (B-1) lo for None."""
    budget = _checks.integer(budget, "budget", minimum=1)
    n_min = _checks.integer(n_min, "n_min", minimum=2)
    if n_max is not None:
        n_max = _checks.integer(n_max, "n_max", minimum=n_min)
    if budget < n_prompts * n_min:
        raise ValueError(
            f"budget={budget} is infeasible: {n_prompts} prompts need at least "
            f"{n_prompts} * n_min = {n_prompts * n_min}; allowed range is "
            f"[{n_prompts * n_min}, {'inf' if n_max is None else n_prompts * n_max}]"
        )
    if n_max is not None and budget > n_prompts * n_max:
        raise ValueError(
            f"budget={budget} is infeasible: {n_prompts} prompts take at most "
            f"{n_prompts} * n_max = {n_prompts * n_max}; allowed range is "
            f"[{n_prompts * n_min}, {n_prompts * n_max}]"
        )
    hi = budget - (n_prompts - 1) * n_min if n_max is None else n_max
    return budget, n_min, hi


# ----------------------------------------------------------------------------- waterline


class _Interior:
    """The prompts with 0 < p < 1, sorted by h = -log(1-p), with what S(lam) needs."""

    def __init__(self, h: np.ndarray, lo: int, hi: int):
        self.h = np.sort(h)
        self.lo, self.hi, self.size = lo, hi, h.size
        self.a = (lo - 1) * self.h  # below a_q the prompt sits at lo
        self.b = (hi - 1) * self.h  # above b_q it sits at hi
        self.w = np.concatenate(([0.0], np.cumsum(1.0 / self.h)))

    def total(self, lam: float) -> float:
        """S(lam) = sum_q clip(1 + lam/h_q, lo, hi), in O(log B)."""
        i_hi = int(np.searchsorted(self.b, lam, "right"))
        i_lo = int(np.searchsorted(self.a, lam, "left"))
        return (i_hi * self.hi + (self.size - i_lo) * self.lo + (i_lo - i_hi)
                + lam * (self.w[i_lo] - self.w[i_hi]))

    def _first_reaching(self, points: np.ndarray, target: float) -> int:
        """Index of the first breakpoint with S >= target (binary search; S is nondecreasing)."""
        left, right = 0, points.size
        while left < right:
            mid = (left + right) // 2
            if self.total(points[mid]) >= target:
                right = mid
            else:
                left = mid + 1
        return left

    def level(self, target: float) -> float:
        """The smallest lam with S(lam) = target, exact up to rounding: S is piecewise linear, so
        the segment holding the target is found among the breakpoints and solved in closed form.
        At target = size*lo the flat start is resolved to its right end, lam = (lo-1) h_min."""
        if target <= self.size * self.lo:
            return float(self.a[0])
        if target >= self.size * self.hi:
            return float(self.b[-1])
        ja = self._first_reaching(self.a, target)
        jb = self._first_reaching(self.b, target)
        below = [0.0] + ([self.a[ja - 1]] if ja > 0 else []) + ([self.b[jb - 1]] if jb > 0 else [])
        above = ([self.a[ja]] if ja < self.size else []) + ([self.b[jb]] if jb < self.size else [])
        start = float(max(below))
        i_hi = int(np.searchsorted(self.b, start, "right"))
        i_lo = int(np.searchsorted(self.a, start, "right"))
        slope = self.w[i_lo] - self.w[i_hi]
        lam = start + (target - self.total(start)) / slope
        return float(min(lam, min(above))) if above else float(lam)


def _share(total: int, members: np.ndarray, base: np.ndarray) -> None:
    """Spread `total` rollouts evenly over the prompts in `members` (the first ones get the odd
    rollouts), in place in `base`; used where fidelity cannot tell prompts apart (p = 0 or 1)."""
    idx = np.flatnonzero(members)
    base[idx] += total // idx.size
    base[idx[: total % idx.size]] += 1


def _solve(p: np.ndarray, budget: int, lo: int, hi: int):
    """Continuous waterline. Returns (counts, lam, interior, interior_budget) where the last two
    are what the exact integer method reuses (interior is None outside the interior phase)."""
    zero, one = p == 0, p == 1
    inner = ~(zero | one)
    n_zero, n_one, n_inner = int(zero.sum()), int(one.sum()), int(inner.sum())
    counts = np.full(p.size, float(lo))
    extra = budget - p.size * lo
    if n_zero and extra <= n_zero * (hi - lo):
        # p = 0 prompts rise as soon as lam > 0, before any other prompt leaves lo.
        counts[zero] += extra / n_zero
        return counts, 0.0, None, 0
    counts[zero] = hi
    inner_budget = budget - n_zero * hi - n_one * lo
    if n_inner == 0 or inner_budget >= n_inner * hi:
        counts[inner] = hi
        if n_one and inner_budget > n_inner * hi:
            # p = 1 prompts only rise once every other prompt is full: lam = infinity.
            counts[one] += (inner_budget - n_inner * hi) / n_one
            return counts, math.inf, None, 0
        h_max = float(-np.log1p(-p[inner]).max()) if n_inner else 0.0
        return counts, (hi - 1) * h_max, None, 0
    with np.errstate(divide="ignore"):
        h = -np.log1p(-p[inner])
    interior = _Interior(h, lo, hi)
    lam = interior.level(inner_budget)
    counts[inner] = np.clip(1.0 + lam / h, lo, hi)
    return counts, lam, interior, inner_budget


def waterline(p, budget, n_min=2, n_max=None) -> Waterline:
    """Continuous max-min allocation: N_q = clip(1 + lam / h_q, n_min, n_max), h_q = -log(1-p_q),
    with the water level lam solved exactly so that the counts sum to the budget.

    Every unclipped prompt then has the same fidelity kappa = 1 - exp(-lam). Prompts with p = 0 fill
    first (towards n_max) and prompts with p = 1 last, the limits of the formula. n_max=None means
    no bound beyond the budget. Derivation: notebooks/02_waterline_allocation.ipynb.
    """
    p = _checks.batch_probabilities(p)
    budget, lo, hi = _bounds(p.size, budget, n_min, n_max)
    counts, lam, _, _ = _solve(p, budget, lo, hi)
    return Waterline(counts, float(lam))


# ----------------------------------------------------------------------------- integerization


def _round_paper(p, continuous, lam, budget, hi) -> np.ndarray:
    """The paper's exact-budget rounding: floor, then one extra rollout each to the prompts whose
    one-increment squared fidelity error (kappa(p, floor + 1) - level)^2 is smallest."""
    counts = np.floor(continuous + 1e-9).astype(np.int64)
    counts = np.minimum(counts, hi)
    short = budget - int(counts.sum())
    if short <= 0:
        return counts
    level = 1.0 - math.exp(-lam)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.log1p(-p)
        # kappa(p, f + 1) = 1 - (1-p)**f = -expm1(-f h); f >= 2 so f*h is never 0 * inf.
        error = (-np.expm1(-counts * h) - level) ** 2
    eligible = np.flatnonzero(counts < hi)
    chosen = _smallest(error[eligible], short, eligible)
    counts[chosen] += 1
    return counts


def _smallest(values: np.ndarray, k: int, labels: np.ndarray) -> np.ndarray:
    """Labels of the k smallest values, ties broken towards the lowest label; O(n)."""
    if k >= values.size:
        return labels
    cut = np.partition(values, k - 1)[k - 1]
    below = values < cut
    ties = np.flatnonzero(values == cut)[: k - int(below.sum())]
    return np.concatenate((labels[below], labels[ties]))


def _round_exact(p, budget, lo, hi) -> np.ndarray:
    """Integer water-filling: raise, one rollout at a time, the prompt whose fidelity is lowest
    (ties: fewest rollouts, then lowest index). The result is the lexicographically max-min
    integer allocation. Raising prompt q from n to n+1 has key (n-1) h_q, so the allocation takes
    the R smallest keys; the continuous solutions at budgets M and M - B bracket the R-th key, which
    is then selected in O(B) among fewer than 2B candidate keys."""
    continuous, lam, interior, inner_budget = _solve(p, budget, lo, hi)
    zero, one = p == 0, p == 1
    counts = np.full(p.size, lo, dtype=np.int64)
    extra = budget - p.size * lo
    if interior is None:
        # Outside the interior phase the continuous counts are integers except where several
        # p = 0 (or p = 1) prompts share the remainder evenly.
        if zero.any() and extra <= zero.sum() * (hi - lo):
            _share(extra, zero, counts)
            return counts
        counts[~one] = hi
        rest = budget - int(counts.sum())
        if rest:
            _share(rest, one, counts)
        return counts
    counts[zero] = hi
    inner = np.flatnonzero(~(zero | one))
    h = -np.log1p(-p[inner])
    wanted = inner_budget - inner.size * lo  # increments to hand out over the interior
    low_budget = inner_budget - inner.size
    t_low = interior.level(low_budget) if low_budget > inner.size * lo else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.clip(np.ceil(t_low / h) - 1, lo - 1, hi - 1).astype(np.int64)
        last = np.clip(np.ceil(lam / h) + 1, lo - 1, hi - 1).astype(np.int64)
    # Keys are m * h_q for m = n - 1 in [lo - 1, hi - 2]; those below `first` are surely taken,
    # those at or above `last` surely not; the candidates are m in [first, last).
    taken = first - (lo - 1)
    need = wanted - int(taken.sum())
    sizes = last - first
    owner = np.repeat(np.arange(inner.size), sizes)
    offsets = np.arange(owner.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    m = first[owner] + offsets
    keys = m * h[owner]
    if not 0 <= need <= keys.size:
        raise RuntimeError(f"integer water-filling lost its bracket (need={need}, "
                           f"candidates={keys.size}); please report this input")
    if need:
        cut = np.partition(keys, need - 1)[need - 1]
        below = keys < cut
        tie = np.flatnonzero(keys == cut)
        tie = tie[np.lexsort((owner[tie], m[tie]))][: need - int(below.sum())]
        chosen = np.concatenate((owner[below], owner[tie]))
        taken += np.bincount(chosen, minlength=inner.size)
    counts[inner] = lo + taken
    return counts


def _uniform_counts(n_prompts: int, budget: int) -> np.ndarray:
    counts = np.full(n_prompts, budget // n_prompts, dtype=np.int64)
    counts[: budget % n_prompts] += 1
    return counts


def _integer(p, budget, lo, hi, method):
    """Integer counts plus the continuous solution for one retained set."""
    if method == "uniform":
        counts = _uniform_counts(p.size, budget)
        return counts, counts.astype(float), math.nan
    continuous, lam, _, _ = _solve(p, budget, lo, hi)
    if method == "paper":
        counts = _round_paper(p, continuous, lam, budget, hi)
    else:
        counts = _round_exact(p, budget, lo, hi)
    return counts, continuous, lam


# ----------------------------------------------------------------------------- public entry


def allocate(p, budget, n_min=2, n_max=None, method="paper", n0=None, u_min=None) -> Allocation:
    """Allocate an integer rollout budget over a batch of prompts with success probabilities p.

    method: "paper" (waterline, floor, then the smallest one-increment fidelity errors),
        "exact" (the lexicographically max-min integer allocation) or "uniform" (budget / B each).
    n0: reference count of the multiplicity weights n0 / N_q; defaults to budget / len(p).
    u_min: the observability safeguard. Prompts are ranked by U(p, n_max), highest first, and the
        largest capacity-feasible prefix whose prompts all have U(p_q, N_q) >= u_min is retained;
        if none passes, the top ceil(budget / n_max) prompts are kept and `fallback` is True.
        None turns the safeguard off.
    Derivations: notebooks/02_waterline_allocation.ipynb, notebooks/03_allocation_vs_success.ipynb.
    """
    p = _checks.batch_probabilities(p)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    budget, lo, hi = _bounds(p.size, budget, n_min, n_max)
    n0 = budget / p.size if n0 is None else _checks.real(n0, "n0", 0.0, math.inf, low_open=True)
    if u_min is not None:
        u_min = _checks.real(u_min, "u_min", 0.0, 1.0)
    order = np.arange(p.size)
    size, fallback = p.size, False
    if u_min is not None:
        order, size, fallback = _safeguard(p, budget, lo, n_max, method, u_min)
    kept = order[:size]
    bound = hi if n_max is not None else budget - (size - 1) * lo
    counts_kept, continuous_kept, lam = _integer(p[kept], budget, lo, bound, method)
    return _result(p, kept, counts_kept, continuous_kept, lam, fallback, method, n0)


def _result(p, kept, counts_kept, continuous_kept, lam, fallback, method, n0) -> Allocation:
    counts = np.zeros(p.size, dtype=np.int64)
    continuous = np.zeros(p.size)
    counts[kept] = counts_kept
    continuous[kept] = continuous_kept
    retained = counts > 0
    weights = np.zeros(p.size)
    weights[retained] = n0 / counts[retained]
    if method == "uniform":
        level = float(kappa(p[kept], counts_kept).min())
    else:
        level = 1.0 - math.exp(-lam)
    return Allocation(p=p, counts=counts, weights=weights, retained=retained, level=level,
                      lam=float(lam), continuous=continuous, fallback=fallback, method=method,
                      n0=float(n0))


def _safeguard(p, budget, lo, n_max, method, u_min):
    """Active-prefix search: (ranking, retained size, fallback)."""
    rank_count = n_max if n_max is not None else budget - (p.size - 1) * lo
    order = np.argsort(-mixed_probability(p, rank_count), kind="stable")
    smallest = math.ceil(budget / n_max) if n_max is not None else 1
    for size in range(min(p.size, budget // lo), max(smallest, 1) - 1, -1):
        kept = order[:size]
        bound = n_max if n_max is not None else budget - (size - 1) * lo
        counts, _, _ = _integer(p[kept], budget, lo, bound, method)
        if np.all(mixed_probability(p[kept], counts) >= u_min):
            return order, size, False
    return order, max(smallest, 1), True


def uniform(p, budget, n_min=2, n_max=None, n0=None) -> Allocation:
    """Uniform allocation: budget // B rollouts each, the remainder to the first prompts."""
    return allocate(p, budget, n_min=n_min, n_max=n_max, method="uniform", n0=n0)
