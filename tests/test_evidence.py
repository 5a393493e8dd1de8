"""The evidence a step rests on (sera.evidence) and the step scaling built on it: closed forms
against scipy's binomial, a Monte Carlo check with its standard error, the optimizer's step, and
the method in the simulator, a trainer and the plug-ins' planner."""

import dataclasses

import numpy as np
import pytest
import torch
from scipy import stats

from sera import evidence
from sera.integrations.planner import Planner
from sera.methods import METHODS
from sera.studies import simulate
from sera.trainers import classification, steps

P = [0.0, 1e-12, 1e-4, 0.03, 0.25, 0.5, 0.9, 1 - 1e-9, 1.0]
N = [0, 1, 2, 3, 4, 8, 64, 1024]


@pytest.mark.parametrize("n", N)
def test_expected_mixed_successes_is_the_binomial_sum_over_mixed_groups(n):
    p = np.array(P)
    got = evidence.expected_mixed_successes(p, np.full(p.shape, n))
    s = np.arange(1, n)  # the successes of a group holding both outcomes
    want = [float((s * stats.binom.pmf(s, n, q)).sum()) if n > 1 else 0.0 for q in P]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="one entry per prompt"):
        evidence.expected_mixed_successes([0.5, 0.5], [4])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        evidence.expected_mixed_successes([1.5], [4])
    with pytest.raises(ValueError, match="counts"):
        evidence.expected_mixed_successes([0.5], [-1])


def test_the_scale_of_a_worked_batch():
    # p_hat 0.5 at n0 = 4: each prompt's mixed groups hold 4 * 0.5 * (1 - 0.5^3) = 1.75 successes
    # in expectation, 7 over four prompts. Mixed successes 2 + 2 + 1 = 5 (the all-fail group and
    # an all-success one count nothing).
    p_hat = np.full(4, 0.5)
    assert evidence.mixed_successes([2, 2, 1, 0], [4, 4, 4, 4]) == 5
    assert evidence.mixed_successes([2, 4], [4, 4]) == 2
    assert evidence.evidence_scale([2, 2, 1, 0], [4, 4, 4, 4], p_hat, 4) == pytest.approx(5 / 7)
    # SERA's counts on the same prompts: 2 successes of 12 and 1 of 2 in mixed groups, 0 of 1
    assert evidence.evidence_scale([2, 1, 0, 0], [12, 2, 1, 1], p_hat, 4) == pytest.approx(3 / 7)
    assert evidence.evidence_scale([3, 3, 3, 3], [4, 4, 4, 4], p_hat, 4) == 1.0  # capped at 1
    assert evidence.evidence_scale([0, 0], [4, 4], [np.nan, 0.5], 4) == 1.0  # no estimate
    assert evidence.evidence_scale([0, 0], [4, 4], [0.0, 1.0], 4) == 1.0  # no evidence expected


def test_at_uniform_counts_and_true_estimates_the_mean_ratio_is_one():
    # Monte Carlo: with p_hat = p and counts n0, E[S_t] = S_ref, so the mean of S_t / S_ref over
    # batches is 1 within its standard error (the cap at 1 is left out here by using the ratio).
    rng = np.random.default_rng(0)
    p = rng.beta(0.5, 1.5, 64)
    n0, batches = 4, 20_000
    reference = evidence.expected_mixed_successes(p, np.full(64, n0)).sum()
    successes = rng.binomial(n0, p, size=(batches, 64))
    mixed = np.where((successes > 0) & (successes < n0), successes, 0).sum(axis=1)
    ratio = mixed / reference
    se = ratio.std(ddof=1) / np.sqrt(batches)
    assert abs(ratio.mean() - 1) < 4 * se


def test_a_scaled_adam_step_moves_the_parameters_that_fraction_and_the_rate_comes_back():
    def one_step(scale):
        torch.manual_seed(0)
        model = torch.nn.Linear(5, 3).double()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
        before = [p.detach().clone() for p in model.parameters()]
        model(torch.randn(7, 5, dtype=torch.float64)).square().sum().backward()
        with steps.scaled_lr(optimizer, scale):
            optimizer.step()
        assert optimizer.param_groups[0]["lr"] == 1e-2
        return [p.detach() - b for p, b in zip(model.parameters(), before, strict=True)]

    full, quarter, untouched = one_step(None), one_step(0.25), one_step(1.0)
    for a, b, c in zip(full, quarter, untouched, strict=True):
        torch.testing.assert_close(b, 0.25 * a, rtol=1e-9, atol=1e-15)
        assert torch.equal(a, c)


def test_the_simulator_scales_the_steps_planned_from_estimates_only():
    p0 = np.random.default_rng(1).beta(0.5, 2.0, 64)
    config = simulate.SimulationConfig(method="sera-evidence-step", n0=4, batch_size=16,
                                       steps=24, eval_every=8, seed=3)
    metrics = simulate.simulate(p0, config).metrics
    scales = metrics[metrics["metric"] == "step_scale"].set_index("step")["value"]
    allocated = metrics[metrics["metric"] == "allocated"].set_index("step")["value"]
    assert len(scales) == 24 and (scales <= 1).all() and (scales > 0).all()
    assert (scales[allocated == 0] == 1).all()  # the first epoch: uniform counts, no scaling
    assert (scales[allocated == 1] < 1).any()
    # up to the first scaled step it trains exactly as the paper's sera does
    plain = simulate.simulate(p0, dataclasses.replace(config, method="sera")).metrics
    first = int(scales[scales < 1].index.min())

    def until_first(table):
        table = table[(table["step"] <= first) & (table["metric"] != "step_scale")]
        return table.sort_values(["step", "metric", "k"])["value"].to_numpy()

    np.testing.assert_array_equal(until_first(metrics), until_first(plain))


def test_the_classification_trainer_logs_the_scale_it_stepped_with(tmp_path):
    config = dataclasses.replace(
        classification.PRESETS["fast"], method="sera-evidence-step", n0=16, steps=30,
        eval_every=30, cosine_every=30, min_allocated_share=0.0, out=str(tmp_path / "run"),
        progress=False)
    metrics = classification.train(config).metrics
    scales = metrics[metrics["metric"] == "step_scale"]["value"]
    assert len(scales) == 30 and (scales <= 1).all() and (scales > 0).all()
    assert (scales < 1).any()  # after the first epoch (23 steps) the estimates plan the batch


def test_the_plugins_refuse_a_method_that_scales_the_learning_rate():
    assert METHODS["sera-evidence-step"].evidence_step
    with pytest.raises(ValueError, match="sera-evidence-step"):
        Planner(8, 4, method="sera-evidence-step")
