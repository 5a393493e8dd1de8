"""Allocator: budget and bounds, monotonicity, the continuous level against a root finder, and both
roundings against readable specifications, for p anywhere in [0, 1]."""

import contextlib
import heapq
import importlib
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from scipy.optimize import brentq

import sera
from sera import waterfill
from sera.fidelity import kappa
from sera.waterfill import Interior, hazard

# p with log-uniform tails on both sides: 1e-17 .. 1e-1 and 1 - 1e-1 .. 1 - 1e-13, the plain
# middle, and the ends 0 and 1 themselves.
tiny = st.floats(-17, -1).map(lambda e: 10.0**e)
near_one = st.floats(-13, -1).map(lambda e: 1 - 10.0**e)
middle = st.floats(0.0, 1.0, exclude_min=True, exclude_max=True)
interior_prob = st.one_of(tiny, near_one, middle)
prob = st.one_of(interior_prob, st.sampled_from([0.0, 1.0]))


@contextlib.contextmanager
def _patched(**values):
    """Each name patched in every module of sera.waterfill that binds it, where the code looks it
    up (SELECT_FROM and SAMPLE size both the level's selection and the paper rounding's cut), as
    one patch of waterfill did when it was a single module."""
    modules = [importlib.import_module(f"sera.waterfill.{name}")
               for name in ("hazard", "level", "rounding")]
    with contextlib.ExitStack() as stack:
        for name, value in values.items():
            holders = [module for module in modules if hasattr(module, name)]
            assert holders, f"no module of sera.waterfill binds {name}"
            for module in holders:
                stack.enter_context(mock.patch.object(module, name, value))
        yield


@st.composite
def instances(draw, max_prompts=64, probs=prob, max_extra=40, max_width=12):
    p = np.array(draw(st.lists(probs, min_size=1, max_size=max_prompts)))
    n_min = draw(st.integers(2, 4))
    n_max = draw(st.one_of(st.none(), st.integers(n_min, n_min + max_width)))
    low = p.size * n_min
    high = low + max_extra if n_max is None else p.size * n_max
    budget = draw(st.integers(low, high))
    return p, budget, n_min, n_max


def _upper(p, budget, n_min, n_max):
    return budget - (p.size - 1) * n_min if n_max is None else n_max


# ----------------------------------------------------------------------------- specifications


def water_fill(p, budget, n_min, upper):
    """The exact method's specification: start every prompt at n_min and hand out the rest one
    rollout at a time to the prompt with the lowest fidelity (ties: fewest rollouts, then lowest
    index). kappa(p, n) = 1 - exp(-(n-1) h) is ordered by (n-1) h, which does not round to 1."""
    with np.errstate(divide="ignore"):
        h = -np.log1p(-np.asarray(p, dtype=float))
    counts = [n_min] * len(h)
    heap = [((n_min - 1) * h[q], n_min, q) for q in range(len(h)) if n_min < upper]
    heapq.heapify(heap)
    for _ in range(budget - n_min * len(h)):
        _, n, q = heapq.heappop(heap)
        counts[q] = n + 1
        if n + 1 < upper:
            heapq.heappush(heap, (n * h[q], n + 1, q))
    return np.array(counts)


def root_counts(p, budget, n_min, upper):
    """Continuous counts from scipy's root finder on the water level, for 0 < p < 1: S(lam) =
    sum clip(1 + lam/h, n_min, upper) summed directly, searched over x = log(lam) (lam/h is
    taken as exp(x - log h), which stays finite for subnormal h)."""
    log_h = np.log(-np.log1p(-p))

    def counts(x):
        with np.errstate(over="ignore"):
            return np.clip(1 + np.exp(x - log_h), n_min, upper)

    low = np.log(n_min - 1) + log_h.min() - 1
    high = np.log(upper - 1) + log_h.max() + 1
    if counts(low).sum() >= budget:
        return counts(low)
    x = brentq(lambda x: counts(x).sum() - budget, low, high, xtol=1e-14, rtol=1e-15,
               maxiter=500)
    return counts(x)


# ----------------------------------------------------------------------------- properties


