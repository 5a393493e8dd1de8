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
