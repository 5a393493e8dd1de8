"""The continuous water level: S(lam) = sum_q clip(1 + lam/h_q, lo, hi) solved for the budget.

The level is found by one sort of the hazards (Interior) or, for large batches, by selection in
expected linear time (select_level); `solve` places the p = 0 and p = 1 prompts around it and
returns the continuous waterline (Solution) that both roundings (sera.waterfill.rounding) start
from. The sum that fixes the level is taken directly over the prompts it concerns (never as a
difference of running totals that include a huge 1/h), so a batch may mix p = 1e-300 with
p = 1 - 1e-16. Derivations: notebooks/02_waterline_allocation.ipynb.

Names: the free prompts are the unclipped ones, lo < 1 + lam/h < hi at a level or throughout a
bracket of levels (`free` a mask of them, `n_free` their number); `slope` is a sum of their 1/h,
the rate at which S rises with lam there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np

# When sum(1/h) could come within 16x of overflow (n / h_min > 2**1020), the hazards are scaled
# up by a power of two, which is exact and changes only the units of lam.
_HEADROOM = 2.0**-1020


class Interior:
    """The prompts with 0 < h < inf, sorted, and S(lam) = sum_q clip(1 + lam/h_q, lo, hi).

    Prompt j sits at lo for lam <= (lo-1) h_j and at hi for lam >= (hi-1) h_j; both breakpoint
    lists are sorted with h. The search over breakpoints reads sums of 1/h from one suffix sum
    (accumulated from the smallest 1/h up); the segment found is then solved from a direct sum
    over its own prompts.
    """

    # The search evaluates S at breakpoints in one vectorised call a round: at every one of a
    # range up to ALL_AT_ONCE_UP_TO long (one round for a training batch), else at PROBES of them,
    # about log(n) / log(PROBES) rounds in all (benchmarks/allocation_speed.py, part 4, times
    # other values).
    ALL_AT_ONCE_UP_TO = 256
    PROBES = 64

    def __init__(self, h: np.ndarray, lo: int, hi: int):
        self.h, self.lo, self.hi, self.size = h, lo, hi, h.size
        # suffix[i] = sum of 1/h_j over j >= i; suffix[size] = 0.
        self.suffix = np.append(np.cumsum(1.0 / h[::-1])[::-1], 0.0)

    def total(self, lam):
        """S(lam) for a level or an array of levels, to within rounding of the suffix sums
        (used only to steer the search)."""
        i_hi = np.searchsorted(self.h, lam / (self.hi - 1), "right")
        i_lo = np.maximum(np.searchsorted(self.h, lam / (self.lo - 1), "left"), i_hi)
        slope = self.suffix[i_hi] - self.suffix[i_lo]
        # The counts in float64, exact below 2**53 as Python's integers were; above, one rounding
        # per term instead of a silent int64 wrap.
        i_hi, i_lo = np.asarray(i_hi, dtype=float), np.asarray(i_lo, dtype=float)
        return i_hi * self.hi + (self.size - i_lo) * self.lo + (i_lo - i_hi) + lam * slope

    def _first_reaching(self, scale: int, target: float) -> int:
        """First j with S(scale * h_j) >= target, size if none (S is nondecreasing). Each round
        evaluates S at every breakpoint of the range left, or at PROBES evenly spaced ones, the
        last at its end, and keeps the gap between the last one short of the target and the
        first reaching it."""
        left, right = 0, self.size  # the answer lies in [left, right]
        while right - left > max(self.ALL_AT_ONCE_UP_TO, self.PROBES):
            probes = left + (np.arange(1, self.PROBES + 1) * (right - left)) // self.PROBES - 1
            first = int(np.searchsorted(self.total(scale * self.h[probes]), target))
            if first == self.PROBES:
                return right
            left, right = (int(probes[first - 1]) + 1 if first else left), int(probes[first])
        return left + int(np.searchsorted(self.total(scale * self.h[left:right]), target))

    def level(self, target: int) -> float:
        """The smallest lam with S(lam) = target. S is piecewise linear: the segment holding the
        target is found among the breakpoints, then solved in closed form. At target = size*lo
        the flat start resolves to its right end, lam = (lo-1) h_min."""
        # A prompt at n rollouts has n - 1 increments; its breakpoints are m_lo h and m_hi h.
        m_lo, m_hi, h = self.lo - 1, self.hi - 1, self.h
        if target <= self.size * self.lo:
            return float(m_lo * h[0])
        if target >= self.size * self.hi:
            return float(m_hi * h[-1])
        ja = self._first_reaching(m_lo, target)  # prompts j >= ja sit at lo on the segment
        jb = min(self._first_reaching(m_hi, target), ja)  # prompts j < jb sit at hi
        start = max(0.0, m_lo * h[ja - 1] if ja else 0.0, m_hi * h[jb - 1] if jb else 0.0)
        end = min(m_lo * h[ja] if ja < self.size else math.inf, m_hi * h[jb])
        # On the segment the unclipped prompts are jb <= j < ja: target - (the clipped prompts'
        # counts and the unclipped prompts' 1 each) is an exact integer, divided by sum 1/h.
        fixed = jb * self.hi + (self.size - ja) * self.lo + (ja - jb)
        slope = float(np.sum(1.0 / h[jb:ja]))
        lam = (target - fixed) / slope if slope > 0 else start
        return float(min(max(lam, start), end))


# From this many interior prompts on the level is found by selection rather than a sort: past
# the sizes where the two cost the same (benchmarks/allocation_speed.py, part 4, prints both).
SELECT_FROM = 2**16
SAMPLE = 4096  # prompts sampled per round; once no more are left, they are sorted
_ROUNDS = 16  # then the rest is sorted whatever its size: no worse than a sort of everything
_SPREAD = 4.0  # standard errors of the sample's estimate of S between the level and each pivot


def _count_sum(h: np.ndarray, lam: float, lo: int, hi: int, out=None) -> float:
    """sum clip(1 + lam/h, lo, hi) over h (out: h.size floats of working memory, optional)."""
    with np.errstate(divide="ignore", over="ignore"):
        counts = np.divide(lam, h, out=out)
    np.add(counts, 1.0, out=counts)
    return float(np.clip(counts, lo, hi, out=counts).sum())


def _pivots(sample, scale, fixed, slope, low, high, target, lo, hi):
    """Two breakpoints of the sampled prompts inside (low, high) expected to bracket the level:
    S estimated from the sample (times scale), _SPREAD standard errors below and above target."""
    # Both breakpoint lists are sorted with the sample: their parts inside, merged (a value
    # twice over moves no pivot).
    cand = [m * sample for m in (lo - 1, hi - 1)]
    cand = np.sort(np.concatenate([c[np.searchsorted(c, low, "right"):np.searchsorted(c, high)]
                                   for c in cand]), kind="stable")
    estimate = fixed + cand * slope + scale * Interior(sample, lo, hi).total(cand)
    near = cand[min(int(np.searchsorted(estimate, target)), cand.size - 1)]
    with np.errstate(over="ignore"):
        spread = np.clip(near / sample + 1.0, lo, hi).std()
    error = _SPREAD * scale * math.sqrt(sample.size) * spread + 1.0
    first = max(int(np.searchsorted(estimate, target - error)) - 1, 0)
    return cand[first], cand[min(int(np.searchsorted(estimate, target + error)), cand.size - 1)]


def _largest_below(m: int, bound: float, strict: bool) -> float:
    """The largest h with fl(m h) <= bound (< bound if strict), for an integer m >= 1.

    Rounded multiplication by m never decreases, so m h <= bound exactly when h is at most this:
    a prompt is settled by comparing its hazard with a few such numbers, without forming m h,
    and lands where comparing m h with the bound would put it."""
    if bound == math.inf:
        return math.inf

    def holds(x):
        return m * x < bound if strict else m * x <= bound

    x = bound / m
    while not holds(x):
        x = math.nextafter(x, -math.inf)
    while holds(step := math.nextafter(x, math.inf)):
        x = step
    return x


class _Settled(NamedTuple):
    """How the prompts left stand over a bracket (low, high): counts of those at hi, at lo and
    unclipped throughout, the latter's sum of 1/h, and the prompts with a breakpoint inside."""

    n_hi: int
    n_lo: int
    n_free: int
    slope: float
    moving: np.ndarray

    def total(self, lam: float, lo: int, hi: int) -> float:
        """The settled prompts' counts at lam, inside the bracket, plus the moving ones'."""
        return (self.n_hi * hi + self.n_lo * lo + self.n_free + lam * self.slope
                + _count_sum(self.moving, lam, lo, hi))