def _hazard_points():
    rng = np.random.default_rng(11)
    edges = [0.0, -0.0, 5e-324, 2.0**-1022, 1e-300, 2.0**-55, 3 * 2.0**-55, 2.0**-54, 2.0**-53,
             1e-10, 0.25, np.nextafter(0.5, 0), 0.5, np.nextafter(0.5, 1), 1 - 2.0**-52,
             np.nextafter(1, 0), 1.0]
    runs = [start + np.arange(200) * np.spacing(start) for start in (1e-5, 0.3, 0.5, 0.9)]
    return np.concatenate([edges, 10.0 ** -rng.uniform(0, 324, 3000),
                           1 - 10.0 ** -rng.uniform(0, 16, 3000), rng.random(3000), *runs])


@pytest.mark.parametrize("path", ["log1p", "log"])
def test_hazard_is_within_an_ulp_of_a_high_precision_log1p(path):
    # Both ways hazard computes -log(1-p) (numpy's log1p, or its log plus the rounding error of
    # 1-p where log1p runs no SIMD loop), against mpmath at 60 digits.
    import mpmath

    p = _hazard_points()
    with _patched(_log1p_vectorised=lambda: path == "log1p"):
        h = hazard(p)
    with mpmath.workdps(60):
        exact = np.array([float(-mpmath.log1p(-mpmath.mpf(float(x)))) if x < 1 else math.inf
                          for x in p])
    inside = (p > 0) & (p < 1)
    np.testing.assert_array_equal(h[~inside], exact[~inside])
    assert not np.signbit(h).any()  # +0 at p = 0 and p = -0: lam / h is +inf there
    assert np.all(np.abs(h[inside] - exact[inside]) <= np.spacing(exact[inside]))
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(h[order]) >= 0)  # nondecreasing in p, adjacent floats included
    with _patched(_log1p_vectorised=lambda: path == "log1p"):
        single = hazard(np.asarray(0.3))  # 0-d, as rollouts_for_fidelity passes a scalar p
    assert single.shape == () and abs(single - math.log(1 / 0.7)) <= np.spacing(single)


@given(instances(), st.sampled_from(["paper", "exact", "uniform"]))
def test_integer_counts_meet_budget_and_bounds(instance, method):
    p, budget, n_min, n_max = instance
    result = sera.allocate(p, budget, n_min, n_max, rule=method)
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


@given(instances(probs=interior_prob))
def test_continuous_counts_match_a_root_finder(instance):
    p, budget, n_min, n_max = instance
    upper = _upper(p, budget, n_min, n_max)
    counts = sera.waterline(p, budget, n_min, n_max).counts
    np.testing.assert_allclose(counts, root_counts(p, budget, n_min, upper), rtol=0,
                               atol=1e-9 * upper)


@given(instances(), st.sampled_from(["continuous", "paper", "exact"]))
def test_lower_success_never_gets_fewer_rollouts(instance, method):
    p, budget, n_min, n_max = instance
    if method == "continuous":
        counts = sera.waterline(p, budget, n_min, n_max).counts
    else:
        counts = sera.allocate(p, budget, n_min, n_max, rule=method).counts
    lower = p[:, None] < p[None, :]
    violations = lower & (counts[:, None] < counts[None, :] - 1e-9)
    assert not violations.any(), (p, counts)


@given(instances(probs=st.one_of(middle, tiny)))
def test_continuous_solution_equalizes_fidelity_of_unclipped_prompts(instance):
    p, budget, n_min, n_max = instance
    counts, lam = sera.waterline(p, budget, n_min, n_max)
    upper = _upper(p, budget, n_min, n_max)
    free = (counts > n_min + 1e-7) & (counts < upper - 1e-7)
    level = -np.expm1(-lam)
    np.testing.assert_allclose(kappa(p[free], counts[free]), level, rtol=1e-9, atol=1e-300)
    # Clipped prompts sit on the right side of the level.
    assert np.all(kappa(p[counts <= n_min + 1e-7], n_min) >= level * (1 - 1e-9))
    if upper > n_min:
        assert np.all(kappa(p[counts >= upper - 1e-7], upper) <= level * (1 + 1e-9))


