"""The integer roundings of the continuous waterline (a level.Solution), both in O(B) after it.

round_paper is the paper's: the floors, then one rollout more to the prompts whose keys f h are
smallest. round_exact is the exact integer max-min: the smallest keys (n-1) h, selected among the
candidates of a bracket around the cut (pick_keys), first a narrow one (_near), then the proved
one. The readable specification of both roundings is kept in tests/test_allocation.py.
"""

from __future__ import annotations

import math

import numpy as np

# _smallest selects the cut as select_level selects the level: from SELECT_FROM keys on, from a
# sample sized by SAMPLE, between pivots _SPREAD standard errors out.
from sera.waterfill.level import _SPREAD, SAMPLE, SELECT_FROM, Solution, _level


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
