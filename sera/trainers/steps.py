"""The learning rate of one optimizer step, where a method scales it (sera.evidence)."""

from __future__ import annotations

import contextlib

from sera.evidence import evidence_scale


def step_scale(method, outcome) -> float | None:
    """The factor a method puts on this step's learning rate: None for a method that scales no
    step; 1 for a batch not planned from estimates (uniform counts, or no rollouts); else the
    evidence scale of the step's rollouts (sera.evidence.evidence_scale)."""
    if not method.evidence_step:
        return None
    allocation = outcome.allocation
    if allocation is None or not allocation.allocated or outcome.successes is None:
        return 1.0
    return evidence_scale(outcome.successes, allocation.counts, allocation.p, allocation.n0)


@contextlib.contextmanager
def scaled_lr(optimizer, scale: float | None):
    """The optimizer's learning rates times `scale` for the steps taken inside, restored after
    (None or 1: untouched, so an unscaled step is bit for bit the unscaled optimizer's)."""
    if scale is None or scale == 1.0:
        yield
        return
    saved = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * scale
    try:
        yield
    finally:
        for group, lr in zip(optimizer.param_groups, saved, strict=True):
            group["lr"] = lr
