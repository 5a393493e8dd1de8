"""Figures of the finite-rollout fidelity kappa and the mixed-group probability U.

Used by notebooks/01_finite_rollout_fidelity.ipynb and notebooks/03_allocation_vs_success.ipynb.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps

from sera.allocation import waterline
from sera.fidelity import kappa, mixed_probability, rollouts_for_fidelity
from sera.plotting.style import bars, integer_ticks, legend, new_figure, styled

P_GRID = np.linspace(0.0, 1.0, 401)


def _shades(count: int):
    return colormaps["viridis"](np.linspace(0.05, 0.9, count))


@styled
def plot_kappa_curves(ns=(2, 4, 8, 16, 32, 64)):
    """kappa(p, N) against p for several N: centered (solid) and uncentered (dashed)."""
    fig, ax = new_figure(width=5.0, height=3.4)
    for n, color in zip(ns, _shades(len(ns)), strict=True):
        ax.plot(P_GRID, kappa(P_GRID, n), color=color, label=f"N = {n}")
        ax.plot(P_GRID, kappa(P_GRID, n, centered=False), color=color, ls="--", lw=1.0)
    ax.set(xlabel="success probability p", ylabel="fidelity κ(p, N)", ylim=(0, 1.02),
           title="Fidelity of MaxRL: centered (solid), uncentered (dashed)")
    ax.legend(loc="lower right", ncols=2)
    return fig


@styled
def plot_kappa_slider(p: float = 0.1, n: int = 8):
    """Left: the log-success series terms (1-p)^(k-1); the centered estimator keeps the first
    N-1, so kappa = p * (their sum). Right: kappa(., N) with the point (p, kappa(p, N))."""
    fig, (left, right) = new_figure(ncols=2, width=4.0, height=3.2)
    terms = max(2 * n, 16)
    k = np.arange(1, terms + 1)
    values = (1 - p) ** (k - 1)
    kept = k <= n - 1
    bars(left, k[kept], values[kept], color="#d62728", label=f"kept (k <= N-1 = {n - 1})")
    bars(left, k[~kept], values[~kept], color="#c7c7c7", label="truncated")
    left.set(xlabel="series term k", ylabel="(1-p)^(k-1)", ylim=(0, 1.05),
             title=f"κ = p · kept sum = {p * values[kept].sum():.3f}")
    integer_ticks(left.xaxis)
    legend(left, loc="upper right")
    right.plot(P_GRID, kappa(P_GRID, n), color="#1f77b4", label="centered")
    right.plot(P_GRID, kappa(P_GRID, n, centered=False), color="#1f77b4", ls="--",
               label="uncentered")
    right.plot([p], [kappa(p, n)], "o", color="#d62728")
    right.set(xlabel="p", ylabel="κ(p, N)", ylim=(0, 1.02),
              title=f"N = {n}: κ({p:.2f}, {n}) = {kappa(p, n):.3f}")
    legend(right, loc="lower right")
    fig.numbers = {"p": p, "n": n, "kappa": float(kappa(p, n)), "terms": values[kept]}
    return fig


def tilt_vectors(p1: float, p2: float, n: int, angle_deg: float = 60.0):
    """Unit likelihood-gradient directions of two prompts and three aggregate updates: exact
    (g1 + g2), uniform N (kappa1 g1 + kappa2 g2) and waterline (the counts of sera.waterline
    with the same total budget 2N and N_min = 2, which equalize kappa unless N_min binds).
    Returns a dict of 2-vectors, fidelities, counts and tilt angles in degrees."""
    angle = np.deg2rad(angle_deg)
    g1, g2 = np.array([1.0, 0.0]), np.array([np.cos(angle), np.sin(angle)])
    k1, k2 = float(kappa(p1, n)), float(kappa(p2, n))
    counts = waterline([p1, p2], 2 * n, n_min=2).counts
    e1, e2 = (float(k) for k in kappa(np.array([p1, p2]), counts))
    exact, uniform, equalized = g1 + g2, k1 * g1 + k2 * g2, e1 * g1 + e2 * g2

    def degrees(u, v):
        cos = u @ v / (np.linalg.norm(u) * np.linalg.norm(v))
        return float(np.degrees(np.arccos(np.clip(cos, -1, 1))))

    return {"g1": g1, "g2": g2, "exact": exact, "uniform": uniform, "equalized": equalized,
            "kappa": (k1, k2), "kappa_waterline": (e1, e2), "counts": tuple(counts),
            "tilt_uniform": degrees(uniform, exact), "tilt_equalized": degrees(equalized, exact)}


@styled
def plot_direction_tilt(p1: float = 0.05, p2: float = 0.3, n: int = 8, angle_deg: float = 60.0):
    """How uniform counts tilt the expected update of two prompts away from the exact
    likelihood gradient, and how equalized fidelity removes the tilt."""
    v = tilt_vectors(p1, p2, n, angle_deg)
    fig, ax = new_figure(width=4.6, height=3.8)
    # Fixed margins: the constrained layout of an equal-aspect axes under a two-line title never
    # settled at the screen's resolution (each redraw moved the arrows by a pixel, in a cycle of
    # three), and one bit of an arrow's end could tip it, so the figure differed by processor.
    fig.set_layout_engine("none")
    ax.set_position([0.14, 0.12, 0.83, 0.74])  # left, bottom, width, height
    # The two prompts' gradients in two clearly different hues (not two greys), the exact sum in
    # black, the two batch updates in the method colours. The legend names the arrows; the
    # numbers a slider moves sit in the title.
    arrows = [("g1", "#ff7f0e", "∇ log p1 (the hard prompt)"),
              ("g2", "#2ca02c", "∇ log p2"),
              ("exact", "#000000", "exact: ∇ log p1 + ∇ log p2"),
              ("uniform", "#1f77b4", "uniform N"),
              ("equalized", "#d62728", "waterline counts")]
    for key, color, label in arrows:
        x, y = v[key]
        ax.annotate("", xy=(x, y), xytext=(0, 0),
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=2.0))
        ax.plot([], [], color=color, lw=2.0, label=label)
    # Every arrow in view, whatever the angle (above 90 degrees g2 points left).
    points = np.array([[0.0, 0.0]] + [v[key] for key, _, _ in arrows])
    low, high = points.min(axis=0) - 0.15, points.max(axis=0) + 0.15
    ax.set(xlim=(low[0], high[0]), ylim=(low[1], high[1] + 0.6), aspect="equal",
           xlabel="gradient, first coordinate", ylabel="gradient, second coordinate",
           title="uniform N = {}: κ = ({:.2f}, {:.2f}), tilt {:.1f} deg\n"
                 "waterline N = ({:.1f}, {:.1f}): tilt {:.1f} deg".format(
                     n, *v["kappa"], v["tilt_uniform"], *v["counts"], v["tilt_equalized"]))
    legend(ax, loc="upper center", fontsize=7, ncols=1)
    fig.numbers = {key: v[key] for key in ("kappa", "kappa_waterline", "counts", "tilt_uniform",
                                           "tilt_equalized", "uniform", "equalized")}
    return fig


@styled
def plot_rollouts_for_fidelity(levels=(0.5, 0.8, 0.9, 0.95), n_max: int = 64):
    """Rollouts N needed for a common fidelity against p, capped at n_max."""
    fig, ax = new_figure(width=5.0, height=3.4)
    p = np.logspace(-3, np.log10(0.99), 300)
    for level, color in zip(levels, _shades(len(levels)), strict=True):
        need = rollouts_for_fidelity(p, level)
        ax.plot(p, np.minimum(need, n_max), color=color, label=f"κ* = {level:g}")
        over = need > n_max
        if over.any():
            ax.plot(p[over], np.full(over.sum(), n_max), color=color, lw=4, alpha=0.3)
    ax.axhline(n_max, color="#404040", ls=":", lw=1)
    ax.text(p[0], n_max * 1.03, f"N_max = {n_max} (thick: the level is out of reach)",
            fontsize=7, va="bottom")
    ax.set(xscale="log", xlabel="success probability p", ylabel="rollouts needed N",
           ylim=(0, n_max * 1.15), title="Rollouts for a common fidelity")
    ax.legend(loc="upper right")
    return fig


@styled
def plot_mixed_probability(ns=(2, 4, 8, 16, 64)):
    """U(p, N), the chance of any nonzero centered advantage, beside kappa(p, N)."""
    fig, (left, right) = new_figure(ncols=2, width=4.0, height=3.2)
    for n, color in zip(ns, _shades(len(ns)), strict=True):
        left.plot(P_GRID, mixed_probability(P_GRID, n), color=color, label=f"N = {n}")
        right.plot(P_GRID, kappa(P_GRID, n), color=color, label=f"N = {n}")
    left.set(xlabel="p", ylabel="U(p, N)", title="mixed-group probability U", ylim=(0, 1.02))
    right.set(xlabel="p", ylabel="κ(p, N)", title="fidelity κ", ylim=(0, 1.02))
    left.legend(loc="lower center")
    return fig
