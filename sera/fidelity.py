"""Finite-rollout fidelity of the MaxRL estimator: kappa, the mixed-group probability U, the series.

Derived in notebooks/01_finite_rollout_fidelity.ipynb. Every function is elementwise and keeps the
array type: numpy in, numpy out; torch in, torch out. p and n broadcast against each other, so
p (B,) with n (B,) (one count per prompt) or a scalar n gives (B,), and p (B, 1) with n (K,) a
(B, K) table.
"""

from __future__ import annotations

import numpy as np

from sera import _checks
from sera.waterfill import hazard


def _counts(n, xp, name: str = "n"):
    """Rollout counts as a float array of the right module, checked to be >= 1 and finite."""
    if xp is np:
        values = np.asarray(n, dtype=float)
    else:
        values = n if _checks.is_torch(n) else xp.as_tensor(n)
        values = values.double() if not values.is_floating_point() else values
    bad = ~((values >= 1) & (values < float("inf")))
    if bool(bad.any()):
        first = float(values[bad].reshape(-1)[0])
        raise ValueError(f"{name} must be a rollout count >= 1 (finite); got {first!r}")
    return values


def _one_minus_power(p, exponent, xp):
    """1 - (1-p)**exponent computed as -expm1(exponent * log1p(-p)), exact at p = 0 and p = 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_q = xp.log1p(-p)  # -inf at p = 1
        value = -xp.expm1(exponent * log_q)
    # (1-p)**0 = 1 even when p = 1, where the product above is 0 * -inf = NaN.
    value = xp.where(exponent == 0, xp.zeros_like(value), value)
    return value[()] if xp is np else value  # numpy scalars for scalar input


def kappa(p, n, centered: bool = True):
    """Fidelity of MaxRL with n rollouts: E[g] = kappa(p, n) * grad log p.

    kappa(p, n) = 1 - (1-p)**(n-1) for the centered estimator (the one MaxRL trains with) and
    1 - (1-p)**n for the uncentered one. n may be fractional (the waterline's continuous
    relaxation). p and n broadcast: p (B,), n (B,) -> (B,). Derivation:
    notebooks/01_finite_rollout_fidelity.ipynb.
    """
    xp = _checks.namespace(p, n)
    p = _checks.probabilities(p if xp is np else xp.as_tensor(p))
    n = _counts(n, xp)
    return _one_minus_power(p, n - 1 if centered else n, xp)


def mixed_probability(p, n):
    """U(p, n) = 1 - p**n - (1-p)**n: the chance that a group of n rollouts is neither all
    successes nor all failures, i.e. that the centered estimator sees any nonzero advantage.
    p and n broadcast: p (B,), n (B,) -> (B,).

    Used by the observability safeguard (sera.allocation); drawn in
    notebooks/03_allocation_vs_success.ipynb.
    """
    xp = _checks.namespace(p, n)
    p = _checks.probabilities(p if xp is np else xp.as_tensor(p))
    n = _counts(n, xp)
    # 1 - (1-p)^n - p^n, with both powers taken in the accurate -expm1 form.
    return _one_minus_power(p, n, xp) - (1 - _one_minus_power(1 - p, n, xp))


def log_success_series(p, order: int):
    """The log-success series truncated after `order` terms: -sum_{k=1..order} (1-p)**k / k.

    As order grows it tends to log p. Its derivative in p is sum_{k=1..order} (1-p)**(k-1), which
    equals kappa(p, order + 1) / p: the centered estimator with N rollouts differentiates the first
    N - 1 terms. p of any shape -> the same shape. See notebooks/01_finite_rollout_fidelity.ipynb.
    """
    order = _checks.integer(order, "order", minimum=0)
    xp = _checks.namespace(p)
    p = _checks.probabilities(p)
    total = xp.zeros_like(p * 1.0)
    q_power = xp.ones_like(total)
    for k in range(1, order + 1):
        q_power = q_power * (1 - p)
        total = total - q_power / k
    return total


def rollouts_for_fidelity(p, level: float, n_max: float | None = None):
    """The (fractional) count N with kappa(p, N) = level: N = 1 + log(1-level) / log(1-p).

    p (B,) -> (B,) float counts. A prompt with p = 0 needs infinitely many rollouts for any
    positive level; the result is capped at n_max when n_max is given.
    Drawn in notebooks/01_finite_rollout_fidelity.ipynb.
    """
    level = _checks.real(level, "level", 0.0, 1.0)
    p = _checks.probabilities(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = hazard(np.asarray(p, dtype=float))  # +0 at p = -0 too: lam / h = inf
        need = np.where(level == 0, 1.0, 1 + -np.log1p(-level) / h)
    need = np.where(np.isnan(need), np.inf, need)  # p = 0 at a positive level
    if n_max is not None:
        need = np.minimum(need, float(n_max))
    return need
