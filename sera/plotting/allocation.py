"""Figures of the allocator: the waterline, rounding, allocation against p, the safeguard.

Used by notebooks/02_waterline_allocation.ipynb and notebooks/03_allocation_vs_success.ipynb.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps

from sera.allocation import allocate, waterline
from sera.fidelity import mixed_probability
from sera.plotting.style import (
    bars,
    count_ticks,
    headroom,
    integer_ticks,
    legend,
    message_figure,
    method_style,
    new_figure,
    styled,
)


@styled
def plot_waterline(p, budget: int, n_min: int = 2, n_max: int | None = None,
                   method: str = "paper"):
    """Prompts sorted by p. Top: integer counts (bars) over the continuous waterline counts.
    Bottom: each prompt's fidelity, level with the water line except where a bound clips it."""
    p = np.sort(np.asarray(p, dtype=float))
    result = allocate(p, budget, n_min, n_max, rule=method)
    fig, (top, bottom) = new_figure(nrows=2, width=6.0, height=2.6, sharex=True)
    x = np.arange(p.size)
    bars(top, x, result.counts, color=method_style(method).color, alpha=0.7,
         label=f"integer counts ({method})")
    top.step(x, result.continuous, where="mid", color="#404040", lw=1.2, label="continuous")
    top.axhline(budget / p.size, color=method_style("uniform").color, ls=":", lw=1,
                label=f"uniform N0 = {budget / p.size:g}")
    top.set(ylabel="rollouts N_q", title=f"B = {p.size}, budget M = {budget}, "
            f"N_min = {n_min}, N_max = {n_max}", ylim=(0, headroom(result.counts.max() * 1.35)))
    legend(top, loc="upper right", ncols=3, fontsize=7)
    bars(bottom, x, result.fidelity, color="#8fb6d9", label="κ(p_q, N_q)")
    bottom.axhline(result.level, color="#d62728", lw=1.5, label="water level c")
    bottom.plot(x, p, ".", color="#404040", ms=3, label="p_q")
    bottom.set(xlabel="prompts, sorted by success probability", ylabel="fidelity",
               ylim=(0, 1.4), title=f"fidelity per prompt; water level c = {result.level:.3f}")
    bottom.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    legend(bottom, loc="upper left", ncols=3, fontsize=7)  # above 1, clear of the bars
    integer_ticks(bottom.xaxis)
    fig.numbers = {"p": p, "counts": result.counts, "continuous": result.continuous,
                   "level": result.level, "fidelity": result.fidelity}
    return fig


@styled
def plot_waterline_beta(a: float = 0.5, b: float = 1.5, batch: int = 32, n0: int = 8,
                        n_min: int = 2, n_max: int = 64, method: str = "paper", seed: int = 0):
    """The waterline for a batch with p drawn from Beta(a, b) (the sliders' entry point). A
    setting whose budget B * n0 does not fit the bounds shows a message instead."""
    if not n_min <= n0 <= n_max:
        return message_figure(f"The budget B x N0 = {batch} x {n0} does not fit the bounds: "
                              f"N0 must lie between N_min = {n_min} and N_max = {n_max}.")
    p = np.random.default_rng(seed).beta(a, b, batch)
    return plot_waterline(p, batch * n0, n_min, min(n_max, batch * n0), method)


@styled
def plot_rounding_gap(table):
    """compare_rounding's table: minimum fidelity of the paper's rounding against the exact
    integer max-min (left) and the distribution of the gap where it is positive (right)."""
    fig, (left, right) = new_figure(ncols=2, width=3.8, height=3.2)
    below = table["gap"] > 1e-12
    left.plot(table.loc[~below, "exact_min_kappa"], table.loc[~below, "paper_min_kappa"], ".",
              color="#9e9e9e", ms=2, label="equal")
    left.plot(table.loc[below, "exact_min_kappa"], table.loc[below, "paper_min_kappa"], ".",
              color=method_style("paper").color, ms=3, label="paper below exact")
    left.plot([0, 1], [0, 1], color="#404040", lw=0.8)
    left.set(xlabel="exact: min κ", ylabel="paper: min κ", title="minimum fidelity")
    left.legend(loc="upper left")
    right.hist(table.loc[below, "gap"], bins=30, color=method_style("paper").color)
    right.set(xlabel="exact - paper (min κ)", ylabel="instances",
              title=f"{below.mean():.1%} of {len(table)} instances below")
    return fig


@styled
def plot_allocation_vs_success(n0s=(4, 8, 16, 32), batch: int = 128, n_min: int = 2,
                               n_max: int = 64):
    """Rollouts per prompt against p for several budgets (p evenly spread over a batch)."""
    p = (np.arange(batch) + 0.5) / batch
    fig, ax = new_figure(width=5.0, height=3.4)
    shades = colormaps["viridis"](np.linspace(0.05, 0.9, len(n0s)))
    for n0, color in zip(n0s, shades, strict=True):
        counts = allocate(p, batch * n0, n_min, n_max).counts
        continuous = waterline(p, batch * n0, n_min, n_max).counts
        ax.plot(p, continuous, color=color, label=f"N0 = {n0}")
        ax.plot(p, counts, ".", color=color, ms=3)
    ax.set(xlabel="success probability p", ylabel="rollouts N_q", yscale="log",
           title=f"Allocation against success (B = {batch}, N_max = {n_max})")
    count_ticks(ax, n_max)
    ax.legend(loc="upper right")
    return fig


