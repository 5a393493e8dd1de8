"""Bad input gets a ValueError naming the argument, the value and the allowed range."""

import numpy as np
import pytest

import sera


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(p=[0.2, 1.5], budget=8), r"p must lie in \[0, 1\].*1\.5"),
        (dict(p=[0.2, -0.1], budget=8), r"p must lie in \[0, 1\].*-0\.1"),
        (dict(p=[0.2, np.nan], budget=8), r"p must lie in \[0, 1\] with no NaN.*nan"),
        (dict(p=[], budget=8), r"p is empty"),
        (dict(p=[[0.2, 0.3]], budget=8), r"p must be one-dimensional"),
        (dict(p=[0.2, 0.3], budget=3), r"budget=3 is infeasible.*\[4, inf\]"),
        (dict(p=[0.2, 0.3], budget=30, n_max=8), r"budget=30 is infeasible.*\[4, 16\]"),
        (dict(p=[0.2, 0.3], budget=8, n_min=1), r"n_min must be >= 2, got 1"),
        (dict(p=[0.2, 0.3], budget=8, n_min=3, n_max=2), r"n_max must be >= 3, got 2"),
        (dict(p=[0.2, 0.3], budget=8.5), r"budget must be an integer, got 8\.5"),
        (dict(p=[0.2, 0.3], budget=8, method="round"), r"method must be one of"),
        (dict(p=[0.2, 0.3], budget=8, u_min=1.5), r"u_min must lie in \[0\.0, 1\.0\], got 1\.5"),
        (dict(p=[0.2, 0.3], budget=8, n0=0), r"n0 must lie in \(0\.0, inf\], got 0\.0"),
    ],
)
def test_allocate_rejects_bad_input(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        sera.allocate(**kwargs)


def test_budget_type_is_checked():
    with pytest.raises(TypeError, match="budget must be an integer"):
        sera.allocate([0.2, 0.3], "8")


def test_waterline_rejects_bad_input():
    with pytest.raises(ValueError, match=r"budget=100 is infeasible"):
        sera.waterline([0.5, 0.5], 100, n_max=10)
    with pytest.raises(ValueError, match=r"p must lie in \[0, 1\]"):
        sera.waterline([2.0], 4)


def test_p_zero_and_one_are_valid():
    result = sera.allocate([0.0, 1.0], 10, 2, 8)
    assert result.counts.tolist() == [8, 2]


@pytest.mark.parametrize("call, pattern", [
    (lambda: sera.kappa(1.2, 4), r"p must lie in \[0, 1\].*1\.2"),
    (lambda: sera.kappa(0.5, 0), r"n must be a rollout count >= 1.*0\.0"),
    (lambda: sera.mixed_probability(np.nan, 4), r"no NaN"),
    (lambda: sera.maxrl_advantages([1, 0, 1], [0, 0]), r"same length.*3 rewards and 2"),
    (lambda: sera.maxrl_advantages([], []), r"rewards is empty"),
    (lambda: sera.maxrl_advantages([1, -1], [0, 0]), r"rewards must be >= 0"),
    (lambda: sera.maxrl_advantages([1, np.nan], [0, 0]), r"rewards must be finite"),
    (lambda: sera.maxrl_advantages([1, 0], [0, 0], sizes=[2]), r"exactly one of groups"),
    (lambda: sera.pass_at_k([10, 10], [3, 11], 2), r"c must lie in \[0, n\]; got c=11"),
    (lambda: sera.pass_at_k(10, 3, 11), r"k must lie in \[1, n\]; got k=11 with n=10"),
    (lambda: sera.pass_at_k(10, 3, 0), r"k must be >= 1"),
    (lambda: sera.pass_at_k([10, 10], [3, 4, 5], 2), r"shape mismatch|broadcast"),
    (lambda: sera.paired_bootstrap([1, 2, 3], [1, 2]), r"same|shapes"),
    (lambda: sera.multiplicity_weights([4, -1], 8), r"counts must be finite and >= 0"),
    (lambda: sera.SuccessHistory(3).record([0, 5], [1, 0]), r"prompt_ids must lie in \[0, 2\]"),
    (lambda: sera.SuccessHistory(3).record([0, 1], [1]), r"same length; got 2 and 1"),
    (lambda: sera.SuccessHistory(3, gamma=1.5), r"gamma must lie in \[0\.0, 1\.0\], got 1\.5"),
])
def test_other_functions_reject_bad_input(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
