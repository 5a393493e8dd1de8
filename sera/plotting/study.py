"""Figures of the training studies, drawn from their tidy metrics tables.

Used by notebooks/04_gradient_cosine_study.ipynb.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sera.plotting.style import COLORS, new_figure, styled

ORDER = ["ce", "maxrl", "sera", "sera-history", "grpo"]
LINES = {"sera-history": "--"}


def _color(method: str) -> str:
    return COLORS.get(method, COLORS["sera"] if method.startswith("sera") else "#7f7f7f")


def _band(ax, table: pd.DataFrame, metric: str, method: str, smooth: int = 1, label=None):
    """Mean over seeds (line) and min-max over seeds (band) of one metric along training."""
    rows = table[(table["metric"] == metric) & (table["method"] == method)]
    if rows.empty:
        return
    wide = rows.pivot_table(index="step", columns="seed", values="value")
    if smooth > 1:
        wide = wide.rolling(smooth, min_periods=1).mean()
    color = _color(method)
    ax.plot(wide.index, wide.mean(axis=1), color=color, ls=LINES.get(method, "-"),
            label=label or method)
    ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=color, alpha=0.15, lw=0)


def _methods(table):
    present = set(table["method"])
    return [m for m in ORDER if m in present] + sorted(present - set(ORDER))


@styled
def plot_cosine_over_training(table: pd.DataFrame, smooth: int = 5):
    """Cosine between the sampled training gradient and the exact likelihood gradient of the
    same batch, along training: mean over seeds and min-max band, one panel per budget N0."""
    budgets = sorted(table.loc[table["method"] != "ce", "n0"].unique())
    fig, axes = new_figure(ncols=len(budgets), width=3.8, height=3.1, squeeze=False)
    for ax, n0 in zip(axes[0], budgets, strict=True):
        subset = table[(table["n0"] == n0) & (table["method"] != "ce")]
        for method in _methods(subset):
            _band(ax, subset, "cosine", method, smooth)
        ax.set(xlabel="step", ylabel="cosine to exact gradient", ylim=(-0.05, 1.0),
               title=f"N0 = {n0} (rolling mean of {smooth})")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
    return fig


@styled
def plot_validation_over_training(table: pd.DataFrame, ks=(1, 128)):
    """Validation Pass@K along training (rows: K; columns: budget N0); CE in every panel."""
    budgets = sorted(table.loc[table["method"] != "ce", "n0"].unique())
    fig, axes = new_figure(ncols=len(budgets), nrows=len(ks), width=3.8, height=2.8,
                           squeeze=False)
    for row, k in enumerate(ks):
        for col, n0 in enumerate(budgets):
            ax = axes[row][col]
            subset = table[(table["n0"] == n0) | (table["method"] == "ce")]
            for method in _methods(subset):
                _band(ax, subset, f"val_pass@{k}", method)
            ax.set(xlabel="step", ylabel=f"validation Pass@{k}", title=f"N0 = {n0}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
    return fig


@styled
def plot_passk_profile(table: pd.DataFrame):
    """Final Pass@K against K (log scale) per method, mean and min-max over seeds, CE as the
    exact-likelihood reference; one panel per budget N0."""
    budgets = sorted(table.loc[table["method"] != "ce", "n0"].unique())
    fig, axes = new_figure(ncols=len(budgets), width=3.8, height=3.1, squeeze=False)
    final = table[table["metric"].str.match(r"pass@\d+$")].copy()
    final["k"] = final["metric"].str.slice(5).astype(int)
    for ax, n0 in zip(axes[0], budgets, strict=True):
        subset = final[(final["n0"] == n0) | (final["method"] == "ce")]
        for method in _methods(subset):
            rows = subset[subset["method"] == method]
            stats = rows.groupby("k")["value"].agg(["mean", "min", "max"])
            color = _color(method)
            ax.plot(stats.index, stats["mean"], marker="o", ms=3, color=color,
                    ls=LINES.get(method, "-"), label=method)
            ax.fill_between(stats.index, stats["min"], stats["max"], color=color, alpha=0.15,
                            lw=0)
        ax.set(xscale="log", xlabel="K", ylabel="final Pass@K", title=f"N0 = {n0}")
        ax.set_xticks([1, 4, 16, 64], labels=["1", "4", "16", "64"])
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
    return fig


@styled
def plot_history_estimates(snapshot: pd.DataFrame, table: pd.DataFrame | None = None):
    """Historical estimates against exact success probabilities (left) and, when the metrics
    table is given, their MAE and Pearson correlation along training (right)."""
    fig, axes = new_figure(ncols=2 if table is not None else 1, width=3.6, height=3.2,
                           squeeze=False)
    ax = axes[0][0]
    seen = snapshot[snapshot["available"]]
    ax.plot(seen["p_exact"], seen["p_hat"], ".", ms=2, alpha=0.5, color=COLORS["sera"])
    ax.plot([0, 1], [0, 1], color="#404040", lw=0.8)
    mae = float(np.abs(seen["p_hat"] - seen["p_exact"]).mean())
    corr = float(np.corrcoef(seen["p_hat"], seen["p_exact"])[0, 1])
    ax.set(xlabel="exact p (final model)", ylabel="historical estimate",
           title=f"MAE {mae:.3f}, Pearson {corr:.3f}", xlim=(0, 1), ylim=(0, 1))
    if table is not None:
        ax = axes[0][1]
        for metric, color in (("history_mae", COLORS["sera"]), ("history_pearson", "#404040")):
            rows = table[table["metric"] == metric]
            wide = rows.pivot_table(index="step", columns=["n0", "seed"], values="value")
            for column in wide.columns:
                ax.plot(wide.index, wide[column], color=color, lw=0.6, alpha=0.5)
            ax.plot([], [], color=color, label=metric.replace("history_", ""))
        ax.set(xlabel="step", title="estimates along training (per run)", ylim=(0, 1))
        ax.legend(loc="center right")
    return fig
