"""Estimators on numpy arrays: ragged groups by hand, weights, loss aggregation. (The Monte Carlo
checks against kappa(p, N) grad log p use torch autograd: tests/test_torch_paths.py.)"""

import numpy as np
import pytest

import sera


def test_maxrl_advantages_by_hand_on_ragged_groups():
    rewards = np.array([1, 0, 0, 1, 1, 0, 0, 0, 1])
    groups = np.array([7, 7, 7, 7, 3, 3, 9, 9, 5])  # sizes 4, 2, 2, 1
    adv = sera.maxrl_advantages(rewards, groups)
    # group 7: rbar = 1/2 -> success (1 - .5)/.5 = 1, failure -1; group 3: rbar=1/2;
    # group 9: no success -> 0; group 5: all success -> 0.
    np.testing.assert_allclose(adv, [1, -1, -1, 1, 1, -1, 0, 0, 0])
    np.testing.assert_allclose(sera.maxrl_advantages(rewards, groups, centered=False),
                               [2, 0, 0, 2, 2, 0, 0, 0, 1])
    by_size = sera.maxrl_advantages(rewards[[0, 1, 2, 3, 4, 5]], sizes=[4, 2])
    np.testing.assert_allclose(by_size, [1, -1, -1, 1, 1, -1])


def test_centered_advantages_match_n_times_r_over_k_minus_one():
    rng = np.random.default_rng(3)
    rewards = rng.integers(0, 2, 40).astype(float)
    sizes = np.array([3, 5, 8, 2, 7, 15])
    groups = sera.groups_from_sizes(sizes)
    adv = sera.maxrl_advantages(rewards, groups)
    for g, n in enumerate(sizes):
        r = rewards[groups == g]
        k = r.sum()
        expected = n * (r / k - 1 / n) if k > 0 else np.zeros(n)
        np.testing.assert_allclose(adv[groups == g], expected)


def test_grpo_and_rloo_by_hand():
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 0.5])
    groups = np.array([0, 0, 0, 1, 2])
    std = np.std([1, 0, 0], ddof=1)
    np.testing.assert_allclose(sera.grpo_advantages(rewards, groups, eps=0.0)[:3],
                               (np.array([1, 0, 0]) - 1 / 3) / std)
    assert sera.grpo_advantages(rewards, groups)[3:].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(sera.rloo_advantages(rewards, groups),
                               [1 - 0, 0 - 0.5, 0 - 0.5, 0, 0])


def test_multiplicity_weights():
    np.testing.assert_allclose(sera.multiplicity_weights([2, 4, 0, 16], 8), [4, 2, 0, 0.5])




def test_numpy_aggregation_selects_the_response_tokens():
    losses = np.array([[1.0, np.nan, 2.0], [3.0, np.inf, -np.inf]])
    mask = np.array([[1, 0, 1], [1, 0, 0]])
    assert sera.aggregate(losses, mask, "token-mean") == pytest.approx(6.0 / 3)
    assert sera.aggregate(losses, mask, "seqnorm", max_len=4) == pytest.approx(6.0 / 8)
