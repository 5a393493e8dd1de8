"""One-step rollouts over class labels: sampling, advantages, and the collapsed loss.

A group of N sampled labels for one image only enters the loss through how much advantage lands
on each class, so the N rollouts collapse into per-class weights: one forward and one backward
pass serve any N. `replicated_loss` is the naive computation it must equal (tests check it).
"""

from __future__ import annotations

import numpy as np
import torch

from sera.estimators import grpo_advantages, maxrl_advantages

ADVANTAGES = {"maxrl": maxrl_advantages, "sera": maxrl_advantages,
              "sera-history": maxrl_advantages, "grpo": grpo_advantages}


def sample_labels(probs: torch.Tensor, counts, generator: torch.Generator):
    """counts[i] labels per row of probs, as a padded (B, max count) tensor and its mask."""
    counts = torch.as_tensor(np.asarray(counts), device=probs.device)
    width = int(counts.max()) if counts.numel() else 0
    if width == 0:
        empty = torch.zeros(probs.shape[0], 0, dtype=torch.long, device=probs.device)
        return empty, empty.bool()
    labels = torch.multinomial(probs, width, replacement=True, generator=generator)
    mask = torch.arange(width, device=probs.device)[None, :] < counts[:, None]
    return labels, mask


def advantages(method: str, labels, mask, targets):
    """Rewards (label == target) and per-response advantages of `method`, as padded tensors."""
    rewards = (labels == targets[:, None]).to(torch.float64)
    rows = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(labels)
    values = torch.zeros_like(rewards)
    if mask.any():
        values[mask] = ADVANTAGES[method](rewards[mask], rows[mask])
    return rewards * mask, values


def class_weights(labels, mask, values, n_classes: int) -> torch.Tensor:
    """W[i, c] = sum of the advantages of image i's responses that sampled class c."""
    weights = torch.zeros(labels.shape[0], n_classes, dtype=values.dtype, device=values.device)
    return weights.scatter_add_(1, labels, values * mask)


def collapsed_loss(log_probs, weights_per_class, prompt_weights, n_responses: int):
    """(1/M) sum_i w_i sum_c W[i, c] (-log pi(c | x_i)): the response-mean policy-gradient loss."""
    scale = weights_per_class.to(log_probs.dtype) * prompt_weights.to(log_probs.dtype)[:, None]
    return -(scale * log_probs).sum() / n_responses


def replicated_loss(model, images, labels, mask, values, prompt_weights, n_responses: int):
    """The naive computation: every response's image goes through the model on its own row."""
    rows = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(labels)[mask]
    log_probs = torch.log_softmax(model(images[rows]), dim=-1)
    chosen = log_probs.gather(1, labels[mask][:, None])[:, 0]
    scale = (values[mask] * prompt_weights[rows]).to(chosen.dtype)
    return -(scale * chosen).sum() / n_responses


def flat_cosine(first, second) -> float:
    """Cosine between two lists of gradient tensors, flattened; 0 when either is zero."""
    a = torch.cat([g.reshape(-1).double() for g in first])
    b = torch.cat([g.reshape(-1).double() for g in second])
    norm = a.norm() * b.norm()
    return float(a @ b / norm) if norm > 0 else 0.0
