"""The studies behind the theory notebooks: seeded, and consistent with closed forms."""

import numpy as np
import pandas as pd
import pytest

import sera
import sera.studies.analysis


def test_tables_are_reproducible_with_a_seed():
    pd.testing.assert_frame_equal(sera.studies.analysis.compare_rounding(200, seed=4),
                                  sera.studies.analysis.compare_rounding(200, seed=4))
    p = np.array([0.05, 0.2, 0.6])
    pd.testing.assert_frame_equal(sera.studies.analysis.reweighting_study(p, 4, draws=2000, seed=9),
                                  sera.studies.analysis.reweighting_study(p, 4, draws=2000, seed=9))


def test_rounding_gap_is_never_negative():
    table = sera.studies.analysis.compare_rounding(500, seed=2)
    assert (table["gap"] >= -1e-12).all()
    summary = sera.studies.analysis.summarize_rounding(table)
    assert summary.loc[0, "exact below paper"] == 0


@pytest.mark.parametrize("p, n", [(0.05, 2), (0.3, 5), (0.7, 16)])
def test_monte_carlo_fidelity_matches_kappa(p, n):
    mean, se = sera.studies.analysis.monte_carlo_fidelity(p, n, draws=40_000, seed=1)
    assert abs(mean - sera.kappa(p, n)) < 5 * se


def test_reweighting_study_against_closed_forms():
    p = np.array([0.03, 0.1, 0.3, 0.6, 0.9])
    draws = 40_000
    study = sera.studies.analysis.reweighting_study(p, n0=6, draws=draws, seed=3)
    study = study.set_index("method")
    groups = draws * p.size
    uniform_zero = float(1 - sera.mixed_probability(p, 6).mean())
    se = np.sqrt(uniform_zero * (1 - uniform_zero) / groups)
    assert abs(study.loc["uniform", "zero_signal"] - uniform_zero) < 5 * se + 1e-3
    # Reweighting is unbiased in scale: every prompt's mean update is 1 (up to Monte Carlo).
    assert study.loc["reweight", "mean_update"] == pytest.approx(1.0, abs=0.05)
    assert study.loc["reweight", "expected_cosine"] > 0.995
    # Uniform counts scale prompts unequally: the mean update is the mean of kappa(p, N0).
    assert study.loc["uniform", "mean_update"] == pytest.approx(
        float(sera.kappa(p, 6).mean()), abs=0.02)
    assert study.loc["uniform", "expected_cosine"] < study.loc["sera", "expected_cosine"]


def test_budget_concentration_share_grows_as_p_falls():
    table = sera.studies.analysis.budget_concentration(np.logspace(-4, -1, 7), [0.2, 0.5, 0.8], 40)
    assert np.all(np.diff(table["share_of_budget"]) <= 1e-12)
    assert table["share_of_budget"].iloc[0] == pytest.approx((40 - 3 * 2) / 40)
