"""Pass@K: the unbiased estimator from n samples, the analytic form for known p, and paired
bootstrap intervals of a difference between two methods over the same questions."""

from __future__ import annotations

import numpy as np

from sera import _checks


def k_grid(largest: int) -> list[int]:
    """The K values of every final Pass@K profile: 1, 2, 4, ... up to `largest`."""
    return [2**i for i in range(int(largest).bit_length()) if 2**i <= largest]


def _as_counts(x, name):
    arr = np.asarray(x)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        as_float = arr.astype(float)
        if not np.all(np.isfinite(as_float)) or not np.all(as_float == np.round(as_float)):
            raise ValueError(f"{name} must hold integers, got {_checks.describe_safe(x)}")
        arr = as_float.astype(np.int64)
    return arr.astype(np.int64)


def pass_at_k(n, c, k):
    """Unbiased Pass@K per question: 1 - C(n-c, k) / C(n, k), with n samples of which c correct.

    Computed in the stable product form 1 - prod_{i=n-c+1..n} (1 - k/i) (1 when n - c < k).
    n, c, k broadcast against each other, so n may differ per question.
    """
    n, c, k = np.broadcast_arrays(_as_counts(n, "n"), _as_counts(c, "c"), _as_counts(k, "k"))
    if (k < 1).any():
        raise ValueError(f"k must be >= 1, got {int(k.min())}")
    if (c < 0).any() or (c > n).any():
        bad = np.flatnonzero(((c < 0) | (c > n)).reshape(-1))[0]
        raise ValueError(f"c must lie in [0, n]; got c={int(c.reshape(-1)[bad])} with "
                         f"n={int(n.reshape(-1)[bad])}")
    if (k > n).any():
        bad = np.flatnonzero((k > n).reshape(-1))[0]
        raise ValueError(f"k must lie in [1, n]; got k={int(k.reshape(-1)[bad])} with "
                         f"n={int(n.reshape(-1)[bad])}")
    out = np.ones(n.shape)
    # Questions sharing (n, c, k) share a value: compute each distinct triple once.
    triples, inverse = np.unique(np.stack([n.reshape(-1), c.reshape(-1), k.reshape(-1)], 1),
                                 axis=0, return_inverse=True)
    values = np.ones(len(triples))
    for j, (nj, cj, kj) in enumerate(triples):
        if nj - cj >= kj:
            values[j] = 1.0 - np.prod(1.0 - kj / np.arange(nj - cj + 1, nj + 1))
    out.reshape(-1)[:] = values[inverse.reshape(-1)]
    return out


def pass_at_k_analytic(p, k):
    """Pass@K for a known success probability p: 1 - (1-p)**k (accurate for small p)."""
    p = _checks.probabilities(p)
    k = np.asarray(k, dtype=float)
    if (k < 1).any():
        raise ValueError(f"k must be >= 1, got {float(k.min())}")
    with np.errstate(divide="ignore"):
        return -np.expm1(k * np.log1p(-np.asarray(p, dtype=float)))


def paired_bootstrap(a, b, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0):
    """Mean of a - b over questions and its paired percentile bootstrap interval.

    a and b are per-question scores of two methods on the same questions (e.g. pass_at_k of each
    method's response pool); questions are resampled, pools stay fixed. Returns
    (difference, low, high).
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be 1-D with one score per question each; got shapes "
                         f"{a.shape} and {b.shape}")
    if a.size < 2:
        raise ValueError(f"need at least 2 questions to bootstrap, got {a.size}")
    confidence = _checks.real(confidence, "confidence", 0.0, 1.0, low_open=True)
    from scipy import stats  # here, not at import: scipy.stats takes seconds to load

    result = stats.bootstrap((a, b), lambda x, y, axis=-1: np.mean(x - y, axis=axis),
                             paired=True, vectorized=True, n_resamples=n_resamples,
                             confidence_level=confidence, method="percentile",
                             rng=np.random.default_rng(seed))
    interval = result.confidence_interval
    return float(np.mean(a - b)), float(interval.low), float(interval.high)