@given(instances(probs=interior_prob, max_extra=120))
def test_exact_method_is_the_water_filling(instance):
    p, budget, n_min, n_max = instance
    upper = _upper(p, budget, n_min, n_max)
    counts = sera.allocate(p, budget, n_min, n_max, rule="exact").counts
    np.testing.assert_array_equal(counts, water_fill(p, budget, n_min, upper))


@given(instances(probs=prob, max_extra=120))
def test_exact_method_follows_the_limits_at_zero_and_one(instance):
    # p = 0 has kappa 0 at any count, so water-filling raises it first; p = 1 only once every
    # other prompt is full. The heap reaches the same through keys 0 and inf.
    p, budget, n_min, n_max = instance
    upper = _upper(p, budget, n_min, n_max)
    counts = sera.allocate(p, budget, n_min, n_max, rule="exact").counts
    np.testing.assert_array_equal(counts, water_fill(p, budget, n_min, upper))


@given(instances(probs=interior_prob))
def test_paper_rounding_follows_its_rule(instance):
    # Floors of the root finder's counts, then the extra rollouts go to the prompts with the
    # smallest one-increment squared fidelity error: every prompt that got one has an error no
    # larger than any eligible prompt that did not.
    p, budget, n_min, n_max = instance
    upper = _upper(p, budget, n_min, n_max)
    continuous = root_counts(p, budget, n_min, upper)
    counts = sera.allocate(p, budget, n_min, n_max, rule="paper").counts
    floors = np.floor(continuous + 1e-9)
    extra = counts - floors
    assert set(np.unique(extra)) <= {0, 1}, (continuous, counts)
    free = (continuous > n_min + 1e-7) & (continuous < upper - 1e-7)
    level = kappa(p[free], continuous[free]).mean() if free.any() else None
    assume(level is not None)
    error = (kappa(p, np.minimum(floors + 1, upper)) - level) ** 2
    eligible = floors < upper
    got, not_got = error[extra == 1], error[eligible & (extra == 0)]
    if got.size and not_got.size:
        assert got.max() <= not_got.min() + 1e-12


@given(instances(max_prompts=12, probs=interior_prob, max_extra=14))
def test_paper_rounding_never_beats_exact(instance):
    p, budget, n_min, n_max = instance
    paper = sera.allocate(p, budget, n_min, n_max, rule="paper")
    exact = sera.allocate(p, budget, n_min, n_max, rule="exact")
    assert paper.fidelity.min() <= exact.fidelity.min() * (1 + 1e-12)


@given(instances(), st.sampled_from(["paper", "exact"]), st.floats(0.5, 64))
def test_multiplicity_weights_equalize_prompt_weight(instance, method, n0):
    p, budget, n_min, n_max = instance
    result = sera.allocate(p, budget, n_min, n_max, rule=method, n0=n0)
    np.testing.assert_allclose(result.counts * result.weights, n0, rtol=1e-12)
    default = sera.allocate(p, budget, n_min, n_max, rule=method)
    np.testing.assert_allclose(default.counts * default.weights, budget / p.size, rtol=1e-12)


# ----------------------------------------------------------------------------- cases


@pytest.mark.parametrize("p, budget, n_min, n_max, expected", [
    ([1e-16, 0.9], 7, 2, 4, [4, 3]),
    ([1e-12, 0.5], 7, 2, 4, [4, 3]),
    ([1e-15, 0.999999], 15, 2, 8, [8, 7]),
    ([1e-300, 0.3, 1 - 1e-16], 12, 2, 8, [8, 2, 2]),
    ([5e-324, 1e-300, 0.5, 0.0, 1.0], 25, 2, 6, [6, 6, 5, 6, 2]),
])
def test_batches_mixing_tiny_and_moderate_p(p, budget, n_min, n_max, expected):
    assert sera.waterline(p, budget, n_min, n_max).counts.sum() == pytest.approx(budget)
    for method in ("paper", "exact"):
        result = sera.allocate(p, budget, n_min, n_max, rule=method)
        np.testing.assert_array_equal(result.counts, expected)


