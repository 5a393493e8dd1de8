"""The capped lone success (`sera-capped`): MaxRL's group mean floored at 1 / n0, against a loop
over the groups written from the rule, in numpy and torch, at uniform counts (where it is MaxRL)
and in the trainers that score with it."""

import dataclasses

import numpy as np
import pytest
import torch

from sera import maxrl_advantages
from sera.integrations.planner import Planner
from sera.methods import METHODS
from sera.studies import simulate
from sera.trainers import classification, steps


def by_rule(rewards, sizes, floor):
    """(r - mean) / max(mean, floor) group by group; 0 in a group without success."""
    out, start = [], 0
    for size in sizes:
        group = np.asarray(rewards[start:start + size], dtype=float)
        mean = group.mean()
        out += [0.0] * size if mean == 0 else list((group - mean) / max(mean, floor))
        start += size
    return np.array(out)


@pytest.mark.parametrize("seed", range(6))
def test_the_floor_matches_the_rule_on_random_ragged_groups(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 300, size=20)
    p = rng.choice([0.0, 1e-3, 0.02, 0.3, 0.97, 1.0], size=20)
    rewards = (rng.random(sizes.sum()) < np.repeat(p, sizes)).astype(float)
    for floor in (0.0, 1 / 128, 1 / 4, 1.0):
        expected = by_rule(rewards, sizes, floor)
        np.testing.assert_allclose(maxrl_advantages(rewards, sizes=sizes, floor=floor),
                                   expected, rtol=1e-12, atol=1e-12)
        as_torch = maxrl_advantages(torch.tensor(rewards), sizes=torch.tensor(sizes), floor=floor)
        np.testing.assert_allclose(as_torch.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_a_lone_success_in_a_large_group_weighs_what_one_among_n0_would():
    n0, size = 4, 32
    rewards = np.zeros(size)
    rewards[0] = 1.0
    capped = maxrl_advantages(rewards, sizes=[size], floor=1 / n0)
    assert capped[0] == pytest.approx((1 - 1 / size) * n0)  # MaxRL gives size - 1 = 31
    assert maxrl_advantages(rewards, sizes=[size])[0] == pytest.approx(size - 1)


def test_at_groups_no_larger_than_n0_it_is_maxrl():
    rng = np.random.default_rng(7)
    n0 = 8
    sizes = rng.integers(1, n0 + 1, size=50)
    rewards = (rng.random(sizes.sum()) < 0.2).astype(float)
    np.testing.assert_array_equal(maxrl_advantages(rewards, sizes=sizes, floor=1 / n0),
                                  maxrl_advantages(rewards, sizes=sizes))


def test_a_floor_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="floor"):
        maxrl_advantages(np.ones(3), sizes=[3], floor=1.5)


def test_the_method_scores_with_the_floor_and_the_others_do_not():
    rewards = np.array([1.0] + [0.0] * 15)
    assert steps.advantages(METHODS["sera-capped"], rewards, [16], 4)[0] == pytest.approx(3.75)
    assert steps.advantages(METHODS["sera"], rewards, [16], 4)[0] == pytest.approx(15.0)


def test_the_simulator_with_the_cap_differs_from_sera_only_once_groups_exceed_n0():
    config = simulate.SimulationConfig(method="sera-capped", n0=4, batch_size=16, steps=40,
                                       eval_every=40, ks=(1,), lr=2.0, seed=3)
    p0 = np.linspace(0.02, 0.9, 64)
    capped = simulate.simulate(p0, config)
    plain = simulate.simulate(p0, dataclasses.replace(config, method="sera"))
    allocations = capped.allocations
    assert (allocations["rollouts"] > 4).any()  # groups above n0 exist, so the cap can bind
    last = capped.metrics[capped.metrics["metric"] == "val_pass"]["value"].iloc[-1]
    other = plain.metrics[plain.metrics["metric"] == "val_pass"]["value"].iloc[-1]
    assert last != other


def test_the_classification_trainer_runs_the_capped_method(tmp_path):
    config = dataclasses.replace(
        classification.PRESETS["fast"], method="sera-capped", n0=16, steps=30, eval_every=30,
        cosine_every=30, min_allocated_share=0.0, out=str(tmp_path / "run"), progress=False)
    metrics = classification.train(config).metrics
    rewards = metrics[metrics["metric"] == "train_reward"]["value"]
    assert len(rewards) == 30 and rewards.between(0, 1).all()


def test_the_plugins_refuse_the_cap_they_do_not_apply():
    with pytest.raises(ValueError, match="sera-capped"):
        Planner(8, 4, method="sera-capped")
