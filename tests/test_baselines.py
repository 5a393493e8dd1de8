"""The allocators and estimators SERA is compared with: rules by hand and brute force, budgets and
bounds for any p, the RL2ML family against MaxRL and a Monte Carlo of its expectation."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sera
from sera import baselines

BATCH = np.array([0.02, 0.05, 0.10, 0.20, 0.35, 0.50, 0.70, 0.90])
wide = st.one_of(st.floats(-17, -1).map(lambda e: 10.0**e),
                 st.floats(-13, -1).map(lambda e: 1 - 10.0**e), st.floats(0.0, 1.0),
                 st.sampled_from([0.0, 1.0]))


@pytest.mark.parametrize("method, expected", [
    ("knapsack", [2, 8, 16, 13, 9, 7, 7, 2]),
    ("gvm", [13, 13, 11, 8, 6, 5, 4, 4]),
])
def test_the_reference_batch(method, expected):
    # The same batch under each rule, from shared/ALLOCATORS.md (B = 8, M = 64, 2 <= N <= 32).
    np.testing.assert_array_equal(sera.allocate(BATCH, 64, 2, 32, method=method).counts, expected)


@given(st.lists(wide, min_size=1, max_size=40), st.integers(2, 3), st.integers(0, 10),
       st.sampled_from(["knapsack", "gvm", "dars-hw", "dars-et"]), st.data())
def test_every_rule_meets_budget_and_bounds(p, n_min, width, method, data):
    p = np.array(p)
    n_max = n_min + width
    budget = data.draw(st.integers(p.size * n_min, p.size * n_max))
    result = sera.allocate(p, budget, n_min, n_max, method=method)
    assert result.counts.sum() == budget
    assert result.counts.min() >= n_min and result.counts.max() <= n_max
    np.testing.assert_allclose(result.counts * result.weights, budget / p.size)


def _mixed_value(p, n):
    """Knapsack RL's value of n rollouts: U(p, n) p (1-p)^2 (0 at p = 0 and p = 1)."""
    return sera.mixed_probability(p, n) * p * (1 - p) ** 2


def _knapsack_brute_force(p, budget, lo, hi):
    best = -1.0
    for counts in itertools.product(range(lo, hi + 1), repeat=p.size):
        if sum(counts) == budget:
            best = max(best, float(_mixed_value(p, np.array(counts)).sum()))
    return best


def test_knapsack_is_the_exact_integer_optimum():
    rng = np.random.default_rng(0)
    for _ in range(150):
        b = int(rng.integers(1, 5))
        p = rng.uniform(0, 1, b)
        hi = int(rng.integers(2, 9))
        budget = int(rng.integers(2 * b, hi * b + 1))
        counts = baselines.knapsack(p, budget, 2, hi)
        value = float(_mixed_value(p, counts).sum())
        assert value == pytest.approx(_knapsack_brute_force(p, budget, 2, hi), rel=1e-12)


def test_knapsack_keeps_sure_and_hopeless_prompts_at_the_minimum_until_items_are_full():
    counts = sera.allocate([0.0, 0.5, 1.0], 12, 2, 6, method="knapsack").counts
    assert counts[1] == 6 and counts[0] + counts[2] == 6
    assert counts[0] == 4 and counts[2] == 2  # left-over rollouts go to the p = 0 prompt


def test_proportional_rules_follow_their_weights():
    p = np.array([0.01, 0.1, 0.3, 0.6])
    result = sera.allocate(p, 400, 2, 1000, method="dars-hw")
    np.testing.assert_allclose(result.continuous / result.continuous[-1],
                               [50, 5, 1 / 0.6, 1], rtol=1e-9)
    et = baselines.dars_weights(np.array([0.0, 0.25, 0.5, 0.9]), n0=8, schedule="et")
    np.testing.assert_allclose(et, [1 / (4 * (0.5 / 8) * (1 - 0.5 / 8)), 4 / 3, 1, 1])
    np.testing.assert_allclose(baselines.gvm_weights(np.array([0.0, 0.5])),
                               [0, 1 / np.sqrt(0.5 + 0.002)])


def test_baselines_refuse_the_safeguard_and_bad_input():
    with pytest.raises(ValueError, match="u_min .* applies to the methods"):
        sera.allocate(BATCH, 64, 2, 32, method="knapsack", u_min=0.3)
    with pytest.raises(ValueError, match="budget=300 is infeasible"):
        sera.allocate(BATCH, 300, 2, 32, method="gvm")
    with pytest.raises(ValueError, match=r"p must lie in \[0, 1\]"):
        sera.allocate([0.2, 1.2], 8, method="dars-et")


def test_rl2ml_family_contains_maxrl_and_plain_rl():
    rng = np.random.default_rng(1)
    rewards = rng.integers(0, 2, 60).astype(float)
    sizes = np.array([2, 4, 8, 16, 30])
    np.testing.assert_allclose(sera.rl2ml_advantages(rewards, alpha=1.0, sizes=sizes),
                               sera.maxrl_advantages(rewards, sizes=sizes))
    groups = sera.groups_from_sizes(sizes)
    means = np.bincount(groups, rewards) / sizes
    np.testing.assert_allclose(sera.rl2ml_advantages(rewards, alpha=0.0, sizes=sizes),
                               rewards - means[groups])
    p = np.linspace(0.01, 0.99, 9)
    for n in (2, 5, 16):
        np.testing.assert_allclose(sera.rl2ml_weight(p, n, 1.0), sera.kappa(p, n) / p)
        passes = sum((1 - (1 - p) ** k) / k for k in range(1, n))
        np.testing.assert_allclose(sera.rl2ml_surrogate(p, n, 1.0), passes)
        for alpha in (0.0, 0.5, 2.0):  # the surrogate's slope is the weight
            step = 1e-6
            slope = (sera.rl2ml_surrogate(p + step, n, alpha)
                     - sera.rl2ml_surrogate(p - step, n, alpha)) / (2 * step)
            np.testing.assert_allclose(slope, sera.rl2ml_weight(p, n, alpha), rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.5])
@pytest.mark.parametrize("p, n", [(0.1, 4), (0.4, 8), (0.7, 3)])
def test_rl2ml_expectation_is_its_weight_times_grad_p(alpha, p, n):
    # A Bernoulli policy with logit theta: score r - p, grad p = p (1 - p). Over many groups the
    # per-prompt estimator (1/N) sum A_i (r_i - p) averages to w_N(p) p (1 - p).
    draws = 200_000
    rng = np.random.default_rng(int(100 * p) + n)
    rewards = (rng.random(draws * n) < p).astype(float)
    advantages = sera.rl2ml_advantages(rewards, alpha=alpha, sizes=np.full(draws, n))
    per_group = (advantages * (rewards - p)).reshape(draws, n).mean(1)
    se = per_group.std(ddof=1) / np.sqrt(draws)
    target = sera.rl2ml_weight(p, n, alpha) * p * (1 - p)
    assert abs(per_group.mean() - target) < 5 * se


def test_rl2ml_rejects_non_binary_rewards():
    with pytest.raises(ValueError, match="binary rewards"):
        sera.rl2ml_advantages([0.5, 1.0], sizes=[2])
