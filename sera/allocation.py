"""Fixed-budget rollout allocation: the waterline, integerization, the observability safeguard.

Derived in notebooks/02_waterline_allocation.ipynb (waterline, rounding) and
notebooks/03_allocation_vs_success.ipynb (safeguard). All arrays are numpy, one value per prompt;
docs/speed.md says what benchmarks/allocation_speed.py measures of their speed.

Names: a *rule* (RULES) is how one batch's counts are set, what `allocate(rule=...)` takes; a
*method* (sera.methods.METHODS) is a whole training method, which plans with a rule
(`sera.method_plan` gives a method's own plan).
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from typing import NamedTuple

import numpy as np

from sera import _checks
from sera.baselines import BASELINE_RULES
from sera.counts import (  # noqa: F401 (Allocation, from_counts: public here too)
    WATERLINE,
    Allocation,
    assemble,
    even_split,
    from_counts,
)
from sera.safeguard import largest_observable_prefix
from sera.waterfill import hazard, round_exact, round_paper, solve

SELECTABLE = (*WATERLINE, "uniform")
"""The rules the observability safeguard (u_min) applies to."""
RULES = tuple(_checks.registry(((name, None) for name in (*SELECTABLE, *BASELINE_RULES)),
                               "allocation rule"))
"""Every rule `allocate` knows: the waterline's (paper, exact), uniform, and the one-shot rules
SERA is compared with (sera.baselines.BASELINE_RULES)."""
__all__ = ["RULES", "Allocation", "Waterline", "allocate", "from_counts", "uniform",
           "waterline"]
_OLD_NAMES = {"METHODS": "sera.allocation.RULES",
              "BASELINES": "tuple(sera.baselines.BASELINE_RULES)"}


def __getattr__(name):
    # Older names of the rule lists, kept for code written against them.
    if name in _OLD_NAMES:
        warnings.warn(f"sera.allocation.{name} is spelled {_OLD_NAMES[name]} "
                      f"(sera.methods.METHODS are the training methods)", DeprecationWarning,
                      stacklevel=2)
        return RULES if name == "METHODS" else tuple(BASELINE_RULES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Waterline(NamedTuple):
    """Continuous solution: counts (float, summing to the budget) and the water level lam."""

    counts: np.ndarray
    lam: float


# ----------------------------------------------------------------------------- validation


def _bounds(n_prompts: int, budget, n_min, n_max):
    """Check the budget against the bounds; return (M, lo, hi), hi = M - (B-1) lo for None."""
    budget = _checks.integer(budget, "budget", minimum=1)
    n_min = _checks.integer(n_min, "n_min", minimum=2)
    if n_max is not None:
        n_max = _checks.integer(n_max, "n_max", minimum=n_min)
    if budget < n_prompts * n_min:
        raise ValueError(
            f"budget={budget} is infeasible: {n_prompts} prompts need at least "
            f"{n_prompts} * n_min = {n_prompts * n_min}; allowed range is "
            f"[{n_prompts * n_min}, {'inf' if n_max is None else n_prompts * n_max}]"
        )
    if n_max is not None and budget > n_prompts * n_max:
        raise ValueError(
            f"budget={budget} is infeasible: {n_prompts} prompts take at most "
            f"{n_prompts} * n_max = {n_prompts * n_max}; allowed range is "
            f"[{n_prompts * n_min}, {n_prompts * n_max}]"
        )
    hi = budget - (n_prompts - 1) * n_min if n_max is None else n_max
    return budget, n_min, hi


def waterline(p, budget, n_min=2, n_max=None) -> Waterline:
    """Continuous max-min allocation: N_q = clip(1 + lam / h_q, n_min, n_max), h_q = -log(1-p_q),
    with the water level lam solved exactly so that the counts sum to the budget; p (B,) ->
    counts (B,) float and lam.

    Every unclipped prompt then has the same fidelity kappa = 1 - exp(-lam). Prompts with p = 0 fill
    first (towards n_max) and prompts with p = 1 last, the limits of the formula. n_max=None means
    no bound beyond the budget. Derivation: notebooks/02_waterline_allocation.ipynb.
    """
    p = _checks.batch_probabilities(p)
    budget, lo, hi = _bounds(p.size, budget, n_min, n_max)
    solution = solve(hazard(p), budget, lo, hi)
    return Waterline(solution.counts, solution.lam)


def _counts(p, budget, lo, hi, rule, n0=None):
    """Integer counts, continuous counts and lam of `rule` for one retained set of prompts
    (n0: the uniform count, for DARS)."""
    if rule == "uniform":
        counts = even_split(budget, p.size)
        return counts, counts.astype(float), math.nan
    if rule in BASELINE_RULES:
        counts = BASELINE_RULES[rule](p, budget, lo, hi, n0 if n0 is not None else budget / p.size)
        return counts, counts.astype(float), math.nan
    solution = solve(hazard(p), budget, lo, hi)
    if rule == "paper":
        counts = round_paper(solution, budget, hi)
    else:
        counts = round_exact(solution, budget, lo, hi)
    return counts, solution.counts, solution.lam


# ----------------------------------------------------------------------------- public entry


def allocate(p, budget, n_min=2, n_max=None, rule="paper", n0=None, u_min=0.0, *,
             method=None) -> Allocation:
    """Allocate an integer rollout budget over a batch of prompts by one rule.

    p : (B,) success probabilities (or estimates) in [0, 1].
    budget : the total rollouts M; counts (B,) sum to it exactly.
    n_min, n_max : per-prompt bounds (n_max None: no bound beyond the budget).
    rule : one of RULES. "paper" (waterline, floor, then the smallest one-increment fidelity
        errors), "exact" (the lexicographically max-min integer allocation), "uniform"
        (budget / B each), or a rule SERA is compared with (sera.baselines.COMPARED: "knapsack",
        "gvm", "dars-hw", "dars-et" so far). Every rule meets the budget exactly and the bounds
        too, except "gvm", which has none (as its authors' code: p = 0 gets 0 rollouts).
    n0 : reference count of the multiplicity weights n0 / N_q; defaults to budget / B.
    u_min : the observability safeguard (rules in SELECTABLE). Prompts are ranked by
        U(p, n_max), highest first, and the largest capacity-feasible prefix whose prompts all
        have U(p_q, N_q) >= u_min is retained; if none passes, the top ceil(budget / n_max)
        prompts are kept and `fallback` is True. 0.0 (the default) turns the safeguard off, as
        everywhere in the package.
    method : the older name of `rule` (deprecated).

    Returns an Allocation whose counts, weights and retained are (B,). This is the bare
    allocator: a training method's own plan (its rule, selection and bound) is
    sera.method_plan. Derivations: notebooks/02_waterline_allocation.ipynb,
    notebooks/03_allocation_vs_success.ipynb.
    """
    argument = "rule"
    if method is not None:
        warnings.warn(f"allocate(method={method!r}) is spelled allocate(rule={method!r}) "
                      f"(a method is a training method, sera.methods.METHODS)",
                      DeprecationWarning, stacklevel=2)
        if rule != "paper":
            raise TypeError(f"give the rule once, as rule=; got rule={rule!r} and "
                            f"method={method!r}")
        rule, argument = method, "method"
    p = _checks.batch_probabilities(p)
    if rule not in RULES:
        raise ValueError(f"{argument} must be one of {RULES}, got {rule!r}")
    budget, lo, hi = _bounds(p.size, budget, n_min, n_max)
    n0 = budget / p.size if n0 is None else _checks.real(n0, "n0", 0.0, math.inf, low_open=True)
    if u_min is None:
        warnings.warn("allocate(u_min=None) is spelled u_min=0.0 (the selection off)",
                      DeprecationWarning, stacklevel=2)
        u_min = 0.0
    u_min = _checks.real(u_min, "u_min", 0.0, 1.0)
    if u_min == 0:
        counts, continuous, lam = _counts(p, budget, lo, hi, rule, n0=n0)
        return assemble(p, None, counts, continuous, lam, False, rule, n0)
    if rule not in SELECTABLE:
        raise ValueError(f"u_min (the observability safeguard) applies to the rules "
                         f"{SELECTABLE}, got rule={rule!r}")
    kept, (counts_kept, continuous_kept, lam), fallback = largest_observable_prefix(
        p, budget, lo, n_max, partial(_counts, rule=rule), u_min)
    return assemble(p, kept, counts_kept, continuous_kept, lam, fallback, rule, n0)


def uniform(p, budget, n_min=2, n_max=None, n0=None) -> Allocation:
    """Uniform allocation of p (B,): budget // B rollouts each, the remainder to the first
    prompts; allocate(rule="uniform")."""
    return allocate(p, budget, n_min=n_min, n_max=n_max, rule="uniform", n0=n0)
