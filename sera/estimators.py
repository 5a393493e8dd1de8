"""Per-response advantages over ragged groups, multiplicity weights and loss aggregation.

Groups may have different sizes (SERA gives prompts different rollout counts): responses are
labelled by a group id, or described by group sizes in order. numpy in, numpy out; torch in, torch
out. Derived in notebooks/01_finite_rollout_fidelity.ipynb.

The ragged layout every function here and the plug-ins use: a batch of B prompts with counts
N_0 .. N_{B-1} is one flat run of responses, prompt by prompt (R = sum N_q):

    rewards  [ r r r r | r r | r r r r r r | ... ]   (R,)
    groups   [ 0 0 0 0 | 1 1 | 2 2 2 2 2 2 | ... ]   (R,)  or
    sizes    [    4    ,  2  ,      6      , ... ]   (B,)
"""

from __future__ import annotations

import numpy as np

from sera import _checks

AGGREGATIONS = ("token-mean", "seqnorm")


def groups_from_sizes(sizes) -> np.ndarray:
    """Group id per response for consecutive groups of these sizes, sizes (B,) -> groups (R,),
    R = sum of sizes: [2, 3] -> [0, 0, 1, 1, 1]."""
    sizes = np.asarray(sizes)
    if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer) \
            or (sizes < 1).any():
        raise ValueError(f"sizes must be a non-empty 1-D array of integers >= 1, got "
                         f"{_checks.describe_safe(sizes)}")
    return np.repeat(np.arange(sizes.size), sizes)


def _grouping(rewards, groups, sizes):
    """(rewards as float, inverse group index, number of groups, array module), all checked.

    With sizes the groups are consecutive and already numbered, so no sort is needed."""
    xp = _checks.namespace(rewards, groups, sizes)
    if (groups is None) == (sizes is None):
        raise ValueError("give exactly one of groups (an id per response) or sizes (per group)")
    if xp is np:
        rewards = np.asarray(rewards, dtype=float)
    else:
        rewards = xp.as_tensor(rewards)
        rewards = rewards if rewards.is_floating_point() else rewards.double()
    if sizes is not None and xp is not np and _checks.is_torch(sizes):
        if sizes.ndim != 1 or sizes.numel() == 0 or bool((sizes < 1).any()):
            raise ValueError("sizes must be a non-empty 1-D tensor of integers >= 1")
        n_groups = sizes.numel()
        groups = xp.repeat_interleave(xp.arange(n_groups, device=rewards.device),
                                      sizes.to(rewards.device))
    elif sizes is not None:
        groups = groups_from_sizes(sizes)
        n_groups = np.asarray(sizes).size
        if xp is not np:
            groups = xp.as_tensor(groups, device=rewards.device)
    elif xp is np:
        groups = np.asarray(groups)
    else:
        groups = xp.as_tensor(groups, device=rewards.device)
    if rewards.ndim != 1 or groups.ndim != 1:
        raise ValueError(f"rewards and groups must be 1-D (one entry per response); got shapes "
                         f"{tuple(rewards.shape)} and {tuple(groups.shape)}")
    if rewards.shape[0] != groups.shape[0]:
        raise ValueError(f"rewards and groups must have the same length; got {rewards.shape[0]} "
                         f"rewards and {groups.shape[0]} group ids")
    if rewards.shape[0] == 0:
        raise ValueError("rewards is empty; give at least one response")
    if not bool(xp.isfinite(rewards).all()):
        raise ValueError("rewards must be finite; got NaN or infinity")
    if sizes is not None:
        return rewards, groups, n_groups, xp
    if xp is np:
        _, inverse = np.unique(groups, return_inverse=True)
        inverse = inverse.reshape(-1)
    else:
        _, inverse = xp.unique(groups, return_inverse=True)
    return rewards, inverse, int(inverse.max()) + 1, xp


def _group_sum(values, inverse, n_groups, xp):
    if xp is np:
        return np.bincount(inverse, weights=values, minlength=n_groups)
    return xp.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(
        0, inverse, values)


def _group_stats(rewards, inverse, n_groups, xp):
    """Per-response group size and group mean."""
    size = _group_sum(xp.ones_like(rewards), inverse, n_groups, xp)
    mean = _group_sum(rewards, inverse, n_groups, xp) / size
    return size[inverse], mean[inverse]