def test_confident_softmax_batches():
    # What a classifier feeds the allocator: most p within 1e-6 of 1, a few far below.
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = 1 - 10.0 ** -rng.uniform(0, 16, 64)
        p[rng.random(64) < 0.1] = 10.0 ** -rng.uniform(0, 300, 1)
        budget = 64 * 16
        exact = sera.allocate(p, budget, 2, 128, rule="exact").counts
        np.testing.assert_array_equal(exact, water_fill(p, budget, 2, 128))
        paper = sera.allocate(p, budget, 2, 128, rule="paper").counts
        assert paper.sum() == budget and paper.min() >= 2 and paper.max() <= 128


def test_paper_rounding_can_fall_below_exact():
    # Found by the rounding-gap benchmark: the paper's rule gives the extra rollout by squared
    # error to the level, not to the prompt with the lowest fidelity.
    rng = np.random.default_rng(0)
    gaps = []
    for _ in range(300):
        b = int(rng.integers(2, 5))
        p = rng.uniform(0.01, 0.99, b)
        budget = int(rng.integers(2 * b, 8 * b + 1))
        paper = sera.allocate(p, budget, 2, 8, rule="paper").fidelity.min()
        exact = sera.allocate(p, budget, 2, 8, rule="exact").fidelity.min()
        gaps.append(exact - paper)
    assert max(gaps) > 1e-3


def test_zero_and_one_are_limits_of_the_interior():
    p = np.array([0.0, 0.3, 0.7, 1.0])
    near = np.array([1e-12, 0.3, 0.7, 1 - 1e-12])
    for budget in (8, 13, 20, 27, 31, 40):
        for method in ("paper", "exact"):
            a = sera.allocate(p, budget, 2, 10, rule=method).counts
            b = sera.allocate(near, budget, 2, 10, rule=method).counts
            np.testing.assert_array_equal(a, b)


def test_zero_success_prompts_fill_first_and_share():
    counts, lam = sera.waterline([0.0, 0.0, 0.5], 12, 2, 8)
    np.testing.assert_allclose(counts, [5, 5, 2])
    assert lam == 0
    exact = sera.allocate([0.0, 0.0, 0.5], 13, 2, 8, rule="exact").counts
    np.testing.assert_array_equal(exact, [6, 5, 2])


def test_sure_prompts_only_rise_after_the_rest_are_full():
    counts, lam = sera.waterline([1.0, 0.4, 1.0], 30, 2, 10)
    np.testing.assert_allclose(counts, [10, 10, 10])
    counts, lam = sera.waterline([1.0, 0.4, 1.0], 20, 2, 10)
    np.testing.assert_allclose(counts, [5, 10, 5])
    assert lam == np.inf


def test_tiny_levels_keep_their_digits():
    # lam = 6 * 1e-300: 1 - exp(-lam) would round to 0.
    result = sera.allocate([1e-300, 0.5], 9, 2, 7)
    assert result.lam == pytest.approx(6e-300, rel=1e-12)
    assert result.level == pytest.approx(6e-300, rel=1e-12)


def test_uniform_matches_n0():
    result = sera.uniform([0.1, 0.5, 0.9], 24)
    np.testing.assert_array_equal(result.counts, [8, 8, 8])
    np.testing.assert_allclose(result.weights, 1.0)
    assert result.level == pytest.approx(kappa(0.1, 8))


def test_large_batch_runs_and_is_exact():
    rng = np.random.default_rng(1)
    p = rng.beta(0.5, 1.5, 100_000)
    p[:100] = 10.0 ** -rng.uniform(5, 300, 100)
    for method in ("paper", "exact"):
        result = sera.allocate(p, 16 * p.size, 2, 64, rule=method)
        assert result.counts.sum() == 16 * p.size
        assert result.counts.min() >= 2 and result.counts.max() <= 64
    exact = sera.allocate(p, 16 * p.size, 2, 64, rule="exact")
    paper = sera.allocate(p, 16 * p.size, 2, 64, rule="paper")
    assert exact.fidelity.min() >= paper.fidelity.min() - 1e-12
    sample = p[:20_000]
    np.testing.assert_array_equal(sera.allocate(sample, 16 * sample.size, 2, 64,
                                                rule="exact").counts,
                                  water_fill(sample, 16 * sample.size, 2, 64))


