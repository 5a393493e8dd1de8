"""Allocator: budget and bounds, monotonicity, exactness against brute force and root finding."""

import itertools

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from scipy.optimize import brentq

import sera
from sera.fidelity import kappa

# p on a 0.001 grid keeps distinct values distinguishable in fidelity; 0 and 1 appear on their own.
prob = st.one_of(st.integers(0, 1000).map(lambda i: i / 1000), st.sampled_from([0.0, 1.0]))
interior_prob = st.integers(1, 999).map(lambda i: i / 1000)


@st.composite
def instances(draw, max_prompts=8, probs=prob, max_extra=40):
    p = np.array(draw(st.lists(probs, min_size=1, max_size=max_prompts)))
    n_min = draw(st.integers(2, 4))
    n_max = draw(st.one_of(st.none(), st.integers(n_min, n_min + 12)))
    low = p.size * n_min
    high = low + max_extra if n_max is None else p.size * n_max
    budget = draw(st.integers(low, high))
    return p, budget, n_min, n_max


def _upper(p, budget, n_min, n_max):
    return budget - (p.size - 1) * n_min if n_max is None else n_max


@given(instances(), st.sampled_from(["paper", "exact", "uniform"]))
def test_integer_counts_meet_budget_and_bounds(instance, method):
    p, budget, n_min, n_max = instance
    if method == "uniform":
        assume(n_max is None or budget <= p.size * n_max)
    result = sera.allocate(p, budget, n_min, n_max, method=method)
    assert result.counts.dtype.kind == "i"
    assert result.counts.sum() == budget
    assert result.counts.min() >= n_min
    assert result.counts.max() <= _upper(p, budget, n_min, n_max)
    assert result.retained.all() and not result.fallback


@given(instances())
def test_continuous_counts_sum_to_budget_within_bounds(instance):
    p, budget, n_min, n_max = instance
    counts, lam = sera.waterline(p, budget, n_min, n_max)
    assert counts.sum() == pytest.approx(budget, rel=1e-12)
    assert counts.min() >= n_min - 1e-12
    assert counts.max() <= _upper(p, budget, n_min, n_max) + 1e-9
    assert lam >= 0


@given(instances(), st.sampled_from(["continuous", "paper", "exact"]))
def test_lower_success_never_gets_fewer_rollouts(instance, method):
    p, budget, n_min, n_max = instance
    if method == "continuous":
        counts = sera.waterline(p, budget, n_min, n_max).counts
    else:
        counts = sera.allocate(p, budget, n_min, n_max, method=method).counts
    order = np.argsort(p, kind="stable")
    p_sorted, counts_sorted = p[order], counts[order]
    lower = p_sorted[:, None] < p_sorted[None, :]
    assert np.all(counts_sorted[:, None][lower.any(1)] >= 0)  # shape guard
    violations = lower & (counts_sorted[:, None] < counts_sorted[None, :] - 1e-9)
    assert not violations.any(), (p, counts)


@given(instances(probs=interior_prob))
def test_continuous_solution_equalizes_fidelity_of_unclipped_prompts(instance):
    p, budget, n_min, n_max = instance
    counts, lam = sera.waterline(p, budget, n_min, n_max)
    upper = _upper(p, budget, n_min, n_max)
    free = (counts > n_min + 1e-7) & (counts < upper - 1e-7)
    level = 1 - np.exp(-lam)
    np.testing.assert_allclose(kappa(p[free], counts[free]), level, rtol=1e-9, atol=1e-12)
    # Clipped prompts sit on the right side of the level.
    assert np.all(kappa(p[counts <= n_min + 1e-7], n_min) >= level - 1e-9)
    if upper > n_min:
        assert np.all(kappa(p[counts >= upper - 1e-7], upper) <= level + 1e-9)