def maxrl_advantages(rewards, groups=None, centered=True, *, sizes=None, floor: float = 0.0):
    """MaxRL advantages A_i = (r_i - rbar_g) / rbar_g (centered) or r_i / rbar_g (uncentered):
    rewards (R,) in [0, 1], groups (R,) or sizes (B,) in the ragged layout above; returns (R,).

    rbar_g is the mean reward of response i's group; a group without success gets A = 0. With
    these advantages the per-prompt estimator (1/N) sum_i A_i grad log pi(y_i) has expectation
    kappa(p, N) grad log p (sera.kappa). Derivation: notebooks/01_finite_rollout_fidelity.ipynb.

    floor > 0 divides by max(rbar_g, floor) instead (the `sera-capped` variant, floor 1 / n0):
    a group whose mean is at least the floor is scored as above, and a rare success in a large
    group gets at most (1 - rbar_g) / floor; the expectation is then no longer kappa's.
    """
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must lie in [0, 1]; got {floor}")
    rewards, inverse, n_groups, xp = _grouping(rewards, groups, sizes)
    if bool((rewards < 0).any()):
        raise ValueError("MaxRL rewards must be >= 0 (success indicators); got a negative reward")
    _, mean = _group_stats(rewards, inverse, n_groups, xp)
    positive = mean > 0
    safe = xp.where(positive, mean, xp.ones_like(mean))
    if floor > 0:
        safe = safe.clip(min=floor)  # numpy and torch alike
    advantage = (rewards - mean) / safe if centered else rewards / safe
    return xp.where(positive, advantage, xp.zeros_like(advantage))


def grpo_advantages(rewards, groups=None, eps: float = 1e-6, unbiased: bool = True, *,
                    sizes=None):
    """GRPO advantages (r_i - mean_g) / (std_g + eps); the std is the sample (n-1) one by default.
    rewards (R,), groups (R,) or sizes (B,); returns (R,).

    A group of one response gets 0 (its spread is undefined).
    """
    rewards, inverse, n_groups, xp = _grouping(rewards, groups, sizes)
    size, mean = _group_stats(rewards, inverse, n_groups, xp)
    centered = rewards - mean
    squares = _group_sum(centered * centered, inverse, n_groups, xp)[inverse]
    dof = size - 1 if unbiased else size
    scale = xp.sqrt(squares / xp.where(dof > 0, dof, xp.ones_like(dof))) + eps
    # A group with no spread has every centered reward at 0; keep it 0 even when eps = 0.
    scale = xp.where(scale > 0, scale, xp.ones_like(scale))
    return xp.where(size > 1, centered / scale, xp.zeros_like(centered))


def raft_advantages(rewards, groups=None, *, sizes=None):
    """Rejection sampling (RAFT, as GVM-RAFT trains): the successful responses are trained on,
    A_i = r_i."""
    return rewards


def clipped_grpo_advantages(rewards, groups=None, *, sizes=None, bound: float = 5.0):
    """GRPO advantages clipped to [-bound, bound], as Knapsack RL trains."""
    advantages = grpo_advantages(rewards, groups, sizes=sizes)
    return advantages.clip(-bound, bound)


def rloo_advantages(rewards, groups=None, *, sizes=None):
    """RLOO advantages r_i - mean of the other responses of the group = n/(n-1) (r_i - mean_g).
    rewards (R,), groups (R,) or sizes (B,); returns (R,).

    A group of one response gets 0.
    """
    rewards, inverse, n_groups, xp = _grouping(rewards, groups, sizes)
    size, mean = _group_stats(rewards, inverse, n_groups, xp)
    scale = size / xp.where(size > 1, size - 1, xp.ones_like(size))
    return xp.where(size > 1, scale * (rewards - mean), xp.zeros_like(rewards))


def rl2ml_advantages(rewards, groups=None, alpha: float = 1.0, *, sizes=None):
    """RL2ML's alpha family over binary rewards: A_i = (N/c)^alpha (r_i - c/N), 0 when the group's
    c successes are 0 or N (c, not K: K is Pass@K's sample count, notebooks/NOTATION.md).
    alpha = 0 is r - mean (Dr. GRPO up to (N-1)/N), alpha = 1 is centered MaxRL exactly; the
    per-prompt estimator (1/N) sum_i A_i grad log pi(y_i) has expectation
    rl2ml_weight(p, N, alpha) grad p. From the RL2ML abstract (arXiv 2605.30154): a
    reconstruction, see docs/baselines.md; compared in notebooks/06_allocators_compared.ipynb.
    """
    alpha = _checks.real(alpha, "alpha", -np.inf, np.inf)
    rewards, inverse, n_groups, xp = _grouping(rewards, groups, sizes)
    if bool(((rewards != 0) & (rewards != 1)).any()):
        raise ValueError("rl2ml_advantages needs binary rewards (0 or 1)")
    _, mean = _group_stats(rewards, inverse, n_groups, xp)
    mixed = (mean > 0) & (mean < 1)
    safe = xp.where(mixed, mean, xp.ones_like(mean))
    return xp.where(mixed, safe ** (-alpha) * (rewards - mean), xp.zeros_like(rewards))


def _rl2ml_increments(n: int, alpha: float) -> np.ndarray:
    """a(1, j+1) - a(0, j) for j = 0..n-1, with a(r, c) = (n/c)^alpha (r - c/n) for 0 < c < n."""
    j = np.arange(n, dtype=float)
    k_up = j + 1
    success = np.where(k_up < n, (n / k_up) ** alpha * (1 - k_up / n), 0.0)
    with np.errstate(divide="ignore"):
        failure = np.where(j > 0, (n / np.where(j > 0, j, 1.0)) ** alpha * (-j / n), 0.0)
    return success - failure


