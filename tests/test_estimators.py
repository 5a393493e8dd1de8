"""Estimators: Monte Carlo against kappa(p, N) grad log p, ragged groups, losses by hand."""

import numpy as np
import pytest
import torch

import sera

DRAWS = 100_000
Z = 5.0  # tolerance in standard errors; with 4 coordinates x 12 cases a false alarm is ~1e-5


def _mc_gradient(p, n, centered, seed):
    """Per-draw MaxRL gradients w.r.t. the logits of a 4-class policy whose class 0 has
    probability p, each draw being one group of n sampled labels (rewards: label == 0)."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.tensor([p, (1 - p) / 2, (1 - p) / 3, (1 - p) / 6], dtype=torch.float64)
    logits = base.log().repeat(DRAWS, 1).requires_grad_(True)
    labels = torch.multinomial(base, DRAWS * n, replacement=True, generator=gen).view(DRAWS, n)
    rewards = (labels == 0).double().reshape(-1)
    groups = torch.arange(DRAWS).repeat_interleave(n)
    adv = sera.maxrl_advantages(rewards, groups, centered=centered).view(DRAWS, n)
    logp = torch.log_softmax(logits, -1).gather(1, labels)
    # Each draw's surrogate (1/n) sum_i A_i log pi(y_i); summing over draws keeps them apart.
    (adv * logp).sum().div(n).backward()
    exact = torch.zeros(4, dtype=torch.float64)
    exact[0] = 1.0
    return logits.grad, exact - base  # grad of log p w.r.t. the logits


CASES = [(0.05, 2), (0.3, 2), (0.7, 2), (0.1, 4), (0.4, 4), (0.05, 8), (0.2, 16), (0.02, 32)]


@pytest.mark.parametrize("p, n", CASES)
@pytest.mark.parametrize("centered", [True, False])
def test_maxrl_gradient_expectation_is_kappa_times_grad_log_p(p, n, centered):
    grads, grad_log_p = _mc_gradient(p, n, centered, seed=int(1000 * p) + n)
    mean = grads.mean(0)
    se = grads.std(0) / DRAWS**0.5
    target = sera.kappa(p, n, centered=centered) * grad_log_p
    assert torch.all((mean - target).abs() <= Z * se + 1e-12), (mean, target, se)


def test_monte_carlo_can_tell_centered_from_uncentered_at_two_rollouts():
    # The check above has power: at N = 2 the two kappas differ by p(1-p) of |grad log p|.
    grads, grad_log_p = _mc_gradient(0.3, 2, True, seed=7)
    mean, se = grads.mean(0), grads.std(0) / DRAWS**0.5
    wrong = sera.kappa(0.3, 2, centered=False) * grad_log_p
    assert torch.any((mean - wrong).abs() > Z * se)


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


def test_torch_advantages_match_numpy():
    rewards = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    groups = np.array([0, 0, 0, 1, 1, 1])
    for fn in (sera.maxrl_advantages, sera.grpo_advantages, sera.rloo_advantages):
        out = fn(torch.tensor(rewards), torch.tensor(groups))
        assert isinstance(out, torch.Tensor)
        np.testing.assert_allclose(out.numpy(), fn(rewards, groups))


def test_multiplicity_weights():
    np.testing.assert_allclose(sera.multiplicity_weights([2, 4, 0, 16], 8), [4, 2, 0, 0.5])


def test_losses_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([2.0, -1.0], dtype=torch.float64)
    w = torch.tensor([0.5, 2.0], dtype=torch.float64)
    # per token: -w A logp -> row 0: 1 * [1, 2, 3]; row 1: -2 * -1 * ... = [-1, -1]
    token_mean = sera.policy_loss(logp, adv, mask, w, mode="token-mean")
    assert token_mean.item() == pytest.approx((6 - 2) / 5)
    seqnorm = sera.policy_loss(logp, adv, mask, w, mode="seqnorm", max_len=4)
    assert seqnorm.item() == pytest.approx((6 / 4 + -2 / 4) / 2)
    with pytest.raises(ValueError, match="seqnorm needs max_len"):
        sera.policy_loss(logp, adv, mask, w, mode="seqnorm")
    with pytest.raises(ValueError, match="mode must be one of"):
        sera.policy_loss(logp, adv, mask, w, mode="sum")
