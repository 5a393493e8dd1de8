"""The method table: what each training method estimates, how it allocates, how it scores.

A method is one entry of METHODS; every trainer plans its batches through `plan` and scores
responses through the entry's advantage function, so adding a method is adding an entry. A name
means the same thing in every trainer: `sera` allocates from historical estimates everywhere,
`sera-oracle` from the exact success probabilities where a task knows them. The rules SERA is
compared with (shared/ALLOCATORS.md) come with their own estimator and weighting, and where it
separates the allocation rule from the estimator also as `<rule>-maxrl` (MaxRL advantages with
the multiplicity weights n0 / N_q). Names ending in `-reconstruction` are reconstructions from
an abstract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from sera.allocation import Allocation, allocate, uniform
from sera.baselines import CeroAllocator
from sera.estimators import (
    grpo_advantages,
    maxrl_advantages,
    rl2ml_advantages,
    rloo_advantages,
)
from sera.fidelity import kappa
from sera.history import SuccessHistory


@dataclass(frozen=True)
class Method:
    """One training method."""

    name: str
    estimates: str
    """Where the success estimates come from: none, exact (the task knows p) or history."""
    allocator: str
    """none (no rollouts: the exact likelihood), uniform (n0 each), waterline (SERA), a rule of
    sera.allocate (knapsack, gvm, dars-hw, dars-et), cero (stateful) or reweight (uniform counts,
    responses weighted 1 / kappa(p_hat, n0))."""
    advantages: Callable | None
    """Per-response advantages from (rewards, sizes=group sizes); None for the exact loss."""
    summary: str
    weighted: bool = True
    """Responses weighted n0 / N_q (the multiplicity correction); False: weight 1 each."""
    protocol: str = "one-shot"
    """How the step gets its rollouts (sera.trainers.protocols): one-shot (plan, then sample
    once) or a sequential rule that samples in rounds: dynamic, two-stage, probe-commit."""

    @property
    def maxrl(self) -> bool:
        """Whether the advantages are MaxRL's (options bound by functools.partial included), whose
        expectation is kappa(p, N) grad log p per prompt."""
        advantages = self.advantages
        while isinstance(advantages, partial):
            advantages = advantages.func
        return advantages is maxrl_advantages


def raft_advantages(rewards, groups=None, *, sizes=None):
    """Rejection sampling (RAFT): the successful responses are trained on, A_i = r_i."""
    return rewards


def clipped_grpo_advantages(rewards, groups=None, *, sizes=None, bound: float = 5.0):
    """GRPO advantages clipped to [-bound, bound], as Knapsack RL trains."""
    advantages = grpo_advantages(rewards, groups, sizes=sizes)
    return advantages.clip(-bound, bound)


def _entries():
    yield Method("ce", "none", "none", None,
                 "cross-entropy: the exact likelihood gradient, where the task knows p")
    yield Method("maxrl", "none", "uniform", maxrl_advantages,
                 "MaxRL: n0 rollouts each, centered advantages (r - mean) / mean")
    yield Method("grpo", "none", "uniform", grpo_advantages,
                 "GRPO: n0 rollouts each, advantages (r - mean) / (std + eps)")
    yield Method("rloo", "none", "uniform", rloo_advantages,
                 "RLOO: n0 rollouts each, leave-one-out baseline")
    yield Method("sera", "history", "waterline", maxrl_advantages,
                 "SERA: waterline on historical estimates, MaxRL advantages x n0 / N_q")
    yield Method("sera-oracle", "exact", "waterline", maxrl_advantages,
                 "SERA on the exact success probabilities (tasks that know p)")
    yield Method("reweight", "history", "reweight", maxrl_advantages,
                 "inverse-fidelity reweighting: n0 each, MaxRL x 1 / kappa(p_hat, n0)")
    yield Method("knapsack", "history", "knapsack", clipped_grpo_advantages,
                 "Knapsack RL: value U(p, N) p (1-p)^2, GRPO (clipped at 5), no weights",
                 weighted=False)
    yield Method("gvm", "history", "gvm", raft_advantages,
                 "GVM-RAFT: N ~ 1 / sqrt(p + 0.001 / p), rejection sampling, no weights",
                 weighted=False)
    yield Method("dars-hw", "history", "dars-hw", partial(rl2ml_advantages, alpha=0.0),
                 "DARS-HW matched to the budget from history, A = r - mean, no weights",
                 weighted=False)
    yield Method("dars-et", "history", "dars-et", partial(rl2ml_advantages, alpha=0.0),
                 "DARS-ET matched to the budget from history, A = r - mean, no weights",
                 weighted=False)
    yield Method("cero-reconstruction", "history", "cero", maxrl_advantages,
                 "CERO, myopic (reconstruction): posterior variance x saturating utility of "
                 "cumulative rollouts, MaxRL x n0 / N_q")
    yield Method("knapsack-maxrl", "history", "knapsack", maxrl_advantages,
                 "the knapsack allocation with MaxRL advantages x n0 / N_q")
    yield Method("gvm-maxrl", "history", "gvm", maxrl_advantages,
                 "the gvm allocation with MaxRL advantages x n0 / N_q")
    yield Method("dars-hw-maxrl", "history", "dars-hw", maxrl_advantages,
                 "the dars-hw allocation with MaxRL advantages x n0 / N_q")
    yield Method("dapo", "none", "sequential", grpo_advantages,
                 "DAPO dynamic sampling: 3B prompts x n0, keep mixed groups, refill; GRPO",
                 weighted=False, protocol="dynamic")
    yield Method("dapo-maxrl", "none", "sequential", maxrl_advantages,
                 "DAPO dynamic sampling with MaxRL advantages", protocol="dynamic")
    yield Method("dars-hw-2stage", "none", "sequential", partial(rl2ml_advantages, alpha=0.0),
                 "DARS-HW as published: pilot n0, top-up to n0 / (2a); A = r - mean; not "
                 "matched to the budget", weighted=False, protocol="two-stage")
    yield Method("sara-reconstruction", "history", "sequential", grpo_advantages,
                 "SARA-style probe / commit / abandon on the Beta posterior (reconstruction); "
                 "GRPO on committed groups", weighted=False, protocol="probe-commit")
    yield Method("rl2ml-0.5-reconstruction", "none", "uniform",
                 partial(rl2ml_advantages, alpha=0.5),
                 "RL2ML's alpha = 0.5 estimator (reconstruction), n0 each")
    yield Method("rl2ml-2-reconstruction", "none", "uniform",
                 partial(rl2ml_advantages, alpha=2.0),
                 "RL2ML's alpha = 2 estimator (reconstruction), n0 each")


METHODS: dict[str, Method] = {m.name: m for m in _entries()}


def supported(exact: bool) -> tuple[str, ...]:
    """Method names a task can run: those needing exact p only where the task knows p."""
    return tuple(name for name, m in METHODS.items()
                 if (m.estimates != "exact" and m.allocator != "none") or exact)


def plan(method: Method, allocator, n0: int, ids: np.ndarray, estimates: np.ndarray,
         history: SuccessHistory, state: dict | None = None) -> Allocation | None:
    """The batch's Allocation (None for methods without rollouts).

    estimates: the success probabilities the allocation reads when method.estimates is exact
    (and what a uniform allocation records as its p, for the tables). state: a dict the run keeps
    (and checkpoints) for stateful allocators.
    """
    if method.allocator == "none":
        return None
    if method.protocol != "one-shot":
        raise ValueError(f"method {method.name!r} samples in rounds ({method.protocol}); its "
                         f"protocol decides the counts, not plan")
    budget = ids.size * n0
    bounds = dict(n_min=allocator.n_min, n_max=allocator.n_max_for(n0), n0=n0)
    if method.allocator == "uniform":
        result = uniform(estimates, budget, **bounds)
    elif method.allocator == "reweight":
        result = uniform(estimates, budget, **bounds)
        if history.estimate(ids)[1].all():
            result = replace(result, weights=1.0 / kappa(result.p, result.counts))
        else:
            result = replace(result, fallback=True)
    elif method.allocator == "cero":
        cero = state.setdefault("cero", CeroAllocator(history.n_prompts))
        result = cero.plan(ids, *history.posterior(ids), budget, allocator.n_min,
                           allocator.n_max_for(n0), n0)
    else:
        rule = allocator.rounding if method.allocator == "waterline" else method.allocator
        u_min = allocator.u_min if method.allocator == "waterline" else None
        options = dict(method=rule, u_min=u_min, **bounds)
        if method.estimates == "history":
            result = history.plan(ids, budget, **options)
        else:
            result = allocate(estimates, budget, **options)
    if not method.weighted:
        result = replace(result, weights=(result.counts > 0).astype(float))
    return result
