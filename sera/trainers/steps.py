"""What a method changes at one optimizer step: its advantages (a capped lone success) and its
learning rate (an evidence-scaled step, sera.evidence)."""

from __future__ import annotations

import contextlib

from sera.evidence import evidence_scale


def advantages(method, rewards, sizes, n0: int):
    """The method's advantages of a step's responses, rewards (R,) in groups of sizes (B,) with
    rollouts: its advantage function, with the group mean floored at 1 / n0 where the method caps
    a lone success (Method.lone_success_cap)."""
    if method.lone_success_cap:
        return method.advantages(rewards, sizes=sizes, floor=1.0 / n0)
    return method.advantages(rewards, sizes=sizes)


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