@given(instances(probs=interior_prob))
def test_water_level_is_the_smallest_root(instance):
    p, budget, n_min, n_max = instance
    upper = _upper(p, budget, n_min, n_max)
    h = -np.log1p(-p)
    total = lambda lam: np.clip(1 + lam / h, n_min, upper).sum() - budget
    top = 50.0 * (upper - 1) * h.max()
    assume(total(0.0) < 0 < total(top))
    lam = sera.waterline(p, budget, n_min, n_max).lam
    assert abs(total(lam)) <= 1e-9 * budget
    assert total(lam * (1 - 1e-7)) < 0  # S(lam) can be flat to the right, never to the left
    assert lam <= brentq(total, 0.0, top, xtol=1e-14) * (1 + 1e-9)


def _lexicographic_best(p, budget, n_min, upper):
    """Brute force: every integer allocation, best sorted-fidelity vector."""
    best = None
    for counts in itertools.product(range(n_min, upper + 1), repeat=p.size):
        if sum(counts) != budget:
            continue
        key = tuple(np.sort(kappa(p, np.array(counts))))
        best = key if best is None or key > best else best
    return np.array(best)


@given(instances(max_prompts=4, probs=interior_prob, max_extra=14))
def test_exact_method_matches_brute_force(instance):
    p, budget, n_min, n_max = instance
    upper = _upper(p, budget, n_min, n_max)
    assume(upper - n_min <= 14)
    counts = sera.allocate(p, budget, n_min, n_max, method="exact").counts
    best = _lexicographic_best(p, budget, n_min, upper)
    np.testing.assert_allclose(np.sort(kappa(p, counts)), best, rtol=0, atol=1e-12)


@given(instances(max_prompts=4, probs=interior_prob, max_extra=14))
def test_paper_rounding_never_beats_exact(instance):
    p, budget, n_min, n_max = instance
    paper = sera.allocate(p, budget, n_min, n_max, method="paper")
    exact = sera.allocate(p, budget, n_min, n_max, method="exact")
    assert paper.fidelity.min() <= exact.fidelity.min() + 1e-12


def test_paper_rounding_can_fall_below_exact():
    # Found by the rounding-gap benchmark: the paper's rule gives the extra rollout by squared
    # error to the level, not to the prompt with the lowest fidelity.
    rng = np.random.default_rng(0)
    gaps = []
    for _ in range(300):
        b = int(rng.integers(2, 5))
        p = rng.uniform(0.01, 0.99, b)
        budget = int(rng.integers(2 * b, 8 * b + 1))
        paper = sera.allocate(p, budget, 2, 8, method="paper").fidelity.min()
        exact = sera.allocate(p, budget, 2, 8, method="exact").fidelity.min()
        gaps.append(exact - paper)
    assert max(gaps) > 1e-3


@given(instances(), st.sampled_from(["paper", "exact"]), st.floats(0.5, 64))
def test_multiplicity_weights_equalize_prompt_weight(instance, method, n0):
    p, budget, n_min, n_max = instance
    result = sera.allocate(p, budget, n_min, n_max, method=method, n0=n0)
    np.testing.assert_allclose(result.counts * result.weights, n0, rtol=1e-12)
    default = sera.allocate(p, budget, n_min, n_max, method=method)
    np.testing.assert_allclose(default.counts * default.weights, budget / p.size, rtol=1e-12)


def test_zero_and_one_are_limits_of_the_interior():
    p = np.array([0.0, 0.3, 0.7, 1.0])
    near = np.array([1e-12, 0.3, 0.7, 1 - 1e-12])
    for budget in (8, 13, 20, 27, 31, 40):
        for method in ("paper", "exact"):
            a = sera.allocate(p, budget, 2, 10, method=method).counts
            b = sera.allocate(near, budget, 2, 10, method=method).counts
            np.testing.assert_array_equal(a, b)


def test_zero_success_prompts_fill_first_and_share():
    counts, lam = sera.waterline([0.0, 0.0, 0.5], 12, 2, 8)
    np.testing.assert_allclose(counts, [5, 5, 2])
    assert lam == 0
    exact = sera.allocate([0.0, 0.0, 0.5], 13, 2, 8, method="exact").counts
    np.testing.assert_array_equal(exact, [6, 5, 2])


