"""Pass@K against exact integer combinatorics; the bootstrap against a known case."""

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sera


@given(st.integers(1, 300).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_exact_combinatorics(case):
    n, c, k = case
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert sera.pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12, abs=1e-15)


def test_pass_at_k_is_vectorised_with_ragged_n():
    n = np.array([4, 10, 10, 256])
    c = np.array([1, 0, 10, 3])
    out = sera.pass_at_k(n, c, 2)
    expected = [1 - Fraction(comb(a - b, 2), comb(a, 2)) for a, b in zip(n, c, strict=True)]
    np.testing.assert_allclose(out, [float(e) for e in expected], rtol=1e-12)
    grid = sera.pass_at_k(256, np.array([[0], [5]]), np.array([1, 8, 128]))
    assert grid.shape == (2, 3)


def test_analytic_pass_at_k():
    p = np.array([0.0, 1e-9, 0.3, 1.0])
    np.testing.assert_allclose(sera.pass_at_k_analytic(p, 128),
                               [0.0, 128e-9, 1 - 0.7**128, 1.0], rtol=1e-6)


def test_unbiased_estimator_averages_to_analytic():
    # E[pass_at_k(n, C, k)] over C ~ Binomial(n, p) equals 1 - (1-p)^k exactly.
    from scipy.stats import binom

    n, k, p = 20, 5, 0.13
    c = np.arange(n + 1)
    mean = (binom.pmf(c, n, p) * sera.pass_at_k(n, c, k)).sum()
    assert mean == pytest.approx(1 - (1 - p) ** k, rel=1e-12)


def test_paired_bootstrap_interval_covers_and_is_seeded():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 400)
    b = a - 0.05 + rng.normal(0, 0.02, 400)
    diff, low, high = sera.paired_bootstrap(a, b, n_resamples=2000, seed=1)
    assert low < diff < high
    assert low > 0.04 and high < 0.06
    assert sera.paired_bootstrap(a, b, n_resamples=2000, seed=1) == (diff, low, high)
