"""Historical estimates: frozen within an epoch, discounted at the boundary, availability."""

import numpy as np
import pytest

import sera


def test_estimates_are_frozen_until_the_epoch_ends():
    history = sera.SuccessHistory(3, gamma=0.5, alpha=1.0, beta=1.0, rule="counts")
    p_hat, available = history.estimate()
    np.testing.assert_allclose(p_hat, 0.5)
    assert not available.any()
    history.record([0, 0, 0, 1], [1, 1, 0, 0])
    assert not history.estimate()[1].any()  # nothing folded in yet
    history.end_epoch()
    p_hat, available = history.estimate()
    np.testing.assert_allclose(p_hat, [(2 + 1) / (3 + 2), (0 + 1) / (1 + 2), 0.5])
    np.testing.assert_array_equal(available, [True, True, False])
    history.record([0, 0], [0, 0])
    history.end_epoch()
    # s = 0.5 * 2 + 0, f = 0.5 * 1 + 2
    assert history.estimate([0])[0][0] == pytest.approx((1 + 1) / (1 + 2.5 + 2))


def test_plan_falls_back_to_uniform_until_every_prompt_is_seen():
    from sera import methods
    from sera.trainers.config import AllocatorConfig

    history = sera.SuccessHistory(4)
    history.record([0, 1, 2], [1, 0, 1])
    history.end_epoch()
    sera_method, allocator = methods.METHODS["sera"], AllocatorConfig(n_max=16)

    def plan(ids):
        ids = np.array(ids)
        return methods.plan(sera_method, allocator, 8, ids,
                            *methods.estimate(sera_method, history, ids))

    allocation = plan([0, 1, 3])
    assert allocation.fallback and allocation.rule == "uniform"
    np.testing.assert_array_equal(allocation.counts, [8, 8, 8])
    allocation = plan([0, 1, 2])
    assert not allocation.fallback and allocation.rule == "paper"
    assert allocation.counts[1] > allocation.counts[0]  # the prompt that failed gets more


def test_last_rates_are_each_prompts_raw_rate_of_its_last_epoch():
    history = sera.SuccessHistory(3)
    rate, available = history.last_rates()
    assert not available.any()
    history.record_groups([0, 1], [0, 8], [8, 8])  # 0/8 and 8/8: the raw rates are 0 and 1
    history.end_epoch()
    history.record_groups([0], [3], [4])
    history.end_epoch()
    rate, available = history.last_rates()
    np.testing.assert_array_equal(available, [True, True, False])
    np.testing.assert_allclose(rate[:2], [0.75, 1.0])  # prompt 1 keeps its last seen epoch
    again = sera.SuccessHistory(3)
    again.load_state_dict(history.state_dict())
    np.testing.assert_allclose(again.last_rates()[0], rate)


def test_rate_rule_gives_every_epoch_the_same_weight():
    history = sera.SuccessHistory(2, gamma=0.5, rule="rate", weight=4.0)
    history.record_groups([0, 1], [2, 30], [2, 60])  # rates 1 and 0.5
    history.end_epoch()
    # s = 4 * rate, f = 4 * (1 - rate), whatever the number of rollouts
    np.testing.assert_allclose(history.estimate()[0], [(4 + 1) / (4 + 2), (2 + 1) / (4 + 2)])
    history.record_groups([0], [0], [2])  # prompt 1 unseen this epoch: only discounted
    history.end_epoch()
    np.testing.assert_allclose(history.estimate()[0],
                               [(2 + 0 + 1) / (2 + 4 + 2), (1 + 1) / (1 + 1 + 2)])


def test_record_groups_equals_record_per_response():
    a, b = sera.SuccessHistory(3, rule="counts"), sera.SuccessHistory(3, rule="counts")
    a.record([0, 0, 0, 2, 2], [1, 0, 1, 0, 0])
    b.record_groups([0, 2, 1], [2, 0, 0], [3, 2, 0])
    a.end_epoch()
    b.end_epoch()
    np.testing.assert_allclose(a.estimate()[0], b.estimate()[0])
    np.testing.assert_array_equal(a.estimate()[1], b.estimate()[1])
    with pytest.raises(ValueError, match=r"successes must lie in \[0, trials\]"):
        b.record_groups([0], [3], [2])
    with pytest.raises(ValueError, match="rule must be one of"):
        sera.SuccessHistory(3, rule="mean")


def test_state_round_trip():
    history = sera.SuccessHistory(5, gamma=0.8)
    history.record([1, 2, 2], [1, 0, 1])
    history.end_epoch()
    history.record([4], [1])
    restored = sera.SuccessHistory(5)
    restored.load_state_dict(history.state_dict())
    history.end_epoch()
    restored.end_epoch()
    np.testing.assert_allclose(restored.estimate()[0], history.estimate()[0])
    np.testing.assert_array_equal(restored.estimate()[1], history.estimate()[1])
