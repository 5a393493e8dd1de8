"""The settings of a method that allocates: bounds, rounding, selection and the history's rule.

A frozen dataclass of the core (no trainer, torch or pandas behind it), read by `sera.methods`'
planning, `sera.method_plan`, every trainer (sera.trainers.config re-exports it) and the verl and
TRL plug-ins.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Literal

from sera.counts import WATERLINE
from sera.history import HISTORY_RULES, SuccessHistory


@dataclass(frozen=True)
class AllocatorConfig:
    """How a method that allocates spends the budget B * n0, and where its estimates come from."""

    n_min: int = 2
    """Fewest rollouts a retained prompt gets (>= 2: one rollout carries no centered signal)."""
    n_max: int | None = None
    """Most rollouts a prompt gets; None means n_max_factor * n0."""
    n_max_factor: int = 8
    """n_max as a multiple of n0 when n_max is None."""
    rounding: Literal["paper", "exact"] = "paper"
    """Which waterline rule a waterline method plans with (sera.counts.WATERLINE, a rule of
    sera.allocate): the paper's rounding or the exact integer max-min."""
    u_min: float | None = None
    """Observability-guided selection: keep the largest prefix with U(p, N_q) >= u_min; 0.0
    turns it off. None: the method's own (Method.selection; `sera`: sera.methods.U_MIN,
    `sera-rate`: 0.0)."""
    history_rule: Literal["rate", "counts"] | None = None
    """How an epoch's outcomes enter the historical estimate (sera.history.HISTORY_RULES). None:
    the method's own (`sera`: counts, the paper's; `sera-rate`: rate)."""
    history_gamma: float = 0.5
    """Discount per epoch of the historical evidence."""
    history_weight: float = 16.0
    """Weight of one epoch's success rate under history_rule 'rate'."""
    history_prior: tuple[float, float] = (1.0, 1.0)
    """Beta(alpha, beta) prior of the historical estimate."""

    def __post_init__(self):
        if self.n_min < 2:
            raise ValueError(f"n_min must be >= 2, got {self.n_min}")
        if self.n_max is not None and self.n_max < self.n_min:
            raise ValueError(f"n_max must be >= n_min = {self.n_min}, got {self.n_max}")
        if self.n_max_factor < 1:
            raise ValueError(f"n_max_factor must be >= 1, got {self.n_max_factor}")
        if self.rounding not in WATERLINE:
            raise ValueError(f"rounding must be one of {WATERLINE} (the waterline's rules), got "
                             f"{self.rounding!r}")
        if self.u_min is not None and not 0 <= self.u_min < 1:
            raise ValueError(f"u_min must lie in [0, 1), got {self.u_min}")
        if self.history_rule is not None and self.history_rule not in HISTORY_RULES:
            raise ValueError(f"history_rule must be one of {HISTORY_RULES} or None (the "
                             f"method's own), got {self.history_rule!r}")
        # the history's own checks, here so that a bad value fails where it is set
        prior = tuple(self.history_prior)
        if len(prior) != 2:
            raise ValueError(f"history_prior must be two numbers (alpha, beta), got {prior!r}")
        try:
            SuccessHistory(1, gamma=self.history_gamma, alpha=prior[0], beta=prior[1],
                           weight=self.history_weight)
        except (ValueError, TypeError) as exc:
            name, rest = str(exc).split(" ", 1)
            field = {"alpha": "history_prior's alpha", "beta": "history_prior's beta"}.get(
                name, f"history_{name}")
            raise ValueError(f"{field} {rest}") from exc
        # a tuple whatever sequence was given (a list from JSON or by hand): the config hashes
        object.__setattr__(self, "history_prior", tuple(self.history_prior))

    @functools.lru_cache(maxsize=64)  # noqa: B019 (frozen and small; called on every step)
    def for_method(self, method) -> AllocatorConfig:
        """This config with the method's own history rule and u_min where it leaves them to the
        method (None): after this call u_min is a number (0.0: the selection off)."""
        rule = self.history_rule or method.history_rule
        u_min = self.u_min if self.u_min is not None else method.selection
        return dataclasses.replace(self, history_rule=rule, u_min=u_min)

    def n_max_for(self, n0: int) -> int:
        """n_max resolved for a budget of n0 rollouts per prompt."""
        return self.n_max if self.n_max is not None else self.n_max_factor * n0

    def infeasible(self, n0: int) -> str | None:
        """Why no plan can spend a budget of n0 rollouts per prompt within [n_min, n_max] (every
        plan of a batch of B prompts spends B * n0, the first ones uniformly), or None."""
        if n0 < self.n_min:
            return (f"n0 = {n0} is below n_min = {self.n_min}: the uniform plans before every "
                    f"prompt has an estimate give each prompt n0 rollouts, fewer than n_min")
        if self.n_max_for(n0) < n0:
            return (f"n_max = {self.n_max_for(n0)} is below n0 = {n0}: no plan can spend a "
                    f"budget of n0 rollouts per prompt when no prompt may get more than n_max")
        return None

    def history(self, n_prompts: int) -> SuccessHistory:
        """The estimates' store, under this config's rule (resolve it with `for_method` first;
        unresolved, the paper's counts rule)."""
        alpha, beta = self.history_prior
        return SuccessHistory(n_prompts, gamma=self.history_gamma, alpha=alpha, beta=beta,
                              rule=self.history_rule or "counts", weight=self.history_weight)