def _settle(h: np.ndarray, low: float, high: float, lo: int, hi: int,
            scratch: np.ndarray) -> _Settled:
    """Place the prompts h by where their breakpoints (lo - 1) h < (hi - 1) h fall against the
    bracket (low, high), low < high: at hi throughout ((hi - 1) h <= low), at lo throughout
    ((lo - 1) h >= high), unclipped throughout ((lo - 1) h <= low and (hi - 1) h >= high), or
    moving (a breakpoint inside).
    scratch: h.size floats of working memory."""
    m_lo, m_hi = lo - 1, hi - 1
    below_hi = h > _largest_below(m_hi, low, False)  # not at hi
    above_lo = h <= _largest_below(m_lo, high, True)  # not at lo
    free = h > _largest_below(m_hi, high, True)
    free &= h <= _largest_below(m_lo, low, False)
    moving = below_hi & above_lo
    np.greater(moving, free, out=moving)  # free prompts are neither at hi nor at lo
    # Both as below are several times faster than a masked division or a boolean index when
    # the mask has no long runs.
    np.divide(1.0, h, out=scratch)
    slope = float(np.multiply(scratch, free, out=scratch).sum())
    return _Settled(h.size - int(np.count_nonzero(below_hi)),
                    h.size - int(np.count_nonzero(above_lo)), int(np.count_nonzero(free)),
                    slope, np.compress(moving, h))


