"""The method table: what each training method estimates, how it allocates, how it scores.

A method is one entry of METHODS; every trainer plans its batches through `plan` and scores
responses through the entry's advantage function, so adding a method is adding an entry. A name
means the same thing in every trainer: `sera` allocates from historical estimates everywhere,
`sera-oracle` from the exact success probabilities where a task knows them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sera.allocation import Allocation, allocate, uniform
from sera.estimators import grpo_advantages, maxrl_advantages, rloo_advantages
from sera.history import SuccessHistory


@dataclass(frozen=True)
class Method:
    """One training method."""

    name: str
    estimates: str
    """Where the success estimates come from: none, exact (the task knows p) or history."""
    allocator: str
    """none (no rollouts: the exact likelihood), uniform (n0 each) or waterline (SERA)."""
    advantages: Callable | None
    """Per-response advantages from (rewards, sizes=group sizes); None for the exact loss."""
    summary: str


METHODS: dict[str, Method] = {m.name: m for m in [
    Method("ce", "none", "none", None,
           "cross-entropy: the exact likelihood gradient, where the task knows p"),
    Method("maxrl", "none", "uniform", maxrl_advantages,
           "MaxRL: n0 rollouts each, centered advantages (r - mean) / mean"),
    Method("grpo", "none", "uniform", grpo_advantages,
           "GRPO: n0 rollouts each, advantages (r - mean) / (std + eps)"),
    Method("rloo", "none", "uniform", rloo_advantages,
           "RLOO: n0 rollouts each, leave-one-out baseline"),
    Method("sera", "history", "waterline", maxrl_advantages,
           "SERA: waterline on historical estimates, MaxRL advantages x n0 / N_q"),
    Method("sera-oracle", "exact", "waterline", maxrl_advantages,
           "SERA on the exact success probabilities (tasks that know p)"),
]}


def supported(exact: bool) -> tuple[str, ...]:
    """Method names a task can run: those needing exact p only where the task knows p."""
    return tuple(name for name, m in METHODS.items()
                 if (m.estimates != "exact" and m.allocator != "none") or exact)


def plan(method: Method, allocator, n0: int, ids: np.ndarray, estimates: np.ndarray,
         history: SuccessHistory) -> Allocation | None:
    """The batch's Allocation (None for methods without rollouts).

    estimates: the success probabilities the allocation reads when method.estimates is exact
    (and what a uniform allocation records as its p, for the tables).
    """
    if method.allocator == "none":
        return None
    budget = ids.size * n0
    bounds = dict(n_min=allocator.n_min, n_max=allocator.upper(n0), n0=n0)
    if method.allocator == "uniform":
        return uniform(estimates, budget, **bounds)
    options = dict(method=allocator.rounding, u_min=allocator.u_min, **bounds)
    if method.estimates == "history":
        return history.plan(ids, budget, **options)
    return allocate(estimates, budget, **options)
