"""One-shot rollout allocators SERA is compared with, on the same budget and bounds.

Each rule maps success estimates p to integer counts with sum M and n_min <= N_q <= n_max, like
SERA's waterline; sera.allocate(method=...) dispatches here. Rules and sources are in
shared/ALLOCATORS.md; notebooks/06_allocators_compared.ipynb draws them on one batch.

- `knapsack` (Knapsack RL): maximise sum_q U(p_q, N_q) p_q (1-p_q)^2; the value is concave in N,
  so taking the largest marginal gains is the exact integer optimum.
- `gvm` (GVM-RAFT, gradient norms taken as 1): N_q proportional to 1 / sqrt(p_q + 0.001 / p_q).
- `dars-hw`, `dars-et` (DARS, budget-matched from history): N_q proportional to the total the
  pilot-based rule would give, max(1, 1/(2p)) (hardest-weighted) or max(1, 1/(4p(1-p)))
  (equal-treatment) for p < 1/2, 1 otherwise; p below 1e-6 is read as 0.5 / n0, as DARS does.
- `CeroAllocator` (CERO, a reconstruction from its abstract): stateful, myopic.
"""

from __future__ import annotations

import numpy as np


def knapsack(p: np.ndarray, budget: int, lo: int, hi: int) -> np.ndarray:
    """Knapsack RL's value sum U(p, N) p (1-p)^2, maximised over integer counts.

    The gain of raising N to N+1 is p (1-p)^2 [p^N (1-p) + (1-p)^N p], which falls with N: the
    optimum takes the R = budget - B lo largest gains (ties: fewer rollouts, then lower index).
    Prompts with p in {0, 1} have no value; rollouts that no other prompt can take go evenly to
    the p = 0 prompts, or to all of them when there is none.
    """
    counts = np.full(p.size, lo, dtype=np.int64)
    extra = budget - p.size * lo
    items = np.flatnonzero((p > 0) & (p < 1))
    if extra == 0 or hi == lo:
        return counts
    m = np.arange(lo, hi, dtype=float)  # raising from m to m + 1
    q = p[items, None]
    with np.errstate(under="ignore"):  # powers as exps of logs: numpy's exp is vectorised
        gains = np.exp(m * np.log(q)) * (1 - q) + np.exp(m * np.log1p(-q)) * q
        gains *= q * (1 - q) ** 2
    take = min(extra, gains.size)
    if take:
        counts[items] += largest_gains(gains, take)
        extra -= take
    if extra:
        rest = np.flatnonzero(p == 0)
        rest = rest if rest.size else np.flatnonzero((p <= 0) | (p >= 1))
        counts[rest] += _even_split(extra, rest.size, hi - lo)
    return counts


def largest_gains(gains: np.ndarray, take: int) -> np.ndarray:
    """Rollouts per row when the `take` largest entries of a (prompts, increments) matrix of
    marginal gains are taken, each row's gains falling along it: greedy by marginal gain, exact
    for concave values. Ties: fewer rollouts first, then the lower index."""
    if take <= 0:
        return np.zeros(gains.shape[0], dtype=np.int64)
    flat = gains.reshape(-1)
    cut = np.partition(flat, flat.size - take)[flat.size - take]  # the take-th largest
    chosen = gains > cut
    missing = take - int(chosen.sum())
    if missing:
        rows, cols = np.nonzero(gains == cut)
        order = np.lexsort((rows, cols))[:missing]
        chosen[rows[order], cols[order]] = True
    return chosen.sum(axis=1)


class CeroAllocator:
    """CERO's allocation in its myopic per-step form (a reconstruction from the abstract of
    arXiv 2606.05606; the published method solves a Fenchel dual online).

    Each prompt's value is its posterior expected Bernoulli variance v = ab / ((a+b)(a+b+1))
    under Beta(a, b) from the history, and its utility of X cumulative rollouts is the concave,
    saturating psi(X) = 1 - exp(-X / scale) (our choice: the abstract does not give psi). A step
    maximises sum_q v_q [psi(X_q + N_q) - psi(X_q)] under the budget and the bounds, greedily by
    marginal gain (exact, psi being concave), then adds N_q to X_q.
    """

    def __init__(self, n_prompts: int, scale: float = 16.0):
        self.cumulative = np.zeros(n_prompts)
        self.scale = float(scale)

    def plan(self, ids, a, b, budget: int, lo: int, hi: int, n0: float):
        from sera.allocation import from_counts

        ids = np.asarray(ids)
        value = a * b / ((a + b) * (a + b + 1))
        m = np.arange(lo, hi, dtype=float)
        exponent = -(self.cumulative[ids, None] + m) / self.scale
        gains = value[:, None] * np.exp(exponent) * -np.expm1(-1.0 / self.scale)
        counts = lo + largest_gains(gains, budget - lo * ids.size)
        self.cumulative[ids] += counts
        return from_counts(a / (a + b), counts, n0, "cero")


