"""The evidence-held waterline (sera.evidence.evidence_waterline, the method
`sera-evidence-waterline`): against every integer allocation of small batches, and as a method
in the planner, the simulator and the plug-ins' refusal."""

import dataclasses
import itertools

import numpy as np
import pytest

from sera import method_plan
from sera.evidence import evidence_waterline, expected_mixed_successes
from sera.fidelity import kappa
from sera.integrations.planner import Planner
from sera.studies import simulate

P = [0.0, 1e-9, 1e-3, 0.05, 0.3, 0.5, 0.8, 0.97, 1 - 1e-9, 1.0]


def evidence(p, counts):
    return expected_mixed_successes(p, np.asarray(counts, dtype=float)).sum()


@pytest.mark.parametrize("seed", range(8))
def test_the_level_is_the_best_that_keeps_uniform_counts_evidence(seed):
    """Brute force: every count vector within the bounds that meets the budget and keeps
    uniform counts' expected evidence; the largest smallest kappa among them is ours."""
    rng = np.random.default_rng(seed)
    for _ in range(25):
        size, n0 = int(rng.integers(1, 5)), int(rng.integers(2, 6))
        n_min, n_max = 2, int(rng.integers(n0, 3 * n0 + 1))
        p = rng.choice(P, size=size)
        budget = size * n0
        reference = evidence(p, np.full(size, n0))
        best = max(kappa(p, np.array(c)).min()
                   for c in itertools.product(range(n_min, n_max + 1), repeat=size)
                   if sum(c) == budget and evidence(p, c) >= reference * (1 - 1e-12))
        counts = evidence_waterline(p, budget, n_min, n_max, n0)
        assert counts.sum() == budget and counts.min() >= n_min and counts.max() <= n_max
        assert evidence(p, counts) >= reference * (1 - 1e-12)
        assert kappa(p, counts).min() == pytest.approx(best, abs=1e-12)


def test_a_budget_other_than_b_n0_is_refused():
    with pytest.raises(ValueError, match="budget"):
        evidence_waterline(np.full(4, 0.5), 17, 2, 8, 4)
    with pytest.raises(ValueError, match="n0"):
        evidence_waterline(np.full(4, 0.5), 40, 2, 8, 10)


def test_the_method_keeps_the_waterline_where_it_costs_no_evidence():
    even = np.full(16, 0.5)  # equal estimates: the waterline is uniform counts
    held, plain = method_plan("sera-evidence-waterline", even, 4), method_plan("sera", even, 4)
    np.testing.assert_array_equal(held.counts, plain.counts)
    assert held.rule == plain.rule


def test_the_method_holds_the_waterline_where_it_would_cost_evidence():
    p = np.random.default_rng(0).beta(0.5, 1.5, 16)
    plain = method_plan("sera", p, 4)
    held = method_plan("sera-evidence-waterline", p, 4)
    reference = evidence(p, np.full(16, 4))
    assert evidence(p, plain.counts) < reference  # the case this method exists for
    assert held.rule == "evidence-waterline" and held.counts.sum() == 64
    assert evidence(p, held.counts) >= reference
    assert kappa(p, held.counts).min() > kappa(p, np.full(16, 4)).min()  # still above uniform
    np.testing.assert_allclose(held.weights[held.counts > 0], 4 / held.counts[held.counts > 0])


def test_the_simulator_runs_it_and_it_departs_from_sera():
    config = simulate.SimulationConfig(method="sera-evidence-waterline", n0=4, batch_size=16,
                                       steps=40, eval_every=40, ks=(1,), lr=2.0, seed=3)
    p0 = np.linspace(0.02, 0.9, 64)
    held = simulate.simulate(p0, config).allocations
    plain = simulate.simulate(p0, dataclasses.replace(config, method="sera"))
    assert not np.array_equal(held["rollouts"].to_numpy(),
                              plain.allocations["rollouts"].to_numpy())


def test_the_plugins_refuse_it():
    with pytest.raises(ValueError, match="sera-evidence-waterline"):
        Planner(8, 4, method="sera-evidence-waterline")