@pytest.mark.parametrize("rule", ["paper", "exact"])
def test_negative_zero_is_p_zero(rule):
    # -0.0 passes the range check (-0.0 >= 0); its hazard must be +0, or lam / h = -inf would put
    # a p = 0 prompt at n_min and the paper rounding would have more to hand out than prompts.
    for p in ([-0.0, 0.5, 0.3], [-0.0, 0.0, 1.0]):
        with_sign = sera.allocate(np.array(p), 20, 2, 10, rule=rule)
        without = sera.allocate(np.abs(p), 20, 2, 10, rule=rule)
        np.testing.assert_array_equal(with_sign.counts, without.counts)
        np.testing.assert_array_equal(with_sign.continuous, without.continuous)


def test_paper_rounding_gives_p_one_remainders_by_index():
    result = sera.allocate([1.0, 0.4, 1.0], 21, 2, 10, rule="paper")
    np.testing.assert_allclose(result.continuous, [5.5, 10, 5.5])
    np.testing.assert_array_equal(result.counts, [6, 10, 5])


def test_exact_selection_checks_itself_and_widens():
    # A bracket that is too tight on purpose: pick_keys must refuse it rather than answer wrong,
    # and the widened bracket must agree with the water-filling.
    from sera.waterfill import pick_keys, solve

    rng = np.random.default_rng(5)
    refused = 0
    for _ in range(60):
        p = rng.uniform(0.001, 0.999, int(rng.integers(2, 40)))
        budget = int(rng.integers(2 * p.size + 1, 12 * p.size))
        solution = solve(hazard(p), budget, 2, 12)
        if not solution.interior:
            continue
        wanted = solution.inner_budget - 2 * solution.n_inner
        lam = solution.lam_scaled
        squeezed = pick_keys(solution.h, lam * 0.999, lam * 0.999, wanted, 2, 12, margin=0)
        refused += squeezed is None
        if squeezed is not None:
            np.testing.assert_array_equal(squeezed + 2, water_fill(p, budget, 2, 12))
        wide = pick_keys(solution.h, lam * 0.5, lam * 1.5, wanted, 2, 12, margin=1)
        np.testing.assert_array_equal(wide + 2, water_fill(p, budget, 2, 12))
        every = pick_keys(solution.h, math.ulp(0.0), np.finfo(float).max, wanted, 2, 12, 0)
        np.testing.assert_array_equal(every + 2, water_fill(p, budget, 2, 12))
    assert refused > 0


@pytest.mark.parametrize("budget", [2**40, 2**62, 2**66])
def test_waterline_at_budgets_beyond_64_bit_integers(budget):
    # the breakpoint search counts prompts in floats: no int64 wrap however large the budget
    p = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    result = sera.waterline(p, budget, n_min=2)
    assert result.counts.sum() == pytest.approx(budget, rel=1e-12)
    assert np.all(np.diff(result.counts) < 0)  # harder prompts get more


def _every_result(p, budget, n_min, n_max):
    counts, lam = sera.waterline(p, budget, n_min, n_max)
    return [counts, lam, *(sera.allocate(p, budget, n_min, n_max, rule=method).counts
                           for method in ("paper", "exact"))]


def _assert_same_bits(first, second):
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b, strict=True)


@given(instances(max_extra=120), st.sampled_from([2, 3, 7]))
def test_breakpoint_search_takes_the_same_result_with_fewer_probes(instance, probes):
    # The search evaluates S at every breakpoint of a short range, else at Interior.PROBES a
    # round; with 2 and none at once it is a binary search (many more rounds) over the same
    # sums, and every number must come out the same.
    default = _every_result(*instance)
    with mock.patch.multiple(Interior, PROBES=probes, ALL_AT_ONCE_UP_TO=0):
        fewer = _every_result(*instance)
    _assert_same_bits(default, fewer)


