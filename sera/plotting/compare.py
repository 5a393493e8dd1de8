"""Figures of SERA beside the rollout allocators and estimators it is compared with.

Used by notebooks/06_allocators_compared.ipynb. Methods known only from an abstract carry
"reconstruction" in their names, and so in every legend and table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from sera.allocation import allocate
from sera.plotting.style import line, method_style, new_figure, styled


@styled
def plot_allocators(p, budget: int, n_min: int, n_max: int, methods):
    """Each allocation rule's counts against p on one batch at the same budget (a line per rule,
    prompts sorted by p), with the uniform count for reference."""
    p = np.sort(np.asarray(p, dtype=float))
    fig, ax = new_figure(width=5.6, height=3.4)
    for method in methods:
        counts = allocate(p, budget, n_min, n_max, rule=method).counts
        name = "sera (exact)" if method == "exact" else "sera" if method == "paper" else method
        # the figure shows the rounding as SERA's own: exact dotted
        style = {**line("sera"), "ls": ":"} if method == "exact" else line(
            "sera" if method == "paper" else method)
        ax.plot(p, counts, marker="o", ms=3, label=name, **style)
    ax.axhline(budget / p.size, color="#404040", lw=0.8, ls=":", label="uniform N0")
    ax.set(xscale="log", yscale="log", xlabel="success probability p (log)",
           ylabel="rollouts N_q (log)",
           title=f"B = {p.size}, M = {budget}, {n_min} <= N <= {n_max}")
    ticks = [t for t in (2, 4, 8, 16, 32, 64, 128) if t <= n_max]
    ax.set_yticks(ticks, labels=[str(t) for t in ticks])
    ax.minorticks_off()
    ax.legend(loc="upper right", fontsize=7, ncols=2)
    return fig


def _series(metrics: pd.DataFrame, metric: str, k=None) -> pd.DataFrame:
    rows = metrics[metrics["metric"] == metric]
    if k is not None:
        rows = rows[rows["k"] == k]
    return rows


FAMILIES = ("rule", "sequential", "estimator", "maxrl")
"""Facet order of plot_against_budget: one row per family of methods (sera.plotting.STYLES)."""


def _facets(methods, references=("sera", "maxrl"), per_row: int = 4) -> list[list[str]]:
    """Rows of at most per_row methods of one family each, the references (SERA and MaxRL) added
    to every row so that each facet reads against them."""
    rows = []
    others = [m for m in methods if m not in references]
    for family in FAMILIES:
        members = [m for m in others if method_style(m).family == family]
        rows += [members[i:i + per_row] for i in range(0, len(members), per_row)]
    listed = {m for row in rows for m in row}
    rest = [m for m in others if m not in listed]  # families outside FAMILIES
    rows += [rest[i:i + per_row] for i in range(0, len(rest), per_row)]
    present = [m for m in references if m in methods]
    return [present + row for row in rows] or [present]


@styled
def plot_against_budget(metrics: pd.DataFrame, metric: str = "val_pass", k: int | None = 1,
                        methods=None, smooth: int = 1, ylabel: str | None = None):
    """One metric along training per method (mean over seeds), one row per family of methods
    (at most six lines a panel, SERA and MaxRL in every row), against optimizer steps (left) and
    against the rollouts generated so far on a log axis (right): a method that samples more per
    step shows its cost on the right."""
    rollouts = metrics[metrics["metric"] == "rollouts"].copy()
    rollouts["spent"] = rollouts.sort_values("step").groupby(["method", "seed"])["value"].cumsum()
    spent = rollouts.groupby(["method", "step"])["spent"].mean()
    rows = _series(metrics, metric, k)
    methods = methods or list(dict.fromkeys(rows["method"]))
    facets = _facets(methods)
    fig, axes = new_figure(ncols=2, nrows=len(facets), width=3.9, height=2.6, squeeze=False)
    label = ylabel or (f"{metric} @ {k}" if k is not None else metric)
    for (left, right), members in zip(axes, facets, strict=True):
        for method in members:
            series = rows[rows["method"] == method].groupby("step")["value"].mean()
            if series.empty:
                continue
            if smooth > 1:
                series = series.rolling(smooth, min_periods=1).mean()
            style = line(method)
            left.plot(series.index, series.values, label=method_style(method).label, **style)
            if method in spent.index.get_level_values(0):
                # evaluations run before the step: read the rollouts spent by the steps before
                before = spent[method].reindex(series.index - 1).fillna(0).to_numpy()
                shown = before > 0  # a log axis: the evaluation before any rollout is left out
                right.plot(before[shown], series.values[shown], **style)
        left.set(xlabel="optimizer step", ylabel=label)
        right.set(xlabel="rollouts generated (log)", xscale="log")
        right.xaxis.set_minor_formatter(NullFormatter())  # labels at the powers of ten only
        left.legend(fontsize=7, loc="best")
    return fig


def _seed_points(ax, per_seed, y, colors) -> None:
    """Each seed's difference as a small hollow dot on the row of its method."""
    if per_seed is None:
        return
    for row, values, color in zip(y, per_seed, colors, strict=True):
        values = np.atleast_1d(values) if values is not None else []
        ax.scatter(values, np.full(len(values), row + 0.18), s=9, facecolors="none",
                   edgecolors=color, lw=0.7, zorder=2)


@styled
def plot_gains(gains: pd.DataFrame, reference: str = "sera"):
    """Each method minus the reference, one panel per K: each seed's paired difference (small
    dots), their mean (large dot) and the Student-t 95% interval over seeds (bar; none with
    fewer than 3 seeds). gains: sera.results.paired_gain rows with a method column."""
    ks = sorted(gains["k"].unique())
    fig, axes = new_figure(ncols=len(ks), width=3.0, height=0.32 * gains["method"].nunique() + 1,
                           squeeze=False)
    order = list(dict.fromkeys(gains.sort_values("gain")["method"]))
    for ax, k in zip(axes[0], ks, strict=True):
        rows = gains[gains["k"] == k].set_index("method").reindex(order)
        y = np.arange(len(order))
        colors = [method_style(m).color for m in order]
        ax.hlines(y, rows["low"], rows["high"], colors=colors, lw=2)
        ax.scatter(rows["gain"], y, c=colors, s=18, zorder=3)
        _seed_points(ax, rows["per_seed"] if "per_seed" in rows else None, y, colors)
        ax.axvline(0, color="#404040", lw=0.8)
        ax.set(title=f"Pass@{k}", xlabel=f"method - {reference}")
        ax.set_yticks(y, labels=order if ax is axes[0][0] else [""] * len(order))
    return fig
