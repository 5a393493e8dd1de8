"""The water level and its integer roundings: the numerical core behind sera.allocate.

The continuous waterline is solved exactly from one sort of the hazards h = -log(1-p); the
paper's rounding and the exact integer max-min both run in O(B) after it. Derivations:
notebooks/02_waterline_allocation.ipynb.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class Interior:
    """The prompts with 0 < p < 1, sorted by h = -log(1-p), with what S(lam) needs.

    Prompt q sits at lo for lam <= a_q = (lo-1) h_q and at hi for lam >= b_q = (hi-1) h_q; both
    breakpoint lists are sorted with h, so S(lam) = sum_q clip(1 + lam/h_q, lo, hi) is evaluated
    in O(log B) from prefix sums of 1/h.
    """

    BLOCK = 1024

    def __init__(self, h: np.ndarray, lo: int, hi: int):
        self.h = h  # sorted ascending, all 0 < h < inf
        self.lo, self.hi, self.size = lo, hi, h.size
        # Prefix sums of 1/h per block of BLOCK prompts; the binary search needs only O(log B)
        # of them, so a full-length cumsum (and its memory) is not worth it. Chunks of 64 blocks
        # keep the temporaries in cache.
        whole = h.size // self.BLOCK * self.BLOCK
        sums = np.zeros(whole // self.BLOCK + 1)
        step = 64 * self.BLOCK
        for start in range(0, whole, step):
            stop = min(start + step, whole)
            block_sums = np.reciprocal(h[start:stop]).reshape(-1, self.BLOCK).sum(axis=1)
            sums[1 + start // self.BLOCK:1 + stop // self.BLOCK] = block_sums
        self.block_cum = np.cumsum(sums)

    def _w(self, i: int) -> float:
        """sum of 1/h over the i smallest h."""
        block = i // self.BLOCK
        tail = self.h[block * self.BLOCK:i]
        return float(self.block_cum[block] + np.reciprocal(tail).sum())

    def total(self, lam: float) -> float:
        """S(lam). Prompts exactly at a breakpoint may land on either side: S is continuous."""
        i_hi = int(np.searchsorted(self.h, lam / (self.hi - 1), "right"))
        i_lo = max(int(np.searchsorted(self.h, lam / (self.lo - 1), "left")), i_hi)
        return (i_hi * self.hi + (self.size - i_lo) * self.lo + (i_lo - i_hi)
                + lam * (self._w(i_lo) - self._w(i_hi)))

    def _first_reaching(self, scale: int, target: float) -> int:
        """First j with S(scale * h_j) >= target (binary search; S is nondecreasing)."""
        left, right = 0, self.size
        while left < right:
            mid = (left + right) // 2
            if self.total(scale * self.h[mid]) >= target:
                right = mid
            else:
                left = mid + 1
        return left

    def level(self, target: float) -> float:
        """The smallest lam with S(lam) = target, exact up to rounding: S is piecewise linear, so
        the segment holding the target is found among the breakpoints and solved in closed form.
        At target = size*lo the flat start is resolved to its right end, lam = (lo-1) h_min."""
        lo, hi, h = self.lo - 1, self.hi - 1, self.h
        if target <= self.size * self.lo:
            return float(lo * h[0])
        if target >= self.size * self.hi:
            return float(hi * h[-1])
        ja = self._first_reaching(lo, target)  # a_j < lam exactly for j < ja on the segment
        jb = self._first_reaching(hi, target)  # b_j < lam exactly for j < jb
        start = max(0.0, lo * h[ja - 1] if ja else 0.0, hi * h[jb - 1] if jb else 0.0)
        ends = ([lo * h[ja]] if ja < self.size else []) + ([hi * h[jb]] if jb < self.size else [])
        # On (start, end) the unclipped prompts are exactly jb <= j < ja.
        lam = start + (target - self.total(start)) / (self._w(ja) - self._w(jb))
        return float(min([lam, *ends]))


def hazard(p: np.ndarray) -> np.ndarray:
    """h = -log(1-p): kappa(p, n) = 1 - exp(-(n-1) h). 0 at p = 0, inf at p = 1."""
    h = np.negative(p)
    with np.errstate(divide="ignore"):
        np.log1p(h, out=h)
    return np.negative(h, out=h)


class Solution(NamedTuple):
    counts: np.ndarray  # continuous counts
    lam: float
    interior: Interior | None  # set in the interior phase, 0 < lam < inf
    inner_budget: int  # the part of the budget the 0 < p < 1 prompts share
    scratch: np.ndarray  # the sorted hazards' buffer, free once the interior is done with


def solve(h: np.ndarray, budget: int, lo: int, hi: int) -> Solution:
    """Continuous waterline from the hazards h, in three phases: p = 0 prompts fill first
    (lam = 0), then the interior rises with lam, then p = 1 prompts (lam = inf)."""
    ordered = np.sort(h)  # p = 0 (h = 0) first, p = 1 (h = inf) last
    n_zero = int(np.searchsorted(ordered, 0.0, "right"))
    n_one = h.size - int(np.searchsorted(ordered, np.inf, "left"))
    n_inner = h.size - n_zero - n_one
    extra = budget - h.size * lo
    if n_zero and extra <= n_zero * (hi - lo):
        counts = np.where(h == 0, lo + extra / n_zero, float(lo))
        return Solution(counts, 0.0, None, 0, ordered)
    inner_budget = budget - n_zero * hi - n_one * lo
    if n_inner and inner_budget <= n_inner * lo:
        # Everything at lo: report the lowest fidelity, the right end of S's flat start.
        counts = np.where(h == 0, float(hi), float(lo))
        return Solution(counts, (lo - 1) * float(ordered[n_zero]), None, 0, ordered)
    if n_inner == 0 or inner_budget >= n_inner * hi:
        if n_one and inner_budget > n_inner * hi:
            share = lo + (inner_budget - n_inner * hi) / n_one
            return Solution(np.where(h == np.inf, share, float(hi)), math.inf, None, 0, ordered)
        h_max = float(ordered[n_zero + n_inner - 1]) if n_inner else 0.0
        counts = np.where(h == np.inf, float(lo), float(hi))
        return Solution(counts, (hi - 1) * h_max, None, 0, ordered)
    interior = Interior(ordered[n_zero:n_zero + n_inner], lo, hi)
    lam = interior.level(inner_budget)
    # With 0 < lam < inf one formula covers every prompt: lam / 0 = inf puts p = 0 at hi and
    # lam / inf = 0 puts p = 1 at lo.
    with np.errstate(divide="ignore"):
        counts = np.divide(lam, h)
    counts += 1.0
    np.clip(counts, lo, hi, out=counts)
    return Solution(counts, lam, interior, inner_budget, ordered)


def round_paper(h, solution: Solution, budget, hi) -> np.ndarray:
    """The paper's exact-budget rounding: floor, then one extra rollout each to the prompts whose
    one-increment squared fidelity error (kappa(p, f + 1) - level)^2 is smallest (f the floor).

    Every eligible prompt has kappa(p, f + 1) >= level (its continuous count lies in [f, f + 1),
    or it sits at n_min above the level), so the smallest errors are the smallest
    kappa(p, f + 1) = 1 - exp(-f h): ranking f * h picks the same prompts without an exp.
    The solution's scratch buffer and then h itself serve as workspace (h is consumed).
    """
    scratch = np.add(solution.counts, 1e-9, out=solution.scratch)  # a hair below k is k
    counts = scratch.astype(np.int64)  # truncation is floor for positive counts
    short = budget - int(counts.sum())
    if short <= 0:
        return counts
    full = counts >= hi
    order_key = np.multiply(counts, h, out=scratch)  # f >= 2, so never 0 * inf
    np.copyto(order_key, np.inf, where=full)  # prompts at hi are not eligible
    np.copyto(h, order_key)  # h is done with: partition a copy of the keys in its place
    h.partition(short - 1)
    cut = h[short - 1]
    below = order_key < cut
    counts += below
    missing = short - int(np.count_nonzero(below))
    if missing:
        # Equal keys: lowest index first. A cut at inf is shared by p = 1 prompts (eligible)
        # and the prompts at hi (not eligible).
        tie = order_key == cut
        if np.isinf(cut):
            tie &= ~full
        counts[np.flatnonzero(tie)[:missing]] += 1
    return counts


def round_exact(h, solution: Solution, budget, lo, hi) -> np.ndarray:
    """Integer water-filling: raise, one rollout at a time, the prompt whose fidelity is lowest
    (ties: fewest rollouts, then lowest index). For 0 < p < 1 the result is the lexicographically
    max-min integer allocation; p = 0 and p = 1 follow the waterline's limits.

    Raising prompt q from n to n+1 has key (n-1) h_q, so the allocation takes the R smallest keys.
    The continuous solutions at budgets M and M - B bracket the R-th key, which is then selected in
    O(B) among fewer than 2B candidate keys.
    """
    if solution.interior is None:
        # Outside the interior phase the continuous counts are integers, except where several
        # p = 0 (or p = 1) prompts share a remainder evenly: the first of them get one more.
        counts = np.floor(solution.counts + 1e-9).astype(np.int64)
        rest = budget - int(counts.sum())
        counts[np.flatnonzero(solution.counts - counts > 1e-9)[:rest]] += 1
        return counts
    interior = solution.interior
    size = interior.size
    wanted = solution.inner_budget - size * lo  # increments to hand out over the interior
    t_low = interior.level(solution.inner_budget - size)
    # Keys are m * h_q for m = n - 1 in [lo - 1, hi - 2]. Those with m * h_q < t_low are taken
    # and those >= lam are not, so only m in [ceil(t_low / h), ceil(lam / h)) are candidates. A
    # float error could only matter when the R-th key lies within rounding of t_low or lam; then
    # the bracket is widened by one key on each side. p = 0 (h = 0) lands at hi and p = 1
    # (h = inf) at lo through the same formulas, with no candidates.
    for margin in (0, 1):
        picked = pick_keys(h, t_low, solution.lam, wanted, lo, hi, margin)
        if picked is not None:
            return picked + lo
    raise RuntimeError("integer water-filling lost its bracket; please report this input")


def _bracket(h, t, lo, hi, shift):
    """clip(ceil(t / h) + shift, lo - 1, hi - 1) as floats; t > 0, so t / 0 = inf, never NaN."""
    with np.errstate(divide="ignore"):
        out = np.divide(t, h)
    np.ceil(out, out=out)
    out += shift
    return np.clip(out, lo - 1, hi - 1, out=out)


def pick_keys(h, t_low, lam, wanted, lo, hi, margin):
    """Increments per prompt when the `wanted` smallest keys m * h_q are taken, or None when the
    bracket [t_low, lam) with this margin does not provably hold the wanted-th key."""
    first = _bracket(h, t_low, lo, hi, -margin)
    last = _bracket(h, lam, lo, hi, margin)
    taken = first - (lo - 1)
    need = wanted + int((h == 0).sum()) * (hi - lo) - int(taken.sum())
    sizes = last - first
    # Candidates come in layers: layer j holds the (j+1)-th candidate of each prompt that has one.
    layers, idx, j = [], np.flatnonzero(sizes > 0), 0
    while idx.size:
        layers.append(idx)
        j += 1
        idx = idx[sizes[idx] > j]
    if not layers:
        return taken.astype(np.int64) if need == 0 else None
    owner = np.concatenate(layers)
    m = first[owner] + np.repeat(np.arange(len(layers), dtype=float), [x.size for x in layers])
    keys = m * h[owner]
    if not 0 <= need <= keys.size:
        return None
    if need == 0:
        return taken.astype(np.int64)
    cut = np.partition(keys, need - 1)[need - 1]
    if margin == 0 and not t_low * (1 + 1e-12) < cut < lam * (1 - 1e-12):
        return None
    chosen = keys < cut
    tie = np.flatnonzero(keys == cut)
    # Equal fidelity: fewest rollouts first (smaller m), then the lower index.
    tie = tie[np.lexsort((owner[tie], m[tie]))][: need - int(chosen.sum())]
    chosen[tie] = True
    # A prompt's keys grow with m, so its chosen candidates are a prefix: count them per layer.
    start = 0
    for layer in layers:
        stop = start + layer.size
        taken[layer[chosen[start:stop]]] += 1
        start = stop
    return taken.astype(np.int64)
