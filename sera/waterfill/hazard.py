"""The hazard h = -log(1-p) that the waterline is solved from: kappa(p, n) = 1 - exp(-(n-1) h).

Taken by numpy's log1p where it runs a SIMD loop, else from its log plus the rounding error of
1 - p, within an ulp of the exact value either way (tests/test_allocation.py checks both).
"""

from __future__ import annotations

from functools import cache

import numpy as np


def hazard(p: np.ndarray) -> np.ndarray:
    """h = -log(1-p), so that kappa(p, n) = 1 - exp(-(n-1) h); 0 at p = 0, inf at p = 1.

    Where numpy has no vectorised log1p for float64 but a vectorised log (its AVX2 build), h is
    taken from log(u), u = fl(1 - p), plus the rounding error of u, which two exact operations
    give: as accurate (within an ulp of the exact value; tests/test_allocation.py checks both
    ways over the whole range) and faster than the scalar log1p loop.

    Parameters
    ----------
    p : ndarray of float
        Success probabilities in [0, 1].
    """
    h = np.empty(np.shape(p))  # one array, written over in place
    if _log1p_vectorised():
        np.negative(p, out=h)
        with np.errstate(divide="ignore"):
            np.log1p(h, out=h)
        return np.subtract(0.0, h, out=h)  # 0 - x, not -x: +0 at p = -0 as at p = 0
    return _hazard_from_log(p, h)


def _hazard_from_log(p: np.ndarray, out: np.ndarray) -> np.ndarray:
    """-log(1 - p) from log: with u = fl(1 - p) and e = p + (u - 1) = u - (1 - p) (both steps
    below are exact: Sterbenz's lemma where p <= 1/2, and e = 0 where 1 - p is exact),
    -log(1 - p) = -log(u) + e/u + O(e^2); e is nonzero only where u >= 1/2 and is at most 2^-54,
    so taking e for e/u costs at most 2^-53 p, half an ulp of h >= p. p = 0 and p = -0 give +0,
    p = 1 gives inf."""
    u = np.subtract(1.0, p, out=out)
    e = np.subtract(u, 1.0, out=np.empty_like(u))  # exact (out=: an array for 0-d p too)
    np.add(p, e, out=e)  # -0 + 0 = +0
    with np.errstate(divide="ignore"):
        log_u = np.log(u, out=u)
    return np.subtract(e, log_u, out=log_u)


@cache
def _log1p_vectorised() -> bool:
    """Whether numpy's float64 log1p runs a SIMD loop on this machine, or its log runs none
    either (numpy.lib.introspect names the loop each dispatches to)."""
    try:
        from numpy.lib.introspect import opt_func_info  # numpy 2.0 and later
    except ImportError:
        return True

    def target(name):
        return opt_func_info(func_name=f"^{name}$", signature="float64")[name]["dd"]["current"]

    return not target("log1p").startswith("baseline") or target("log").startswith("baseline")