def test_sure_prompts_only_rise_after_the_rest_are_full():
    counts, lam = sera.waterline([1.0, 0.4, 1.0], 30, 2, 10)
    np.testing.assert_allclose(counts, [10, 10, 10])
    counts, lam = sera.waterline([1.0, 0.4, 1.0], 20, 2, 10)
    np.testing.assert_allclose(counts, [5, 10, 5])
    assert lam == np.inf


def test_safeguard_drops_prompts_that_cannot_show_signal():
    p = np.array([0.5, 0.001, 0.4, 0.6, 0.999])
    result = sera.allocate(p, 40, 2, 16, u_min=0.5)
    assert not result.fallback
    np.testing.assert_array_equal(result.retained, [True, False, True, True, False])
    assert result.counts.sum() == 40
    kept = result.retained
    assert np.all(sera.mixed_probability(p[kept], result.counts[kept]) >= 0.5)
    np.testing.assert_allclose(result.counts[kept] * result.weights[kept], 8.0)


def test_safeguard_falls_back_to_the_capacity_minimal_set():
    p = np.array([0.001, 0.002, 0.003, 0.5])
    result = sera.allocate(p, 24, 2, 8, u_min=0.9)
    assert result.fallback
    assert result.retained.sum() == 3  # ceil(24 / 8)
    assert result.retained[3]
    assert result.counts.sum() == 24


def test_safeguard_keeps_everything_when_all_pass():
    p = np.array([0.3, 0.5, 0.6])
    plain = sera.allocate(p, 24, 2, 12)
    guarded = sera.allocate(p, 24, 2, 12, u_min=0.2)
    np.testing.assert_array_equal(plain.counts, guarded.counts)


def test_uniform_matches_n0():
    result = sera.uniform([0.1, 0.5, 0.9], 24)
    np.testing.assert_array_equal(result.counts, [8, 8, 8])
    np.testing.assert_allclose(result.weights, 1.0)
    assert result.level == pytest.approx(kappa(0.1, 8))


def test_large_batch_runs_and_is_exact():
    rng = np.random.default_rng(1)
    p = rng.beta(0.5, 1.5, 100_000)
    for method in ("paper", "exact"):
        result = sera.allocate(p, 16 * p.size, 2, 64, method=method)
        assert result.counts.sum() == 16 * p.size
        assert result.counts.min() >= 2 and result.counts.max() <= 64
    exact = sera.allocate(p, 16 * p.size, 2, 64, method="exact")
    paper = sera.allocate(p, 16 * p.size, 2, 64, method="paper")
    assert exact.fidelity.min() >= paper.fidelity.min() - 1e-12


def test_paper_rounding_gives_p_one_remainders_by_index():
    result = sera.allocate([1.0, 0.4, 1.0], 21, 2, 10, method="paper")
    np.testing.assert_allclose(result.continuous, [5.5, 10, 5.5])
    np.testing.assert_array_equal(result.counts, [6, 10, 5])


def test_widened_bracket_agrees_with_the_tight_one():
    from sera.waterfill import hazard, pick_keys, solve

    rng = np.random.default_rng(5)
    for _ in range(40):
        p = rng.uniform(0.001, 0.999, int(rng.integers(2, 60)))
        budget = int(rng.integers(2 * p.size + 1, 12 * p.size))
        h = hazard(p)
        solution = solve(h, budget, 2, 12)
        if solution.interior is None:
            continue
        size = solution.interior.size
        t_low = solution.interior.level(solution.inner_budget - size)
        wanted = solution.inner_budget - size * 2
        tight = pick_keys(h, t_low, solution.lam, wanted, 2, 12, margin=0)
        wide = pick_keys(h, t_low, solution.lam, wanted, 2, 12, margin=1)
        assert wide is not None
        if tight is not None:
            np.testing.assert_array_equal(tight, wide)
        np.testing.assert_array_equal(wide + 2,
                                      sera.allocate(p, budget, 2, 12, method="exact").counts)