def rl2ml_weight(p, n: int, alpha: float = 1.0):
    """w_N(p) = E_{J ~ Bin(N-1, p)}[a(1, J+1) - a(0, J)]: the alpha-family estimator with N
    rollouts has expectation w_N(p) grad p (alpha = 1: kappa(p, N) / p). p of any shape (one
    count n for all) -> the same shape."""
    from scipy.stats import binom

    n = _checks.integer(n, "n", minimum=1)
    p = np.asarray(_checks.probabilities(p), dtype=float)
    pmf = binom.pmf(np.arange(n)[:, None], n - 1, p.reshape(1, -1))
    return (_rl2ml_increments(n, alpha) @ pmf).reshape(p.shape)[()]


def rl2ml_surrogate(p, n: int, alpha: float = 1.0):
    """J_N(p) = E_{K ~ Bin(N, p)}[phi(K)] with phi(0) = 0 and phi(j+1) - phi(j) =
    (a(1, j+1) - a(0, j)) / N: the objective the estimator is exactly unbiased for, dJ/dp = w_N
    (alpha = 1: sum_{k<N} pass@k / k). p of any shape (one count n for all) -> the same shape."""
    from scipy.stats import binom

    n = _checks.integer(n, "n", minimum=1)
    p = np.asarray(_checks.probabilities(p), dtype=float)
    phi = np.concatenate(([0.0], np.cumsum(_rl2ml_increments(n, alpha)) / n))
    pmf = binom.pmf(np.arange(n + 1)[:, None], n, p.reshape(1, -1))
    return (phi @ pmf).reshape(p.shape)[()]


def multiplicity_weights(counts, n0: float):
    """Per-prompt response weight n0 / N_q (0 where N_q = 0), so that each prompt's N_q responses
    carry the same total weight n0 in a response-mean loss: counts (B,) -> weights (B,); repeat
    them by the counts for the (R,) responses. See sera.allocate."""
    n0 = _checks.real(n0, "n0", 0.0, float("inf"), low_open=True)
    counts = np.asarray(counts, dtype=float)
    if (counts < 0).any() or not np.isfinite(counts).all():
        raise ValueError("counts must be finite and >= 0")
    weights = np.zeros_like(counts)
    np.divide(n0, counts, out=weights, where=counts > 0)
    return weights


def aggregate(token_losses, mask, mode: str = "token-mean", max_len: int | None = None,
              total: float | None = None):
    """Reduce per-token losses to a scalar: token_losses and mask are (R, T), responses by
    tokens (mask 1 on response tokens, 0 on padding); numpy or torch.

    token-mean: sum of the losses over all response tokens / number of response tokens.
    seqnorm: each response's summed loss / max_len, averaged over responses (Dr. GRPO style), so a
    response's length does not change its weight. max_len is the fixed generation limit.
    total: the normalizer of the whole batch when this matrix is one micro-batch of it (the
    batch's token count for token-mean, its response count times max_len for seqnorm).
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"mode must be one of {AGGREGATIONS}, got {mode!r}")
    if tuple(token_losses.shape) != tuple(mask.shape) or token_losses.ndim != 2:
        raise ValueError(f"token_losses and mask must both be (responses, tokens); got shapes "
                         f"{tuple(token_losses.shape)} and {tuple(mask.shape)}")
    # Select the response tokens rather than multiply by the mask: a NaN or infinity at a padded
    # position (say a log-prob of -inf) must not reach the sum.
    if _checks.is_torch(token_losses):
        import torch

        mask = mask.to(token_losses.dtype) if _checks.is_torch(mask) else torch.as_tensor(
            np.asarray(mask, dtype=float), dtype=token_losses.dtype, device=token_losses.device)
        summed = torch.where(mask > 0, token_losses, torch.zeros_like(token_losses)).sum()
    else:
        mask = np.asarray(mask, dtype=float)
        summed = np.where(mask > 0, token_losses, 0.0).sum()
    if mode == "seqnorm" and max_len is None:
        raise ValueError("seqnorm needs max_len, the fixed maximum response length")
    if total is None:
        if mode == "token-mean":
            total = max(float(mask.sum()), 1.0)
        else:
            total = token_losses.shape[0] * _checks.integer(max_len, "max_len", minimum=1)
    return summed / total


def policy_loss(logprobs, advantages, mask, weights=None, mode: str = "token-mean",
                max_len: int | None = None, total: float | None = None):
    """Policy-gradient surrogate -w_i A_i log pi(token) per response token, aggregated by `mode`
    (see `aggregate`; `total` normalizes a micro-batch by its whole batch).

    logprobs and mask are (R, T): responses by tokens; advantages and weights are (R,).
    """
    scale = advantages if weights is None else advantages * weights
    return aggregate(-scale[:, None] * logprobs, mask, mode=mode, max_len=max_len, total=total)