def _narrow(h: np.ndarray, lo: int, hi: int, target: int, work: np.ndarray):
    """select_level's rounds: bracket the level (S(low) < target <= S(high)) and settle every
    prompt with no breakpoint inside the bracket, until at most SAMPLE are left. Returns the
    prompts left, low, high, the settled prompts' counts at hi, at lo and unclipped, and the
    sum of 1/h over the settled unclipped ones. work: h.size floats of working memory.

    Each round settles the prompts against the sampled bracket first and checks it with S summed
    from what it settled (the moving prompts summed directly): where the level lies inside, as it
    nearly always does, that is the round's one pass over the prompts left; where not, they are
    settled again against the side that holds it."""
    n_hi = n_lo = n_free = 0
    slope = 0.0
    low, high = 0.0, math.inf
    for _ in range(_ROUNDS):
        if h.size <= SAMPLE:
            break
        fixed = n_hi * hi + n_lo * lo + n_free
        sample = np.sort(h[:: h.size // SAMPLE])
        t1, t2 = _pivots(sample, h.size / sample.size, fixed, slope, low, high, target, lo, hi)
        scratch = work[: h.size]
        settled = _settle(h, t1, t2, lo, hi, scratch) if t1 < t2 else None
        if settled is not None:
            s1, s2 = (fixed + t * slope + settled.total(t, lo, hi) for t in (t1, t2))
        else:
            s1 = s2 = fixed + t1 * slope + _count_sum(h, t1, lo, hi, out=scratch)
        if settled is not None and s1 < target <= s2:
            low, high = t1, t2
        else:
            low, high = (low, t1) if s1 >= target else (t2, high)
            settled = _settle(h, low, high, lo, hi, scratch)
        n_hi += settled.n_hi
        n_lo += settled.n_lo
        n_free += settled.n_free
        slope += settled.slope
        h = settled.moving
    return h, low, high, n_hi, n_lo, n_free, slope


def select_level(h: np.ndarray, lo: int, hi: int, target: int,
                 scratch: np.ndarray | None = None) -> float:
    """The smallest lam with S(lam) = target, as Interior.level, from hazards 0 < h < inf in any
    order and in expected linear time, the way the O(n) projections onto the simplex find their
    threshold without a sort.

    Each round brackets the level between two breakpoints chosen from a strided sample of the
    prompts left, checks the bracket with S summed exactly, and settles every prompt with no
    breakpoint inside it: at lo, at hi, or unclipped throughout (their sum of 1/h kept, summed
    directly). Every prompt left has a breakpoint inside the bracket; once at most SAMPLE are
    left they are sorted and the segment holding the target is solved in closed form.

    Parameters
    ----------
    h : ndarray of float
        Hazards of the interior prompts, 0 < h < inf, in any order (scaled as `solve` does).
    lo, hi : int
        Bounds of every prompt's count.
    target : int
        The interior's budget.
    scratch : ndarray of float, optional
        At least h.size floats of working memory (allocated here when not given).
    """
    m_lo, m_hi = lo - 1, hi - 1
    if target <= h.size * lo:
        return float(m_lo * h.min())
    if target >= h.size * hi:
        return float(m_hi * h.max())
    work = np.empty(h.size) if scratch is None else scratch
    h, low, high, n_hi, n_lo, n_free, slope = _narrow(h, lo, hi, target, work)
    # The prompts left, sorted: S at each of their breakpoints inside (low, high), then the
    # segment holding the target, as in Interior.level.
    h = np.sort(h)
    a, b = m_lo * h, m_hi * h
    cand = np.unique(np.concatenate([a[(a > low) & (a < high)], b[(b > low) & (b < high)]]))
    totals = n_hi * hi + n_lo * lo + n_free + cand * slope + Interior(h, lo, hi).total(cand)
    k = int(np.searchsorted(totals, target))  # the first breakpoint with S >= target
    start = cand[k - 1] if k else low
    end = cand[k] if k < cand.size else high
    free = (a <= start) & (b >= end)
    fixed = ((n_hi + int(np.count_nonzero(b <= start))) * hi + n_free + int(np.count_nonzero(free))
             + (n_lo + int(np.count_nonzero(a >= end))) * lo)
    slope += float(np.sum(1.0 / h[free]))
    lam = (target - fixed) / slope if slope > 0 else start
    return float(min(max(lam, start), end))


def _level(inner: np.ndarray, lo: int, hi: int, scratch: np.ndarray | None = None):
    """The interior's level as a function of its budget: from a sort of its hazards
    (Interior), or from SELECT_FROM prompts on by selection (select_level, given scratch)."""
    if inner.size < SELECT_FROM:
        return Interior(np.sort(inner), lo, hi).level
    return partial(select_level, inner, lo, hi, scratch=scratch)


@dataclass(frozen=True)
class Solution:
    """The continuous waterline of one batch, in the batch's order."""

    counts: np.ndarray  # continuous counts
    h: np.ndarray  # hazards, multiplied by 2**shift
    lam_scaled: float  # water level in the units of h
    shift: int
    inner_budget: int  # the part of the budget the 0 < p < 1 prompts share
    n_inner: int  # prompts with 0 < p < 1
    interior: bool  # the level lies in the interior phase, 0 < lam < inf
    n_zero: int  # prompts with p = 0

    @property
    def lam(self) -> float:
        """The water level of kappa = 1 - exp(-lam)."""
        return math.ldexp(self.lam_scaled, -self.shift) if math.isfinite(self.lam_scaled) \
            else self.lam_scaled


def solve(h: np.ndarray, budget: int, lo: int, hi: int) -> Solution:
    """The continuous waterline, in three phases: p = 0 prompts fill first (lam = 0), then the
    interior rises with lam, then p = 1 prompts (lam = inf). The interior's level comes from a
    sort of its hazards (Interior), or from SELECT_FROM prompts on by selection (select_level).

    Parameters
    ----------
    h : ndarray of float
        Hazards -log(1-p) (see `hazard`); not modified.
    budget : int
        Total rollouts, with len(h) * lo <= budget <= len(h) * hi.
    lo, hi : int
        Bounds of every prompt's count (lo >= 2).
    """
    # Two reductions first: most batches hold neither p = 0 nor p = 1.
    h_min = h.min(initial=np.inf)
    n_zero = int(np.count_nonzero(h == 0)) if h_min == 0 else 0
    n_one = int(np.count_nonzero(h == np.inf)) if h.max(initial=0.0) == np.inf else 0
    n_inner = h.size - n_zero - n_one
    inner = h if n_inner == h.size else h[(h > 0) & (h < np.inf)]
    shift, h_min = 0, h_min if n_inner == h.size else inner.min(initial=np.inf)
    if n_inner and h_min < n_inner * _HEADROOM:
        shift = -int(np.frexp(h_min)[1]) - 900  # h_min * 2**shift is about 2**-900
        h, h_min = h * 2.0**shift, h_min * 2.0**shift
        inner = h if n_inner == h.size else inner * 2.0**shift
    inner_budget = budget - n_zero * hi - n_one * lo

    def done(counts, lam, interior=False):
        return Solution(counts, h, float(lam), shift, inner_budget, n_inner, interior, n_zero)

    extra = budget - h.size * lo
    if n_zero and extra <= n_zero * (hi - lo):
        return done(np.where(h == 0, lo + extra / n_zero, float(lo)), 0.0)
    if n_inner and inner_budget <= n_inner * lo:
        # Everything at lo: report the lowest fidelity, the right end of S's flat start.
        return done(np.where(h == 0, float(hi), float(lo)), (lo - 1) * h_min)
    if n_inner == 0 or inner_budget >= n_inner * hi:
        if n_one and inner_budget > n_inner * hi:
            share = lo + (inner_budget - n_inner * hi) / n_one
            return done(np.where(h == np.inf, share, float(hi)), math.inf)
        h_max = inner.max() if n_inner else 0.0
        return done(np.where(h == np.inf, float(lo), float(hi)), (hi - 1) * h_max)
    counts = np.empty(h.size)  # the selection's working memory first
    lam = _level(inner, lo, hi, scratch=counts)(inner_budget)
    # With 0 < lam < inf one formula covers every prompt: lam / 0 = inf puts p = 0 at hi and
    # lam / inf = 0 puts p = 1 at lo.
    with np.errstate(divide="ignore", over="ignore"):
        np.divide(lam, h, out=counts)
    np.add(counts, 1.0, out=counts)
    return done(np.clip(counts, lo, hi, out=counts), lam, True)
