"""One-step rollouts over class labels: sampling, advantages, and the collapsed loss.

Responses are kept flat: response j belongs to image rows[j] and sampled labels[j]. A group of N
labels for one image only enters the loss through how much advantage lands on each class, so the
N rollouts collapse into per-class weights: one forward and one backward pass serve any N.
`replicated_loss` is the naive computation with one forward per response; the two are equal for
any model whose output for an image does not depend on the rest of the batch, which excludes
batch statistics: BatchNorm in training mode (ResNet-50 while it trains) normalises over the
batch, and the replicated batch has other statistics. There the collapsed loss is the
computation the study means (the policy is the classifier of each image, one forward each).
The tests check the equality for the small CNN and for a BatchNorm model in eval mode.
"""

from __future__ import annotations

import numpy as np
import torch


def sample_labels(probs: torch.Tensor, counts, generator: torch.Generator):
    """counts[i] labels drawn from row i of probs, by inverse CDF: (rows, labels), flat and
    grouped by row, with exactly sum(counts) draws whatever the largest count."""
    counts = torch.as_tensor(np.asarray(counts), device=probs.device)
    rows = torch.repeat_interleave(torch.arange(probs.shape[0], device=probs.device), counts)
    cdf = probs.to(torch.float64).cumsum(1)
    uniform = torch.rand(rows.shape[0], generator=generator, device=probs.device,
                         dtype=torch.float64) * cdf[rows, -1]
    labels = torch.searchsorted(cdf[rows], uniform[:, None], right=True)[:, 0]
    return rows, labels.clamp_(max=probs.shape[1] - 1)


def advantages(advantage, rows, labels, targets, counts):
    """Rewards (label == target) and per-response advantages from advantage(rewards, sizes=),
    flat (e.g. sera.maxrl_advantages)."""
    rewards = (labels == targets[rows]).to(torch.float64)
    if rewards.numel() == 0:
        return rewards, rewards.clone()
    sizes = torch.as_tensor(np.asarray(counts), device=rewards.device)
    return rewards, advantage(rewards, sizes=sizes[sizes > 0])


def class_weights(rows, labels, values, n_rows: int, n_classes: int) -> torch.Tensor:
    """W[i, c] = sum of the advantages of image i's responses that sampled class c."""
    weights = torch.zeros(n_rows * n_classes, dtype=values.dtype, device=values.device)
    weights.index_add_(0, rows * n_classes + labels, values)
    return weights.view(n_rows, n_classes)


def collapsed_loss(log_probs, weights_per_class, prompt_weights, n_responses: int):
    """(1/M) sum_i w_i sum_c W[i, c] (-log pi(c | x_i)): the response-mean policy-gradient loss."""
    scale = weights_per_class.to(log_probs.dtype) * prompt_weights.to(log_probs.dtype)[:, None]
    return -(scale * log_probs).sum() / n_responses


def replicated_loss(model, images, rows, labels, values, prompt_weights, n_responses: int):
    """The naive computation: every response's image goes through the model on its own row."""
    log_probs = torch.log_softmax(model(images[rows]), dim=-1)
    chosen = log_probs.gather(1, labels[:, None])[:, 0]
    scale = (values * prompt_weights[rows]).to(chosen.dtype)
    return -(scale * chosen).sum() / n_responses


def flat_cosine(first, second) -> float:
    """Cosine between two lists of gradient tensors, flattened; 0 when either is zero."""
    a = torch.cat([g.reshape(-1).double() for g in first])
    b = torch.cat([g.reshape(-1).double() for g in second])
    norm = a.norm() * b.norm()
    return float(a @ b / norm) if norm > 0 else 0.0
