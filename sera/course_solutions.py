"""Reference solutions of the course exercises (notebooks/exercises/), loaded by the exercise
notebooks when run with solutions=True. Each is written the way a student would, in a few
lines; sera's own functions are the general versions."""

from __future__ import annotations

import math

import numpy as np


def kappa(p, n):
    """1 - (1-p)^(n-1), in a form that keeps its digits for tiny p."""
    return -np.expm1((n - 1) * np.log1p(-p))


def centered_advantages(rewards):
    """(r - mean) / mean over one group; zeros when the group has no success."""
    rewards = np.asarray(rewards, dtype=float)
    mean = rewards.mean()
    return np.zeros_like(rewards) if mean == 0 else (rewards - mean) / mean


def two_prompt_waterline(p1, p2, budget, n_min):
    """Equal kappa: (N1 - 1) h1 = (N2 - 1) h2 = lam with N1 + N2 = budget, unless a count would
    fall below n_min; then it sits at n_min and the other takes the rest."""
    h1, h2 = -math.log1p(-p1), -math.log1p(-p2)
    lam = (budget - 2) / (1 / h1 + 1 / h2)
    n1, n2 = 1 + lam / h1, 1 + lam / h2
    if n1 < n_min:
        n1, n2 = n_min, budget - n_min
    elif n2 < n_min:
        n1, n2 = budget - n_min, n_min
    return np.array([n1, n2])


def rounding(continuous, budget):
    """Largest remainders: round everything down, then one more to the largest fractions."""
    counts = np.floor(continuous + 1e-9).astype(int)
    fractions = continuous - counts
    extra = int(budget - counts.sum())
    counts[np.argsort(-fractions, kind="stable")[:extra]] += 1
    return counts


def multiplicity_weights(counts, n0):
    """n0 / N_q, and 0 where a prompt got no rollouts."""
    counts = np.asarray(counts, dtype=float)
    return np.divide(n0, counts, out=np.zeros_like(counts), where=counts > 0)


def pass_at_k(n, c, k):
    """1 - C(n-c, k) / C(n, k): K samples drawn without replacement all miss."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
