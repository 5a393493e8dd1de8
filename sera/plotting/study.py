"""Figures of the training studies, drawn from their long tables (every row carries its run's
keys: method, seed, n0, agg, u_min, ...).

Used by notebooks/04_gradient_cosine_study.ipynb.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sera.plotting.style import STYLES, line, method_style, new_figure, styled
from sera.tables import arm


def with_arms(table: pd.DataFrame) -> pd.DataFrame:
    """The table with an `arm` column: the method, plus the threshold where a run's u_min is not
    its method's own (sera.tables.arm)."""
    if "u_min" not in table.columns:
        return table.assign(arm=table["method"])
    return table.assign(arm=arm(table))


def _style(arm_name: str) -> dict:
    """The method's line; a threshold other than the method's own (u_min) is drawn dotted."""
    style = line(arm_name.split(" ")[0])
    return style if "u_min" not in arm_name else {**style, "ls": ":"}


def _band(ax, table: pd.DataFrame, arm_name: str, smooth: int = 1):
    """Mean over seeds (line) and min-max over seeds (band) of one series along training."""
    rows = table[table["arm"] == arm_name]
    if rows.empty:
        return
    wide = rows.pivot_table(index="step", columns="seed", values="value")
    if smooth > 1:
        wide = wide.rolling(smooth, min_periods=1).mean()
    style = _style(arm_name)
    ax.plot(wide.index, wide.mean(axis=1), label=arm_name, **style)
    ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=style["color"],
                    alpha=0.15, lw=0)


def _arms(table):
    present = list(dict.fromkeys(table["arm"]))
    rank = {m: i for i, m in enumerate(STYLES)}
    return sorted(present, key=lambda a: (rank[a.split(" ")[0]], a))


def _budgets(table):
    return sorted(table.loc[table["method"] != "ce", "n0"].unique())


def _legend_below(fig, axes):
    handles = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center",
               ncols=min(len(handles), 4))


@styled
def plot_cosine_over_training(metrics: pd.DataFrame, smooth: int = 5):
    """Cosine between the sampled training gradient and the exact likelihood gradient of the
    same batch, along training: mean over seeds and min-max band, one panel per budget N0."""
    table = with_arms(metrics[(metrics["metric"] == "cosine") & (metrics["method"] != "ce")])
    budgets = _budgets(table)
    fig, axes = new_figure(ncols=len(budgets), width=3.8, height=3.1, squeeze=False)
    for ax, n0 in zip(axes[0], budgets, strict=True):
        subset = table[table["n0"] == n0]
        for name in _arms(subset):
            _band(ax, subset, name, smooth)
        ax.set(xlabel="step", ylabel="cosine to exact gradient", ylim=(-0.05, 1.0),
               title=f"N0 = {n0} (rolling mean of {smooth})")
    _legend_below(fig, axes)
    return fig


@styled
def plot_validation_over_training(metrics: pd.DataFrame, ks=(1, 128)):
    """Validation Pass@K along training (rows: K; columns: budget N0); CE in every panel."""
    table = with_arms(metrics[metrics["metric"] == "val_pass"])
    budgets = _budgets(table)
    fig, axes = new_figure(ncols=len(budgets), nrows=len(ks), width=3.8, height=2.8,
                           squeeze=False)
    for row, k in enumerate(ks):
        for col, n0 in enumerate(budgets):
            ax = axes[row][col]
            subset = table[(table["k"] == k) & ((table["n0"] == n0) | (table["method"] == "ce"))]
            for name in _arms(subset):
                _band(ax, subset, name)
            ax.set(xlabel="step", ylabel=f"validation Pass@{k}", title=f"N0 = {n0}")
    _legend_below(fig, axes)
    return fig


@styled
def plot_passk_profile(profile: pd.DataFrame):
    """Final Pass@K against K (log scale) per method, mean and min-max over seeds, CE as the
    exact-likelihood reference; one panel per budget N0. profile: sera.results.passk_profile."""
    table = with_arms(profile)
    budgets = _budgets(table)
    fig, axes = new_figure(ncols=len(budgets), width=3.8, height=3.1, squeeze=False)
    for ax, n0 in zip(axes[0], budgets, strict=True):
        subset = table[(table["n0"] == n0) | (table["method"] == "ce")]
        for name in _arms(subset):
            stats = subset[subset["arm"] == name].groupby("k")["pass@k"].agg(
                ["mean", "min", "max"])
            style = _style(name)
            ax.plot(stats.index, stats["mean"], marker="o", ms=3, label=name, **style)
            ax.fill_between(stats.index, stats["min"], stats["max"], color=style["color"],
                            alpha=0.15, lw=0)
        ax.set(xscale="log", xlabel="K", ylabel="final Pass@K", title=f"N0 = {n0}")
        ticks = [k for k in (1, 4, 16, 64) if k <= table["k"].max()]
        ax.set_xticks(ticks, labels=[str(t) for t in ticks])
        ax.minorticks_off()
    _legend_below(fig, axes)
    return fig


@styled
def plot_history_estimates(snapshot: pd.DataFrame, metrics: pd.DataFrame | None = None):
    """Historical estimates against exact success probabilities (left) and, when the metrics
    table is given, their MAE and Pearson correlation along training beside the ideal
    history-only estimate, the exact p at each prompt's previous visit (right)."""
    fig, axes = new_figure(ncols=2 if metrics is not None else 1, width=3.6, height=3.2,
                           squeeze=False)
    ax = axes[0][0]
    seen = snapshot[snapshot["available"]]
    ax.plot(seen["p_exact"], seen["p_hat"], ".", ms=2, alpha=0.5, color=method_style("sera").color)
    ax.plot([0, 1], [0, 1], color="#404040", lw=0.8)
    mae = float(np.abs(seen["p_hat"] - seen["p_exact"]).mean())
    corr = float(np.corrcoef(seen["p_hat"], seen["p_exact"])[0, 1])
    ax.set(xlabel="exact p (final model)", ylabel="historical estimate",
           title=f"MAE {mae:.3f}, Pearson {corr:.3f}", xlim=(0, 1), ylim=(0, 1))
    if metrics is not None:
        ax = axes[0][1]
        sera = method_style("sera").color
        styles = {"history_mae": (sera, "-"), "ideal_mae": (sera, ":"),
                  "history_pearson": ("#404040", "-"), "ideal_pearson": ("#404040", ":")}
        for metric, (color, ls) in styles.items():
            rows = metrics[metrics["metric"] == metric]
            if rows.empty:
                continue
            series = rows.groupby("step")["value"].mean()
            ax.plot(series.index, series.values, color=color, ls=ls,
                    label=metric.replace("_", " "))
        low = min(0.0, float(metrics.loc[metrics["metric"].str.endswith("pearson"),
                                         "value"].min()))
        ax.set(xlabel="step", ylabel="MAE, Pearson (mean over runs)",
               title="estimates along training", ylim=(low - 0.02, 1.0))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=7, ncols=2,
                  frameon=False)
    return fig
