"""The torch paths: Monte Carlo of the MaxRL gradient with autograd, torch in and torch out,
losses on tensors. The numpy-only core is tested without torch in the other files."""

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


def test_torch_advantages_match_numpy():
    rewards = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    groups = np.array([0, 0, 0, 1, 1, 1])
    for fn in (sera.maxrl_advantages, sera.grpo_advantages, sera.rloo_advantages):
        out = fn(torch.tensor(rewards), torch.tensor(groups))
        assert isinstance(out, torch.Tensor)
        np.testing.assert_allclose(out.numpy(), fn(rewards, groups))


def test_torch_in_torch_out():
    p = torch.tensor([0.1, 0.5], dtype=torch.float64)
    out = sera.kappa(p, torch.tensor([2, 8]))
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), sera.kappa(p.numpy(), np.array([2, 8])))
    u = sera.mixed_probability(p, 4)
    assert isinstance(u, torch.Tensor)
    np.testing.assert_allclose(u.numpy(), 1 - p.numpy() ** 4 - (1 - p.numpy()) ** 4)


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


def test_masked_positions_cannot_poison_the_loss():
    # A padded position may hold -inf (a log-prob of an impossible token) or NaN: selected out.
    logp = torch.tensor([[-1.0, float("-inf")], [-0.5, float("nan")]], dtype=torch.float64,
                        requires_grad=True)
    mask = torch.tensor([[1, 0], [1, 0]])
    loss = sera.policy_loss(logp, torch.tensor([1.0, 2.0], dtype=torch.float64), mask)
    assert loss.item() == pytest.approx((1.0 + 1.0) / 2)
    loss.backward()
    assert torch.isfinite(logp.grad).all()
    np.testing.assert_allclose(logp.grad.numpy(), [[-0.5, 0.0], [-1.0, 0.0]])
