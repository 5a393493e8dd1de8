"""sera: Scale-Equalized Rollout Allocation for finite-rollout Maximum Likelihood RL.

`import sera` loads numpy and the math core only (fidelity, allocation, the estimators, the
history, Pass@K and the methods' plans); pandas comes with sera.results and the studies,
matplotlib with sera.plotting, and torch with the modules that train.
"""

from sera.allocation import Allocation, Waterline, allocate, uniform, waterline
from sera.estimators import (
    aggregate,
    groups_from_sizes,
    grpo_advantages,
    maxrl_advantages,
    multiplicity_weights,
    policy_loss,
    rl2ml_advantages,
    rl2ml_surrogate,
    rl2ml_weight,
    rloo_advantages,
)
from sera.fidelity import kappa, log_success_series, mixed_probability, rollouts_for_fidelity
from sera.history import SuccessHistory
from sera.passk import paired_bootstrap, pass_at_k, pass_at_k_analytic
from sera.planning import method_plan

__version__ = "0.1.0"

__all__ = [
    "Allocation",
    "SuccessHistory",
    "Waterline",
    "aggregate",
    "allocate",
    "groups_from_sizes",
    "grpo_advantages",
    "kappa",
    "log_success_series",
    "maxrl_advantages",
    "method_plan",
    "mixed_probability",
    "multiplicity_weights",
    "paired_bootstrap",
    "pass_at_k",
    "pass_at_k_analytic",
    "policy_loss",
    "rl2ml_advantages",
    "rl2ml_surrogate",
    "rl2ml_weight",
    "rloo_advantages",
    "rollouts_for_fidelity",
    "uniform",
    "waterline",
]
