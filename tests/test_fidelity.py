"""kappa, U and the log-success series against closed forms (numpy; torch: test_torch_paths)."""

import math

import numpy as np
import pytest

import sera


def test_kappa_closed_form_and_edges():
    p = np.array([0.0, 0.1, 0.5, 1.0])
    np.testing.assert_allclose(sera.kappa(p, 4), 1 - (1 - p) ** 3)
    np.testing.assert_allclose(sera.kappa(p, 4, centered=False), 1 - (1 - p) ** 4)
    assert sera.kappa(1.0, 1) == 0.0  # one rollout carries no centered signal, even at p = 1
    assert sera.kappa(1.0, 1, centered=False) == 1.0
    assert sera.kappa(0.0, 64) == 0.0


def test_kappa_is_accurate_for_tiny_p():
    # 1 - (1-p)**(n-1) loses every digit at p = 1e-17; the expm1 form does not.
    assert sera.kappa(1e-17, 3) == pytest.approx(2e-17, rel=1e-12)


def test_mixed_probability_closed_form():
    p = np.linspace(0, 1, 11)
    for n in (1, 2, 5, 64):
        np.testing.assert_allclose(sera.mixed_probability(p, n), 1 - p**n - (1 - p) ** n,
                                   atol=1e-15)


def test_series_tends_to_log_p_and_its_slope_is_kappa_over_p():
    p = np.array([0.2, 0.5, 0.9])
    np.testing.assert_allclose(sera.log_success_series(p, 400), np.log(p), rtol=1e-12)
    step = 1e-6
    for n in (2, 3, 8):
        slope = (sera.log_success_series(p + step, n - 1)
                 - sera.log_success_series(p - step, n - 1)) / (2 * step)
        np.testing.assert_allclose(slope, sera.kappa(p, n) / p, rtol=1e-7)


def test_rollouts_for_fidelity_inverts_kappa():
    p = np.array([0.02, 0.1, 0.6])
    need = sera.rollouts_for_fidelity(p, 0.8)
    np.testing.assert_allclose(sera.kappa(p, need), 0.8)
    assert sera.rollouts_for_fidelity(0.0, 0.5) == math.inf
    assert sera.rollouts_for_fidelity(-0.0, 0.5) == math.inf  # -0.0 passes the range check
    assert sera.rollouts_for_fidelity(0.0, 0.5, n_max=64) == 64
