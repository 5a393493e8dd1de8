"""Figures: pure functions fig = plot_x(...) shared by the notebooks' sliders and figure cells."""

from sera.plotting.allocation import (
    plot_allocation_vs_success,
    plot_budget_concentration,
    plot_reweighting,
    plot_rounding_gap,
    plot_safeguard,
    plot_safeguard_beta,
    plot_waterline,
    plot_waterline_beta,
)
from sera.plotting.compare import plot_against_budget, plot_allocators, plot_gains
from sera.plotting.fidelity import (
    plot_direction_tilt,
    plot_kappa_curves,
    plot_kappa_slider,
    plot_mixed_probability,
    plot_rollouts_for_fidelity,
)
from sera.plotting.regime import (
    plot_arms,
    plot_confirmation,
    plot_departure,
    plot_difficulty_profiles,
    plot_drift,
    plot_regime_diagnostics,
    plot_regime_map,
    plot_regime_slider,
)
from sera.plotting.sequence import (
    plot_allocation_vs_estimate,
    plot_maze_paths,
    plot_sequence_profile,
    plot_sequence_validation,
    plot_training_diagnostics,
)
from sera.plotting.study import (
    plot_cosine_over_training,
    plot_history_estimates,
    plot_passk_profile,
    plot_validation_over_training,
)
from sera.plotting.style import STYLES, message_figure, method_style, new_figure, savefig
from sera.plotting.sweep import plot_frontier

__all__ = [
    "plot_frontier",
    "STYLES",
    "message_figure",
    "method_style",
    "new_figure",
    "plot_against_budget",
    "plot_allocators",
    "plot_gains",
    "plot_allocation_vs_estimate",
    "plot_allocation_vs_success",
    "plot_cosine_over_training",
    "plot_history_estimates",
    "plot_passk_profile",
    "plot_validation_over_training",
    "plot_budget_concentration",
    "plot_difficulty_profiles",
    "plot_arms",
    "plot_confirmation",
    "plot_departure",
    "plot_drift",
    "plot_regime_diagnostics",
    "plot_regime_map",
    "plot_regime_slider",
    "plot_direction_tilt",
    "plot_kappa_curves",
    "plot_kappa_slider",
    "plot_maze_paths",
    "plot_sequence_profile",
    "plot_sequence_validation",
    "plot_mixed_probability",
    "plot_reweighting",
    "plot_rollouts_for_fidelity",
    "plot_rounding_gap",
    "plot_training_diagnostics",
    "plot_safeguard",
    "plot_safeguard_beta",
    "plot_waterline",
    "plot_waterline_beta",
    "savefig",
]
