"""The water level and its integer roundings: the numerical core behind sera.allocate.

The continuous waterline is solved from the hazards h = -log(1-p), by one sort or, for large
batches, by selection in expected linear time; the paper's rounding and the exact integer max-min
both run in O(B) after it. The sum that fixes the level is taken directly over the prompts it
concerns (never as a difference of running totals that include a huge 1/h), so a batch may mix
p = 1e-300 with p = 1 - 1e-16. Derivations: notebooks/02_waterline_allocation.ipynb; the readable
specification of both roundings is kept in tests/test_allocation.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, partial
from typing import NamedTuple

import numpy as np

# When sum(1/h) could come within 16x of overflow (n / h_min > 2**1020), the hazards are scaled
# up by a power of two, which is exact and changes only the units of lam.
_HEADROOM = 2.0**-1020


def hazard(p: np.ndarray) -> np.ndarray:
    """h = -log(1-p), so that kappa(p, n) = 1 - exp(-(n-1) h); 0 at p = 0, inf at p = 1.

    Where numpy has no vectorised log1p for float64 but a vectorised log (its AVX2 build), h is
    taken from log(u), u = fl(1 - p), plus the rounding error of u, which two exact operations
    give: as accurate (within an ulp of the exact value; tests/test_allocation.py checks both
    ways over the whole range) and faster than the scalar log1p loop.

    Parameters
    ----------
    p : ndarray of float
        Success probabilities in [0, 1].
    """
    h = np.empty(np.shape(p))  # one array, written over in place
    if _log1p_vectorised():
        np.negative(p, out=h)
        with np.errstate(divide="ignore"):
            np.log1p(h, out=h)
        return np.subtract(0.0, h, out=h)  # 0 - x, not -x: +0 at p = -0 as at p = 0
    return _hazard_from_log(p, h)


def _hazard_from_log(p: np.ndarray, out: np.ndarray) -> np.ndarray:
    """-log(1 - p) from log: with u = fl(1 - p) and e = p + (u - 1) = u - (1 - p) (both steps
    below are exact: Sterbenz's lemma where p <= 1/2, and e = 0 where 1 - p is exact),
    -log(1 - p) = -log(u) + e/u + O(e^2); e is nonzero only where u >= 1/2 and is at most 2^-54,
    so taking e for e/u costs at most 2^-53 p, half an ulp of h >= p. p = 0 and p = -0 give +0,
    p = 1 gives inf."""
    u = np.subtract(1.0, p, out=out)
    e = np.subtract(u, 1.0, out=np.empty_like(u))  # exact (out=: an array for 0-d p too)
    np.add(p, e, out=e)  # -0 + 0 = +0
    with np.errstate(divide="ignore"):
        log_u = np.log(u, out=u)
    return np.subtract(e, log_u, out=log_u)


@cache
def _log1p_vectorised() -> bool:
    """Whether numpy's float64 log1p runs a SIMD loop on this machine, or its log runs none
    either (numpy.lib.introspect names the loop each dispatches to)."""
    try:
        from numpy.lib.introspect import opt_func_info  # numpy 2.0 and later
    except ImportError:
        return True

    def target(name):
        return opt_func_info(func_name=f"^{name}$", signature="float64")[name]["dd"]["current"]

    return not target("log1p").startswith("baseline") or target("log").startswith("baseline")


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
        free = self.suffix[i_hi] - self.suffix[i_lo]
        # The counts in float64, exact below 2**53 as Python's integers were; above, one rounding
        # per term instead of a silent int64 wrap.
        i_hi, i_lo = np.asarray(i_hi, dtype=float), np.asarray(i_lo, dtype=float)
        return i_hi * self.hi + (self.size - i_lo) * self.lo + (i_lo - i_hi) + lam * free

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
        free = float(np.sum(1.0 / h[jb:ja]))
        lam = (target - fixed) / free if free > 0 else start
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
    free = slope + float(np.sum(1.0 / h[free]))
    lam = (target - fixed) / free if free > 0 else start
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


def round_paper(solution: Solution, budget: int, hi: int) -> np.ndarray:
    """The paper's exact-budget rounding: floor, then one extra rollout each to the prompts whose
    one-increment squared fidelity error (kappa(p, f + 1) - level)^2 is smallest (f the floor).

    Every eligible prompt has kappa(p, f + 1) >= level (its continuous count lies in [f, f + 1),
    or it sits at n_min above the level), so the smallest errors are the smallest
    kappa(p, f + 1) = 1 - exp(-f h): ranking f * h picks the same prompts without an exp.
    Ties go to the lowest index.

    Parameters
    ----------
    solution : Solution
        The waterline from `solve`.
    budget : int
        The budget `solution` was solved for.
    hi : int
        The upper bound; a prompt at hi gets no extra rollout.
    """
    # One array of B numbers (each new one costs page faults at 10^6 prompts): the floors as
    # floats (their sum is exact, whole numbers below 2**53), then the keys in their place, then
    # the integer counts in the keys' memory.
    c, hair = solution.counts, 1e-9  # a hair below k is k
    floor = np.add(c, hair)
    np.floor(floor, out=floor)
    short = budget - int(floor.sum())
    if short < 0:  # only if many counts sit within a hair below an integer
        hair = 0.0
        np.floor(c, out=floor)
        short = budget - int(floor.sum())

    def floors_as_counts():
        counts = floor.view(np.int64)  # the floors' (or keys') memory, read no more
        np.add(c, hair, out=counts, casting="unsafe")  # the same floors, as integers
        return counts

    if short == 0:
        return floors_as_counts()
    # A prompt at hi is not eligible: its key is divided by 0 (inf, or NaN at p = 0, which
    # selection puts last and no comparison takes), cheaper than any masked write.
    eligible = floor < hi
    key = np.multiply(floor, solution.h, out=floor)  # f >= 2, so never 0 * inf
    if not eligible.all():
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(key, eligible, out=key)
    cut = _smallest(key, short - 1)
    below = key <= cut
    tie = None
    if not (cut < math.inf and int(np.count_nonzero(below)) == short):
        # Keys equal to the cut beyond the budget: lowest index first. A cut at inf is shared by
        # p = 1 prompts (eligible) and the prompts at hi (not eligible).
        below = np.less(key, cut, out=below)
        missing = short - int(np.count_nonzero(below))
        tie = np.flatnonzero((key == cut) & eligible)[:missing]
    counts = floors_as_counts()
    counts += below
    if tie is not None:
        counts[tie] += 1
    return counts


def _smallest(key: np.ndarray, rank: int) -> float:
    """The rank-th smallest of key (from 0; NaN counts as largest), key left as it is. From
    SELECT_FROM keys on it is selected among those between two keys of a strided sample that
    bracket it with high probability (checked; else, and below SELECT_FROM, from a partition of a
    copy): a few comparisons of the keys in place instead of a copy of them all."""
    if key.size >= SELECT_FROM:
        sample = np.sort(key[:: max(1, key.size // (4 * SAMPLE))])
        at, share = rank / key.size * sample.size, rank / key.size
        spread = _SPREAD * math.sqrt(sample.size * share * (1 - share)) + 1  # binomial sd
        low = sample[int(at - spread)] if at - spread >= 0 else -np.inf
        high = sample[int(at + spread) + 1] if at + spread + 1 < sample.size else np.inf
        under = key < low
        inside = np.greater(key < high, under)  # low <= key < high (NaN in neither)
        need = rank - int(np.count_nonzero(under))
        among = np.compress(inside, key)
        if 0 <= need < among.size:
            return float(np.partition(among, need)[need])
    return float(np.partition(key, rank)[rank])


def round_exact(solution: Solution, budget: int, lo: int, hi: int) -> np.ndarray:
    """Integer water-filling: raise, one rollout at a time, the prompt whose fidelity is lowest
    (ties: fewest rollouts, then lowest index). For 0 < p < 1 the result is the lexicographically
    max-min integer allocation; p = 0 and p = 1 follow the waterline's limits.

    Raising prompt q from n to n+1 has key (n-1) h_q, so the allocation takes the R smallest keys.
    The continuous solutions at budgets M and M - B bracket the R-th key, which is then selected in
    O(B) among fewer than 2B candidate keys; a narrower bracket found first (_near) leaves a few
    percent of them, and the proved one is solved only when that one fails its check.

    Parameters
    ----------
    solution : Solution
        The waterline from `solve`.
    budget : int
        The budget `solution` was solved for.
    lo, hi : int
        Bounds of every prompt's count.
    """
    if not solution.interior:
        # Outside the interior phase the continuous counts are integers, except where several
        # p = 0 (or p = 1) prompts share a remainder evenly: the first of them get one more.
        counts = np.floor(solution.counts + 1e-9).astype(np.int64)
        rest = budget - int(counts.sum())
        counts[np.flatnonzero(solution.counts - counts > 1e-9)[:rest]] += 1
        return counts
    wanted = solution.inner_budget - solution.n_inner * lo  # increments over the interior
    h, lam = solution.h, solution.lam_scaled
    # First a narrow bracket around the cut (_near: at most max(1024, n/32) candidate keys
    # where the proved one holds about n), then the proved one: keys m h_q (m = n - 1) below
    # t_low are surely taken and keys at or above lam surely not.
    # Float error matters only when a key lies within rounding of a bracket's end; the
    # selection checks itself, and a failed check widens the bracket by `margin` keys on each
    # side. The last bracket makes every interior key a candidate, where the check cannot fail.
    near = _near(h, lam, wanted + solution.n_zero * (hi - lo), lo, hi)
    picked = None if near is None else pick_keys(h, *near, wanted, lo, hi, 0, solution.n_zero)
    if picked is not None:
        return picked + lo
    t_low = _t_low(solution, lo, hi)
    tries = [(t_low, lam, 0), (t_low, lam, 1), (t_low, lam, 8),
             (math.ulp(0.0), np.finfo(float).max, 0)]
    for low, high, margin in tries:
        picked = pick_keys(h, low, high, wanted, lo, hi, margin, solution.n_zero)
        if picked is not None:
            return picked + lo
    raise AssertionError("integer water-filling failed with every key a candidate")


def _t_low(solution: Solution, lo: int, hi: int) -> float:
    """The interior's level at n_inner fewer rollouts: the proved lower end of round_exact's
    bracket."""
    h = solution.h
    inner = h if solution.n_inner == h.size else h[(h > 0) & (h < np.inf)]
    return _level(inner, lo, hi)(solution.inner_budget - solution.n_inner)


_ROUNDS_NEAR = 8  # evaluations of K that _near spends before leaving the cut to the proved bracket


def _near(h: np.ndarray, lam: float, target: int, lo: int, hi: int):
    """A narrow bracket (t1, t2) holding the target-th smallest key, K(t1) <= target <= K(t2)
    with at most max(1024, n/32) keys between, K(t) being the number of keys m h_q < t (m in
    [lo - 1, hi - 1), every key of a p = 0 prompt counted); None where it takes more than
    _ROUNDS_NEAR evaluations of K.

    At the continuous level lam, K exceeds the target by the unclipped prompts' rounding up,
    ceil(lam / h) - lam / h (about half a key each), and falls at about the rate sum 1/h over
    them as t falls: the first guess is that many keys below lam; then the bracket closes by
    false position on K's stored values (Illinois)."""
    counts = _bracket(h, lam, lo, hi, 0)
    high, k_high = lam, int(counts.sum()) - h.size * (lo - 1) - target
    free = (counts > lo - 1) & (counts < hi - 1)
    if k_high < 0 or not free.any():
        return None
    if k_high == 0:
        return lam, lam
    slope = float(np.sum(1.0 / np.compress(free, h)))  # faster than a masked division
    enough = max(1024, h.size // 32)
    low = k_low = None
    weight_low = weight_high = 1.0  # Illinois: the end kept twice running counts half
    t = max(lam - k_high / slope, math.ulp(0.0))
    for _ in range(_ROUNDS_NEAR):
        k = _keys_below(h, t, lo, hi, out=counts) - target  # counts' memory, read no more
        if k >= 0:
            high, k_high, weight_high = t, k, 1.0
            weight_low /= 2
        else:
            low, k_low, weight_low = t, k, 1.0
            weight_high /= 2
        if low is None:  # still above the cut: step down by the slope, a little past it
            t = max(t - (k + math.sqrt(h.size)) / slope, math.ulp(0.0))
            continue
        if k_high - k_low <= enough:
            return low, high
        below, above = -k_low * weight_low, k_high * weight_high
        t = low + (high - low) * below / (below + above)
    return None


def _keys_below(h: np.ndarray, t: float, lo: int, hi: int, out=None) -> int:
    """K(t): the keys m h_q < t over every prompt q and m in [lo - 1, hi - 1), for t > 0 (out:
    h.size floats of working memory, optional)."""
    return int(_bracket(h, t, lo, hi, 0, out).sum()) - h.size * (lo - 1)


def _bracket(h, t, lo, hi, offset, out=None):
    """clip(ceil(t / h) + offset, lo - 1, hi - 1): the first key index m with m h >= t (in out,
    when given)."""
    with np.errstate(divide="ignore", over="ignore"):
        first = np.divide(t, h, out=out)  # t > 0: t / 0 = inf puts a p = 0 prompt's keys below t
    np.ceil(first, out=first)
    if offset:
        first += offset
    return np.clip(first, lo - 1, hi - 1, out=first)


_CLEARANCE = 2.0**-50  # eight units in the last place
_NORMAL = 2.0**-1000  # below it a quotient may be subnormal, where rounding is not relative


def _clears(cut: float, t_low: float, lam: float) -> bool:
    """Whether the cut provably lies above every taken non-candidate key and below every key
    left, without looking at them.

    With q = fl(t / h), first - 1 < q <= (t / h)(1 + u) (ceil, the margin and the clip only move
    first down, or leave the prompt no taken key), so fl((first - 1) h) < t_low (1 + u)^2; and
    likewise fl(last h) >= lam (1 - u)^2, u = 2^-53. A cut clearing both by eight units in the
    last place needs no search for the extremes (_extremes), which settles it otherwise."""
    return _NORMAL <= t_low and t_low * (1 + _CLEARANCE) < cut < lam * (1 - _CLEARANCE)


def _extremes(h, first, last, lo, hi) -> tuple[float, float]:
    """The largest taken non-candidate key, (first - 1) h over the prompts with a key taken, and
    the smallest key left, last h over those with a key left. The few prompts without are
    written over by index, which costs less than a masked reduction."""
    with np.errstate(invalid="ignore"):  # 0 * inf where a p = 1 prompt has no keys
        top = np.multiply(first - 1, h)
        bottom = np.multiply(last, h)
    top[np.flatnonzero(first <= lo - 1)] = -np.inf
    bottom[np.flatnonzero(last >= hi - 1)] = np.inf
    return float(top.max(initial=-np.inf)), float(bottom.min(initial=np.inf))


def pick_keys(h, t_low, lam, wanted, lo, hi, margin, n_zero=None):
    """Increments per prompt when the `wanted` smallest interior keys are taken, or None when the
    bracket [t_low, lam) widened by `margin` keys does not provably hold the wanted-th key.

    Prompt q's keys m h_q with m < first_q are taken, those with m >= last_q are not, and the rest
    are candidates. The choice is proved right when every taken non-candidate key lies below the
    cut and every other non-candidate key above it, so no tie can involve them.

    Parameters
    ----------
    h : ndarray of float
        The hazards (in the units of the solution's level).
    t_low, lam : float
        The bracket's ends: _near's narrow one, or the proved one (the levels at fewer and at
        all the interior's increments).
    wanted : int
        Increments above lo to hand out over the interior prompts.
    lo, hi : int
        Bounds of every prompt's count.
    margin : int
        Keys added to each side of every prompt's bracket.
    n_zero : int, optional
        The prompts with h = 0 (counted here when not given).
    """
    first = _bracket(h, t_low, lo, hi, -margin)
    last = _bracket(h, lam, lo, hi, margin)
    taken = np.subtract(first, lo - 1, out=np.empty(h.size, dtype=np.int64), casting="unsafe")
    n_zero = int(np.count_nonzero(h == 0)) if n_zero is None else n_zero
    need = wanted + n_zero * (hi - lo) - int(taken.sum())
    sizes = np.subtract(last, first)
    # The prompts with candidates (few, in a narrow bracket); nonzero on a float array costs
    # several times the comparison.
    active = np.flatnonzero(sizes != 0)
    sizes = sizes[active].astype(np.int64)
    owner = np.repeat(active, sizes)
    m = first[owner] + (np.arange(owner.size) - np.repeat(np.cumsum(sizes) - sizes, sizes))
    keys = m * h[owner]
    if not 0 <= need <= keys.size:
        return None
    if need == 0:
        top_taken, low_left = _extremes(h, first, last, lo, hi)
        return taken if top_taken < min(low_left, keys.min(initial=np.inf)) else None
    cut = np.partition(keys, need - 1)[need - 1]
    if not _clears(cut, t_low, lam):
        top_taken, low_left = _extremes(h, first, last, lo, hi)
        if not top_taken < cut < low_left:
            return None
    chosen = keys < cut
    tie = np.flatnonzero(keys == cut)
    # Equal fidelity: fewest rollouts first (smaller m), then the lower index.
    tie = tie[np.lexsort((owner[tie], m[tie]))][: need - int(chosen.sum())]
    chosen[tie] = True
    return taken + np.bincount(owner[chosen], minlength=h.size)
