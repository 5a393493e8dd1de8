"""A method's own allocation of one batch, from the public API: what the trainers plan.

Derived in notebooks/02_waterline_allocation.ipynb and notebooks/03_allocation_vs_success.ipynb;
`sera.allocate` is the bare allocator beneath it.
"""

from __future__ import annotations

import numpy as np

from sera import _checks
from sera.allocator_config import AllocatorConfig
from sera.counts import Allocation
from sera.methods import METHODS, plan


def method_plan(name: str, p_hat, n0: int, allocator=None) -> Allocation:
    """The allocation a trainer makes for method `name` on one batch whose every prompt has the
    estimate p_hat (shape (B,)), n0 rollouts a prompt on average (budget B * n0): the method's
    own rounding, selection (u_min) and bound (n_max_factor * n0), as `plan` resolves them.

    allocator: an AllocatorConfig to override the method's settings (None: its defaults).
    `sera.allocate` is the bare allocator: no selection and no bound unless given.
    """
    if name not in METHODS:
        raise ValueError(f"method must be one of {tuple(METHODS)}, got {name!r}")
    p_hat = _checks.batch_probabilities(p_hat)
    n0 = _checks.integer(n0, "n0", minimum=1)
    result = plan(METHODS[name], allocator or AllocatorConfig(), n0, np.arange(p_hat.size),
                  p_hat)
    if result is None:
        raise ValueError(f"method {name!r} samples no rollouts (it has no allocation)")
    return result