def _even_split(extra: int, size: int, room: int) -> np.ndarray:
    """extra rollouts over size prompts as evenly as possible (the first get one more)."""
    share = np.full(size, extra // size, dtype=np.int64)
    share[: extra % size] += 1
    if share.max(initial=0) > room:
        raise ValueError("the budget does not fit the bounds")  # excluded by allocate's checks
    return share


def proportional(weights: np.ndarray, budget: int, lo: int, hi: int) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """Integer counts proportional to weights within [lo, hi] summing to the budget: the
    continuous clip(lam w, lo, hi) with lam solved exactly, then the floors and the largest
    remainders (ties: lower index). Prompts of weight 0 stay at lo unless the others are full.
    Returns (counts, continuous)."""
    weights = np.asarray(weights, dtype=float)
    continuous = _proportional_continuous(weights, budget, lo, hi)
    counts = np.clip(np.floor(continuous + 1e-9), lo, hi).astype(np.int64)
    short = budget - int(counts.sum())
    index = np.arange(counts.size)
    if short > 0:
        remainder = np.where(counts < hi, continuous - counts, -np.inf)
        counts[np.lexsort((index, -remainder))[:short]] += 1
    elif short < 0:
        remainder = np.where(counts > lo, continuous - counts, np.inf)
        counts[np.lexsort((index, remainder))[:-short]] -= 1
    return counts, continuous


def _proportional_continuous(weights, budget, lo, hi) -> np.ndarray:
    """clip(lam w, lo, hi) summing to the budget. The sum is piecewise linear in lam: the segment
    holding the budget is found among the sorted breakpoints lo/w and hi/w, then solved from a
    direct sum over its unclipped prompts."""
    positive = weights > 0
    if hi == lo or not positive.any() or positive.sum() * hi + (~positive).sum() * lo <= budget:
        # The weighted prompts are full (or there are none): the rest goes evenly to the others.
        continuous = np.where(positive, float(hi), float(lo))
        if (~positive).any():
            continuous[~positive] += (budget - continuous.sum()) / (~positive).sum()
        return continuous
    w = weights[positive]
    breaks = np.unique(np.concatenate((lo / w, hi / w)))

    def total(lam):
        return np.clip(lam * weights, lo, hi).sum()

    # The segment starts at the last breakpoint whose sum stays at or below the budget (the first
    # one, where every prompt is at lo, always does; the last one, where all are at hi, does not).
    start = _last_below(breaks, total, budget)
    middle = 0.5 * (breaks[start] + breaks[start + 1])
    at_lo, at_hi = weights * middle <= lo, weights * middle >= hi
    free = ~at_lo & ~at_hi
    fixed = lo * at_lo.sum() + hi * at_hi.sum()
    lam = (budget - fixed) / weights[free].sum() if free.any() else breaks[start]
    return np.clip(lam * weights, lo, hi)


def _last_below(breaks, total, budget) -> int:
    """The largest index j with total(breaks[j]) <= budget (-1 if none), by bisection."""
    left, right = -1, breaks.size - 1
    while left < right:
        mid = (left + right + 1) // 2
        if total(breaks[mid]) <= budget:
            left = mid
        else:
            right = mid - 1
    return left


def gvm_weights(p: np.ndarray) -> np.ndarray:
    """1 / sqrt(p + 0.001 / p), 0 at p = 0 (GVM-RAFT with every gradient norm taken as 1)."""
    with np.errstate(divide="ignore"):
        return np.where(p > 0, 1.0 / np.sqrt(p + 0.001 / np.where(p > 0, p, 1.0)), 0.0)


def dars_weights(p: np.ndarray, n0: float, schedule: str) -> np.ndarray:
    """What DARS's pilot-based rule gives each prompt in total, up to the factor n0: 1 for
    p >= 1/2, else 1/(2p) (hw) or 1/(4p(1-p)) (et); p <= 1e-6 is read as 0.5 / n0."""
    a = np.where(p <= 1e-6, 0.5 / n0, p)
    if schedule not in ("hw", "et"):
        raise ValueError(f"schedule must be 'hw' or 'et', got {schedule!r}")
    with np.errstate(divide="ignore"):  # a = 1 gives inf, replaced by 1 below
        extra = 1.0 / (2.0 * a) if schedule == "hw" else 1.0 / (4.0 * a * (1.0 - a))
    return np.where(a >= 0.5, 1.0, np.maximum(1.0, extra))