@pytest.mark.parametrize("size", [1, 2, 63, 64, 65, 1000, 3 * 4096 + 5])
def test_breakpoint_search_finds_the_first_breakpoint_reaching_the_target(size):
    # Brute force: S at every breakpoint in one vectorised call, the first reaching the target.
    rng = np.random.default_rng(size)
    p = rng.beta(0.6, 1.2, size)
    p[: size // 10] = 10.0 ** -rng.uniform(1, 300, size // 10)
    h = np.sort(hazard(p))
    for hi in (3, 64):
        interior = Interior(h, 2, hi)
        for target in (2 * size, 2 * size + 1, rng.integers(2 * size, hi * size + 1), hi * size):
            for scale in (1, hi - 1):
                reached = interior.total(scale * h) >= target
                expected = int(np.argmax(reached)) if reached.any() else size
                for probes, at_once in ((2, 0), (3, 0), (Interior.PROBES, 0), (2, size),
                                        (Interior.PROBES, Interior.ALL_AT_ONCE_UP_TO)):
                    with mock.patch.multiple(Interior, PROBES=probes,
                                             ALL_AT_ONCE_UP_TO=at_once):
                        assert interior._first_reaching(scale, target) == expected


@pytest.mark.parametrize("n_max", [None, 64])
def test_large_batches_search_with_the_same_result_whatever_the_probes(n_max):
    rng = np.random.default_rng(7)
    p = rng.beta(0.6, 1.2, 6000)
    p[:300] = 10.0 ** -rng.uniform(1, 300, 300)
    p[300:600] = 1 - 10.0 ** -rng.uniform(1, 16, 300)
    p[600:610] = [0.0, 1.0, 1e-300, 1 - 1e-16, 5e-324, 0.0, 1.0, 0.5, 1e-300, 1 - 1e-16]
    for budget in (2 * p.size + 1, 16 * p.size, 60 * p.size):
        default = _every_result(p, budget, 2, n_max)
        with mock.patch.multiple(Interior, PROBES=2, ALL_AT_ONCE_UP_TO=0):
            binary = _every_result(p, budget, 2, n_max)
        _assert_same_bits(default, binary)
        upper = _upper(p, budget, 2, n_max)
        np.testing.assert_array_equal(default[3], water_fill(p, budget, 2, upper))


def _selection(sample=4, rounds=16):
    """Every batch's level found by selection, with `sample` prompts sampled per round."""
    return _patched(SELECT_FROM=1, SAMPLE=sample, _ROUNDS=rounds)


def _assert_same_allocations(selected, sorted_):
    # The level may differ in its last digits (the same sums in another order); every integer
    # count must be the same.
    (counts, lam, paper, exact), (counts_ref, lam_ref, paper_ref, exact_ref) = selected, sorted_
    assert lam == lam_ref or abs(lam - lam_ref) <= 1e-14 * lam_ref, (lam, lam_ref)
    np.testing.assert_allclose(counts, counts_ref, rtol=1e-13)
    np.testing.assert_array_equal(paper, paper_ref)
    np.testing.assert_array_equal(exact, exact_ref)


@given(instances(max_prompts=100, max_extra=200), st.sampled_from([1, 2, 8]),
       st.sampled_from([0, 1, 16]))
def test_level_by_selection_matches_the_sorted_level(instance, sample, rounds):
    p, budget, n_min, n_max = instance
    with _selection(sample, rounds):
        selected = _every_result(*instance)
    _assert_same_allocations(selected, _every_result(*instance))
    upper = _upper(p, budget, n_min, n_max)
    np.testing.assert_array_equal(selected[3], water_fill(p, budget, n_min, upper))


@given(st.integers(1, 2**20), st.floats(0, 1e300) | st.sampled_from([0.0, 5e-324, 1e-310]),
       st.booleans())
def test_largest_below_is_where_the_rounded_product_crosses_the_bound(m, bound, strict):
    # The selection settles prompts by comparing h with _largest_below(m, bound) instead of
    # forming m * h: x must satisfy the rounded comparison and the next float up must not.
    x = waterfill._largest_below(m, bound, strict)
    holds = (lambda y: m * y < bound) if strict else (lambda y: m * y <= bound)
    assert holds(x) and not holds(math.nextafter(x, math.inf)), (m, bound, strict, x)


@pytest.mark.parametrize("margin", [0, 1])
def test_a_cut_that_clears_the_bracket_lies_between_the_extreme_keys(margin):
    # pick_keys skips the search for the largest taken and smallest untaken key when the cut
    # clears the bracket's ends by eight units in the last place (_clears). The hardest hazards
    # put a key within rounding of an end: h = t / k a few ulps either way, for many k, beside
    # hazards from 1e-300 to 700 and those of p = 0 and p = 1.
    rng = np.random.default_rng(3)
    lo, hi = 2, 64
    for t_low in (1e-290, 2.0**-1000, 1e-3, 0.7, 3.0, 1e50, 1e290):
        lam = t_low * rng.uniform(1.0, 3.0)
        k = np.arange(1.0, 80.0)
        near = np.concatenate([(t / k) * (1 + j * 2.0**-53) for t in (t_low, lam)
                               for j in range(-6, 7)])
        h = np.concatenate([near, 10.0 ** rng.uniform(-300, 2.8, 5_000), [0.0, np.inf]])
        first = waterfill._bracket(h, t_low, lo, hi, -margin)
        last = waterfill._bracket(h, lam, lo, hi, margin)
        top, bottom = waterfill._extremes(h, first, last, lo, hi)
        assert top < t_low * (1 + 2.0**-50) and bottom > lam * (1 - 2.0**-50), (t_low, top)
        for cut in (t_low * (1 + 2.0**-49), math.nextafter(lam * (1 - 2.0**-50), 0),
                    (t_low + lam) / 2):
            if waterfill._clears(cut, t_low, lam):
                assert top < cut < bottom, (t_low, lam, cut, top, bottom)


def test_the_sampled_selection_of_the_cut_is_the_partitions():
    # _smallest selects the paper rounding's cut among the keys two sampled pivots bracket;
    # against numpy's partition, on keys with ties, inf and NaN (prompts at hi), every rank
    # from the first to the last, including ranks where the pivots miss.
    rng = np.random.default_rng(8)
    size = waterfill.SELECT_FROM + 3_000
    keys = {"spread": rng.lognormal(0, 3, size),
            "ties": rng.choice([0.5, 1.0, 2.0, 4.0], size),
            "inf and nan": np.where(rng.random(size) < 0.2, np.nan,
                                    np.where(rng.random(size) < 0.1, np.inf, rng.random(size)))}
    for name, key in keys.items():
        before = key.copy()
        for rank in (0, 1, size // 3, size // 2, size - 2 * size // 5, size - 1):
            expected = np.partition(key, rank)[rank]
            got = waterfill._smallest(key, rank)
            assert got == expected or (np.isnan(got) and np.isnan(expected)), (name, rank)
        np.testing.assert_array_equal(key, before)  # the keys are left as they were


@pytest.mark.parametrize("miss", ["below", "above", "equal"])
def test_a_sampled_bracket_that_misses_the_level_is_settled_again(miss):
    # The sample's pivots are only estimates; where the level lies outside them, each round
    # settles the prompts again against the side that holds it. Pivots forced to miss (every
    # round) must still give the sorted level's allocations.
    rng = np.random.default_rng(5)
    p = _wide_batch(20_000, rng)
    budget = 16 * p.size
    pivots, missed = waterfill._pivots, []

    def missing(sample, scale, fixed, slope, low, high, target, lo, hi):
        t1, t2 = pivots(sample, scale, fixed, slope, low, high, target, lo, hi)
        inside = np.unique(np.concatenate([(lo - 1) * sample, (hi - 1) * sample]))
        inside = inside[(inside > low) & (inside < high)]
        side = inside[inside < t1] if miss == "below" else inside[inside > t2]
        if miss != "equal" and side.size < 2:
            return t1, t2
        missed.append(miss)
        if miss == "equal":
            return t1, t1
        return (side[0], side[1]) if miss == "above" else (side[-2], side[-1])

    with _patched(_pivots=missing, SELECT_FROM=1):
        selected = _every_result(p, budget, 2, 64)
    assert len(missed) >= 3, missed  # a missed bracket in each of the three selections
    _assert_same_allocations(selected, _every_result(p, budget, 2, 64))


@given(instances(probs=interior_prob, max_prompts=100))
def test_level_by_selection_matches_a_root_finder(instance):
    p, budget, n_min, n_max = instance
    with _selection():
        counts = sera.waterline(p, budget, n_min, n_max).counts
    upper = _upper(p, budget, n_min, n_max)
    np.testing.assert_allclose(counts, root_counts(p, budget, n_min, upper), rtol=0,
                               atol=1e-9 * upper)


def _wide_batch(size, rng, grid=None):
    p = rng.beta(0.6, 1.2, size)
    pick = rng.random(size)
    p[pick < 0.3] = 1 - 10.0 ** -rng.uniform(1, 16, int((pick < 0.3).sum()))
    p[pick > 0.9] = 10.0 ** -rng.uniform(1, 300, int((pick > 0.9).sum()))
    if grid:
        p = np.round(p * grid) / grid  # estimates k / grid: many equal breakpoints
    p[:10] = [0.0, 1.0, 1e-300, 1 - 1e-16, 5e-324, 0.0, 1.0, 0.5, 1e-300, 1 - 1e-16]
    return rng.permutation(p)


@pytest.mark.parametrize("n_max", [None, 3, 64])
@pytest.mark.parametrize("grid", [None, 8])
def test_large_batches_select_the_level_the_sort_finds(n_max, grid):
    # Above SELECT_FROM with the default sample: p = 0, 1, 1e-300 and 1 - 1e-16 in one batch,
    # budgets from the lowest to the highest the bounds allow.
    rng = np.random.default_rng(11)
    p = _wide_batch(waterfill.SELECT_FROM + 5_000, rng, grid)
    high = p.size * (n_max or 100)
    for budget in (2 * p.size, 2 * p.size + 1, 3 * p.size - 7, 16 * p.size, high - 1, high):
        budget = min(budget, high)
        selected = _every_result(p, budget, 2, n_max)
        with _patched(SELECT_FROM=p.size + 1):
            _assert_same_allocations(selected, _every_result(p, budget, 2, n_max))


def test_the_narrow_bracket_gives_the_water_filling_on_large_batches(monkeypatch):
    # round_exact first selects among the keys of a narrow bracket found by false position on
    # the key count (waterfill._near); wherever it lands (on tied keys, beside subnormal or
    # near-one hazards) the answer must be the water-filling's, by the narrow bracket or by the
    # proved one it falls back to.
    from sera import waterfill

    brackets, answered = [], []
    pick_keys, near = waterfill.pick_keys, waterfill._near

    def spy_pick(*args):
        picked = pick_keys(*args)
        answered.append(picked is not None)
        return picked

    def spy_near(*args):
        brackets.append(near(*args))
        return brackets[-1]

    monkeypatch.setattr("sera.waterfill.rounding.pick_keys", spy_pick)
    monkeypatch.setattr("sera.waterfill.rounding._near", spy_near)
    rng = np.random.default_rng(11)
    size = 40_000
    tiny = 10.0 ** -rng.uniform(5, 300, size)
    near_one = 1 - 10.0 ** -rng.uniform(1, 15, size)
    batches = {"beta": rng.beta(0.6, 1.2, size),
               "four values": rng.choice([0.1, 0.3, 0.5, 0.7], size),
               "extremes": np.where(rng.random(size) < 0.5, tiny, near_one)}
    narrow = 0
    for name, p in batches.items():
        for n0 in (4, 16):
            brackets.clear()
            answered.clear()
            counts = sera.allocate(p, n0 * size, 2, 64, rule="exact").counts
            np.testing.assert_array_equal(counts, water_fill(p, n0 * size, 2, 64),
                                          err_msg=f"{name}, n0 {n0}")
            narrow += brackets[0] is not None and answered[0]
    assert narrow >= 4, narrow  # the narrow bracket answers most of the six batches by itself
