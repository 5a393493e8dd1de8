"""The observability safeguard: the largest prefix of prompts, ranked by how likely they are to show
a mixed group, whose allocation gives every one of them U(p_q, N_q) >= u_min.

Used by sera.allocate(u_min=...); drawn in notebooks/03_allocation_vs_success.ipynb.
"""

from __future__ import annotations

import math

import numpy as np

from sera.fidelity import mixed_probability

# The fast U below is within ~1e-15 of sera.mixed_probability; closer calls than this band are
# settled by mixed_probability itself, so the answer is the one it gives.
_BAND = 1e-12


def largest_observable_prefix(p, budget, lo, n_max, allocate_prefix, u_min):
    """The retained prompts, their allocation `allocate_prefix(p, budget, lo, bound)` (which
    returns counts, continuous counts, lam) and whether the safeguard fell back:
    (kept indices, (counts, continuous, lam), fallback).

    Prompts are ranked by U(p, n_max), highest first (stable). Prefixes of m prompts are tried for
    capacity-feasible m (m * lo <= budget <= m * n_max); the largest whose allocation of the whole
    budget passes is kept, or the top ceil(budget / n_max) prompts when none passes.

    Passing is monotone in m, so a binary search needs O(log B) allocations. Dropping the last
    prompt of a prefix frees its rollouts and the others' continuous counts can only rise; so can
    their integer counts under both roundings. The exact rounding takes the R smallest increment
    keys, and a smaller prefix with more budget takes a superset of the remaining prompts' keys.
    Under the paper's rounding a prompt that keeps its floor keeps its extra rollout: every prompt
    whose floor rises had a smaller key than it (it reached the new level first), and the floors
    rise in total by at most the number of prompts that rose plus the dropped prompt's floor. As
    U(p, N) rises with N, a prompt that passes keeps passing. tests/test_safeguard.py checks the
    search against trying every prefix.
    """
    rank_count = n_max if n_max is not None else budget - (p.size - 1) * lo
    rank_u = mixed_probability(p, rank_count)
    order = np.argsort(-rank_u, kind="stable")
    smallest = max(math.ceil(budget / n_max) if n_max is not None else 1, 1)
    largest = min(p.size, budget // lo)
    if n_max is not None:
        # A prompt with U(p, n_max) < u_min fails at any count; they rank last.
        largest = min(largest, max(int(np.count_nonzero(rank_u >= u_min)), smallest))
    # Everything in rank order, so that every prefix is a slice.
    p_ranked = p[order]
    with np.errstate(divide="ignore"):
        log_p, log_q = np.log(p_ranked), np.log1p(-p_ranked)

    def attempt(size):
        bound = n_max if n_max is not None else budget - (size - 1) * lo
        result = allocate_prefix(p_ranked[:size], budget, lo, bound)
        passes = _observable(result[0], p_ranked[:size], log_p[:size], log_q[:size], u_min)
        return passes, (order[:size], result)

    passes, found = attempt(largest)
    if passes:
        return (*found, False)
    if largest == smallest:
        return (*found, True)
    passes, found = attempt(smallest)
    if not passes:
        return (*found, True)
    passing, failing = smallest, largest
    while failing - passing > 1:
        middle = (passing + failing) // 2
        passes, result = attempt(middle)
        if passes:
            passing, found = middle, result
        else:
            failing = middle
    return (*found, False)


def _observable(counts, p, log_p, log_q, u_min) -> bool:
    """All U(p_q, counts_q) >= u_min, with U = 1 - p^N - (1-p)^N from two exps of precomputed
    logs; values within _BAND of u_min are recomputed by mixed_probability."""
    with np.errstate(invalid="ignore"):  # N * -inf is -inf for N >= 2
        fast = 1.0 - np.exp(counts * log_p) - np.exp(counts * log_q)
    if np.any(fast < u_min - _BAND):
        return False
    close = np.flatnonzero(fast < u_min + _BAND)
    if close.size == 0:
        return True
    return bool(np.all(mixed_probability(p[close], counts[close]) >= u_min))
