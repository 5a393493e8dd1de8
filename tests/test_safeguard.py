"""The observability safeguard: its binary search over prefixes against trying every prefix."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sera
from sera.allocation import _counts


def every_prefix(p, budget, n_min, n_max, rule, u_min):
    """The specification: rank by U(p, n_max), try each capacity-feasible prefix from the largest
    down, allocate the whole budget over it, keep the first whose prompts all reach u_min; if none
    does, keep the top ceil(budget / n_max). Returns (counts over the batch, fallback)."""
    rank_count = n_max if n_max is not None else budget - (p.size - 1) * n_min
    order = np.argsort(-sera.mixed_probability(p, rank_count), kind="stable")
    smallest = math.ceil(budget / n_max) if n_max is not None else 1
    for size in range(min(p.size, budget // n_min), smallest - 1, -1):
        kept = order[:size]
        bound = n_max if n_max is not None else budget - (size - 1) * n_min
        counts = np.zeros(p.size, dtype=np.int64)
        counts[kept] = _counts(p[kept], budget, n_min, bound, rule)[0]
        if np.all(sera.mixed_probability(p[kept], counts[kept]) >= u_min):
            return counts, False
    return counts, True  # the loop ended at the smallest prefix


wide = st.one_of(st.floats(-12, -1).map(lambda e: 10.0**e),
                 st.floats(-12, -1).map(lambda e: 1 - 10.0**e),
                 st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0, 0.5]))


@st.composite
def guarded(draw):
    p = np.array(draw(st.lists(wide, min_size=1, max_size=16)))
    n_min = draw(st.integers(2, 3))
    n_max = draw(st.one_of(st.none(), st.integers(n_min, 24)))
    high = p.size * (n_max if n_max is not None else n_min + 6)
    budget = draw(st.integers(p.size * n_min, high))
    u_min = draw(st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0])))
    return p, budget, n_min, n_max, u_min


@given(guarded(), st.sampled_from(["paper", "exact"]))
def test_binary_search_equals_trying_every_prefix(instance, rule):
    p, budget, n_min, n_max, u_min = instance
    result = sera.allocate(p, budget, n_min, n_max, rule=rule, u_min=u_min)
    counts, fallback = every_prefix(p, budget, n_min, n_max, rule, u_min)
    np.testing.assert_array_equal(result.counts, counts)
    assert result.fallback == fallback
    assert result.counts.sum() == budget


def test_binary_search_on_random_batches():
    # Thresholds set to some prompt's U at some count put prompts exactly on the boundary.
    rng = np.random.default_rng(11)
    for _ in range(400):
        b = int(rng.integers(2, 24))
        p = np.where(rng.random(b) < 0.3, 10.0 ** -rng.uniform(1, 8, b), rng.uniform(0, 1, b))
        n_max = int(rng.integers(3, 20))
        budget = int(rng.integers(2 * b, n_max * b + 1))
        u_min = float(sera.mixed_probability(p[rng.integers(b)], rng.integers(2, n_max + 1)))
        for rule in ("paper", "exact"):
            result = sera.allocate(p, budget, 2, n_max, rule=rule, u_min=u_min)
            counts, fallback = every_prefix(p, budget, 2, n_max, rule, u_min)
            np.testing.assert_array_equal(result.counts, counts)
            assert result.fallback == fallback


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


@pytest.mark.parametrize("rule", ["paper", "exact"])
def test_safeguard_keeps_everything_when_all_pass(rule):
    p = np.array([0.3, 0.5, 0.6])
    plain = sera.allocate(p, 24, 2, 12, rule=rule)
    guarded = sera.allocate(p, 24, 2, 12, rule=rule, u_min=0.2)
    np.testing.assert_array_equal(plain.counts, guarded.counts)
    assert not guarded.fallback
