"""The result of every allocator: integer counts of a rollout budget and the weights they imply.

Below every allocator (sera.allocation, sera.baselines, the trainers' protocols), so that none
of them imports another to build its result.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from sera.fidelity import kappa

WATERLINE = ("paper", "exact")
"""The waterline's rules, one per rounding (sera.allocate(rule=...), AllocatorConfig.rounding)."""


def even_split(total: int, size: int) -> np.ndarray:
    """total rollouts over size prompts as evenly as possible: total // size each, the first
    total % size one more; returns (size,) int64."""
    share = np.full(size, total // size, dtype=np.int64)
    share[: total % size] += 1
    return share


@dataclass(frozen=True)
class Allocation:
    """An integer allocation of a fixed rollout budget over a batch of B prompts.

    Attributes:
        p: (B,) the success probabilities (or estimates) the allocation was computed from.
        counts: (B,) int64 rollouts per prompt, 0 for prompts that were not retained.
        weights: (B,) per-response weight n0 / N_q of each prompt, 0 where not retained, so that
            every retained prompt carries the same total weight n0 in a response-mean loss
            (np.repeat(weights, counts) gives the (sum N_q,) response weights).
        retained: (B,) bool, which prompts receive rollouts.
        level: common fidelity 1 - exp(-lam) of the continuous solution over the retained prompts
            (for the other rules: the smallest fidelity among the prompts with rollouts).
        lam: the water level of the continuous solution (nan for the other rules).
        continuous: (B,) the continuous waterline counts (0 where not retained).
        fallback: True when the safeguard found no prefix meeting u_min and kept the top
            capacity-minimal set, or when a batch fell back to uniform counts.
        rule: what set the counts: a rule of sera.allocation.RULES ("paper" or "exact", the
            waterline and its rounding; "uniform"; the compared rules, sera.baselines.COMPARED),
            "cero" (a stateful allocator), "evidence-waterline" (sera.evidence), or a protocol
            that samples in rounds ("dynamic", "two-stage", "probe-commit").
        n0: the reference count in the weights.
    """

    p: np.ndarray
    counts: np.ndarray
    weights: np.ndarray
    retained: np.ndarray
    level: float
    lam: float
    continuous: np.ndarray
    fallback: bool
    rule: str
    n0: float

    @property
    def budget(self) -> int:
        return int(self.counts.sum())

    @property
    def allocated(self) -> bool:
        """Whether the counts came from the estimates (False: uniform counts, including a batch
        that fell back to them because some prompt had no estimate yet)."""
        return self.rule != "uniform"

    @property
    def method(self) -> str:
        """The older name of `rule` (a method is a training method, sera.methods.METHODS)."""
        warnings.warn("Allocation.method is spelled Allocation.rule", DeprecationWarning,
                      stacklevel=2)
        return self.rule

    @property
    def fidelity(self) -> np.ndarray:
        """(B,) kappa(p_q, N_q) per prompt (0 where not retained)."""
        out = np.zeros_like(self.p)
        kept = self.retained
        out[kept] = kappa(self.p[kept], self.counts[kept])
        return out

    def to_frame(self):
        """One row per prompt: p, counts, weights, retained, fidelity (a pandas DataFrame)."""
        import pandas as pd

        return pd.DataFrame({"p": self.p, "counts": self.counts, "continuous": self.continuous,
                             "weights": self.weights, "retained": self.retained,
                             "fidelity": self.fidelity})


def assemble(p, kept, counts_kept, continuous_kept, lam, fallback, rule, n0) -> Allocation:
    """Scatter the retained prompts' counts back into the batch (kept=None: all, in order):
    p (B,), kept (m,) indices, counts_kept and continuous_kept (m,) -> an Allocation of B."""
    if kept is None:
        kept = slice(None)
        counts, continuous = counts_kept, continuous_kept
    else:
        counts = np.zeros(p.size, dtype=np.int64)
        continuous = np.zeros(p.size)
        counts[kept] = counts_kept
        continuous[kept] = continuous_kept
    retained = counts > 0  # a rule may give a prompt nothing (GVM at p = 0, the safeguard)
    if retained.all():  # no masked division where there is nothing to mask (the usual case)
        weights = np.divide(float(n0), counts)
    else:
        weights = np.divide(n0, counts, out=np.zeros(p.size), where=retained)
    if rule in WATERLINE:
        level = -math.expm1(-lam)
    else:  # no water level: the smallest fidelity among the prompts that got rollouts
        level = (float(kappa(p[retained], counts[retained]).min()) if retained.any()
                 else math.nan)
    return Allocation(p=p, counts=counts, weights=weights, retained=retained, level=level,
                      lam=float(lam), continuous=continuous, fallback=fallback, rule=rule,
                      n0=float(n0))


def from_counts(p, counts, n0: float, rule: str) -> Allocation:
    """The Allocation of given counts, p (B,) and counts (B,) (for allocators that keep state
    across steps, and protocols that sample in rounds)."""
    counts = np.asarray(counts, dtype=np.int64)
    return assemble(np.asarray(p, dtype=float), None, counts, counts.astype(float), math.nan,
                   False, rule, n0)
