"""How much evidence a step rests on, and the step size it warrants.

A MaxRL update learns from the successes in groups that hold both outcomes: a group of N_q
rollouts that all fail or all succeed has zero advantages. With success probability p, the
successes such a group contributes have expectation

    E[S 1{0 < S < N}] = N p - N p^N          (S ~ Binomial(N, p)),

so a batch's expected evidence under counts N_q is sum_q N_q p_q (1 - p_q^(N_q - 1)). SERA moves
rollouts from easy prompts to hard ones, where successes are rare, so at the same budget its
steps can rest on fewer successes than uniform counts give; under Adam the step's length does
not shrink with its evidence. `evidence_scale` is the factor that makes it shrink:

    scale = min(1, S_t / S_ref),

S_t the successes the step's mixed groups actually hold and S_ref the expectation above at
uniform counts n0 over the same prompts and estimates. It counts successes, not distinct
responses: only counts have an expectation that the estimates give.
"""

from __future__ import annotations

import numpy as np

from sera.fidelity import kappa


def expected_mixed_successes(p, counts) -> np.ndarray:
    """(B,) expected successes of each prompt's group in a group that holds both outcomes,
    N p (1 - p^(N - 1)), for success probabilities p (B,) in [0, 1] and counts (B,) >= 0 (0 for
    a prompt without rollouts: no evidence)."""
    p = np.asarray(p, dtype=float)
    counts = np.asarray(counts, dtype=float)
    if p.shape != counts.shape:
        raise ValueError(f"p and counts must have one entry per prompt, got shapes {p.shape} "
                         f"and {counts.shape}")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p must lie in [0, 1]")
    if np.any(counts < 0):
        raise ValueError("counts must be >= 0")
    out = counts * p * (1.0 - p ** np.maximum(counts - 1.0, 0.0))
    return np.where(counts > 1, out, 0.0)  # one rollout never mixes outcomes


def mixed_successes(successes, counts) -> float:
    """The successes a step's groups hold in the groups with both outcomes: successes (B,) and
    counts (B,) per prompt."""
    successes = np.asarray(successes, dtype=float)
    counts = np.asarray(counts, dtype=float)
    mixed = (successes > 0) & (successes < counts)
    return float(successes[mixed].sum())


def evidence_scale(successes, counts, p_hat, n0: float) -> float:
    """min(1, S_t / S_ref): the step's successes in mixed groups (successes and counts per
    prompt, (B,)) over what uniform counts n0 would give in expectation at the estimates p_hat
    (B,). 1 where the reference is not positive or some estimate is missing (nan): no estimate,
    no scaling."""
    p_hat = np.asarray(p_hat, dtype=float)
    if p_hat.size == 0 or np.isnan(p_hat).any():
        return 1.0
    reference = float(expected_mixed_successes(p_hat, np.full(p_hat.shape, float(n0))).sum())
    if not reference > 0:
        return 1.0
    return min(1.0, mixed_successes(successes, counts) / reference)


def evidence_waterline(p, budget: int, n_min: int, n_max: int, n0: int) -> np.ndarray:
    """(B,) integer counts summing to the budget: the highest common fidelity kappa(p_q, N_q)
    that leaves the batch an expected number of successes in mixed groups at least what uniform
    counts n0 give (`expected_mixed_successes`), with the rest of the budget where it adds the
    most of them. p (B,) in [0, 1]; the budget must be B n0 and n0 within [n_min, n_max], so
    that uniform counts are feasible and the constraint can always be met.

    For a level L each prompt needs the fewest N in [n_min, n_max] with kappa(p_q, N) >= L
    (n_max where none reaches it, as the bounded waterline saturates); the most evidence the
    budget then buys is a separable integer program, solved exactly by dynamic programming over
    the budget (B x budget x (n_max - n_min) steps: the trainers' batches, not a scale-out's).
    Raising L only tightens the minimums, so the level is found by bisection over the values
    kappa takes on the grid."""
    p = np.asarray(p, dtype=float)
    sizes = np.arange(n_min, n_max + 1)
    if budget != p.size * n0 or not n_min <= n0 <= n_max:
        raise ValueError(f"the budget must be B n0 with n_min <= n0 <= n_max; got budget "
                         f"{budget}, B = {p.size}, n0 {n0}, bounds [{n_min}, {n_max}]")
    grid = np.broadcast_to(sizes, (p.size, sizes.size))
    fidelity = kappa(np.broadcast_to(p[:, None], grid.shape), grid)
    evidence = expected_mixed_successes(np.broadcast_to(p[:, None], grid.shape), grid)
    reference = float(expected_mixed_successes(p, np.full(p.size, float(n0))).sum())
    levels = np.unique(fidelity)
    low, high = 0, levels.size - 1  # levels[0] is met by n_min everywhere: always feasible
    best = _most_evidence(_needs(fidelity, levels[0], sizes), evidence, sizes, budget)
    while low < high:
        middle = (low + high + 1) // 2
        needs = _needs(fidelity, levels[middle], sizes)
        counts = _most_evidence(needs, evidence, sizes, budget) \
            if needs.sum() <= budget else None
        if counts is not None and _total(evidence, counts, sizes) >= reference * (1 - 1e-12):
            low, best = middle, counts
        else:
            high = middle - 1
    return best


def _needs(fidelity, level, sizes) -> np.ndarray:
    """Each prompt's fewest rollouts on the grid reaching the level (the largest where none)."""
    reached = fidelity >= level
    first = np.where(reached.any(axis=1), reached.argmax(axis=1), sizes.size - 1)
    return sizes[first]


def _total(evidence, counts, sizes) -> float:
    return float(evidence[np.arange(counts.size), counts - sizes[0]].sum())


def _most_evidence(needs, evidence, sizes, budget: int) -> np.ndarray:
    """The counts N_q >= needs_q (B,) on the grid summing to the budget with the largest total
    expected evidence, by dynamic programming over the budget spent (ties: the first found)."""
    best = np.full(budget + 1, -np.inf)
    best[0] = 0.0
    choices = []
    for q in range(needs.size):
        new = np.full(budget + 1, -np.inf)
        choice = np.zeros(budget + 1, dtype=np.int64)
        for j, n in enumerate(sizes):
            if n < needs[q] or n > budget:
                continue
            candidate = np.full(budget + 1, -np.inf)
            candidate[n:] = best[:budget + 1 - n] + evidence[q, j]
            better = candidate > new
            new[better], choice[better] = candidate[better], n
        best = new
        choices.append(choice)
    if not np.isfinite(best[budget]):
        raise ValueError("no counts within the bounds meet the budget at this level")
    counts = np.zeros(needs.size, dtype=np.int64)
    spent = budget
    for q in range(needs.size - 1, -1, -1):
        counts[q] = choices[q][spent]
        spent -= counts[q]
    return counts