@styled
def plot_safeguard(p, budget: int, n_min: int = 2, n_max: int = 64, u_min: float = 0.3):
    """Which prompts the observability safeguard keeps: counts and U(p, N_q) per prompt; a
    dropped prompt is drawn at the U the whole batch's allocation would have left it; a dotted
    line marks the cap on counts.

    The count axis reaches just past the cap (N_max, or the budget if smaller), so it shows how
    close the counts come to it and stays put while the batch changes: an axis that followed
    the largest count made the slider's figure draw whole (ticks and all) whenever that count
    crossed a step of the axis, about one frame in eight of a drag."""
    p = np.asarray(p, dtype=float)
    result = allocate(p, budget, n_min, n_max, u_min=u_min)
    fig, (left, right) = new_figure(ncols=2, width=3.9, height=3.2)
    kept = result.retained
    left.plot(p[kept], result.counts[kept], "o", color=method_style("sera").color, ms=4,
              label="retained")
    left.plot(p[~kept], np.zeros((~kept).sum()), "x", color="#404040", label="dropped")
    cap = min(n_max, budget)
    left.axhline(cap, color="#9e9e9e", ls=":", lw=1, label=f"cap {cap}")
    top = headroom(cap * 1.05)
    left.set(xlabel="p", ylabel="rollouts N_q", xlim=(-0.03, 1.03), ylim=(-0.05 * top, top),
             title="fallback taken" if result.fallback else f"{kept.sum()} of {p.size} kept")
    legend(left, loc="upper right")
    u = mixed_probability(p[kept], result.counts[kept])
    right.plot(p[kept], u, "o", color=method_style("sera").color, ms=4)
    # A dropped prompt is drawn where the whole batch's allocation would have left it, the
    # U it was dropped for (below u_min), not at N_max, which the budget could not give it.
    whole = allocate(p, budget, n_min, n_max).counts
    right.plot(p[~kept], mixed_probability(p[~kept], whole[~kept]), "x", color="#404040",
               label="dropped: U if the whole\nbatch were allocated")
    right.axhline(u_min, color="#d62728", ls="--", lw=1, label="u_min")
    right.set(xlabel="p", ylabel="U(p, N)", xlim=(-0.03, 1.03), ylim=(0, 1.02),
              title=f"mixed-group probability; u_min = {u_min:g}")
    legend(right, loc="lower center")
    fig.numbers = {"p": p, "counts": result.counts, "retained": result.retained,
                   "fallback": result.fallback, "u": u}
    return fig


@styled
def plot_safeguard_beta(a: float = 0.4, b: float = 1.5, batch: int = 40, n0: int = 8,
                        n_max: int = 64, u_min: float = 0.3, seed: int = 0):
    """plot_safeguard for a batch with p drawn from Beta(a, b) (the sliders' entry point); a
    budget that does not fit the bounds shows a message instead."""
    if not 2 <= n0 <= n_max:
        return message_figure(f"The budget B x N0 = {batch} x {n0} does not fit the bounds: "
                              f"N0 must lie between N_min = 2 and N_max = {n_max}.")
    p = np.random.default_rng(seed).beta(a, b, batch)
    return plot_safeguard(p, batch * n0, 2, n_max, u_min)


@styled
def plot_budget_concentration(table):
    """budget_concentration's table: the lowest prompt's share of the budget and the level
    left for the batch, as its success probability goes to zero."""
    fig, (left, right) = new_figure(ncols=2, width=3.8, height=3.0)
    left.plot(table["p_low"], table["share_of_budget"], "o-", color=method_style("sera").color)
    left.set(xscale="log", xlabel="lowest success probability", ylabel="share of the budget",
             title="one hard prompt's share", ylim=(0, 1.05))
    right.plot(table["p_low"], table["level"], "o-", color=method_style("maxrl").color,
               label="common fidelity κ*")
    right.plot(table["p_low"], table["min_kappa_others"], "s--", color="#404040", ms=3,
               label="min κ, other prompts")
    right.set(xscale="log", xlabel="lowest success probability", ylabel="fidelity",
              title="what the rest is left with", ylim=(0, 1.3))
    right.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    right.legend(loc="upper center", fontsize=7, ncols=2)  # above 1, clear of the lines
    return fig


@styled
def plot_reweighting(table):
    """reweighting_study's table: zero-signal probability, relative variance and expected
    cosine to the exact direction, per method."""
    fig, axes = new_figure(ncols=3, width=2.7, height=2.9)
    colors = [method_style(m).color for m in table["method"]]
    for ax, column, title in zip(axes, ["zero_signal", "relative_variance", "expected_cosine"],
                                 ["zero-signal probability", "relative variance",
                                  "expected cosine"], strict=True):
        ax.bar(table["method"], table[column], color=colors)
        ax.set(title=title)
        ax.tick_params(axis="x", labelrotation=20)
    axes[2].set_ylim(min(0.5, float(table["expected_cosine"].min()) - 0.05), 1.0)
    return fig
