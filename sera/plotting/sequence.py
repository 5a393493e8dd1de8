"""Figures of the sequence studies (maze, math), drawn from the runs' tables, and the maze's paths.

Used by notebooks/05_maze_navigation.ipynb and notebooks/07_math_reasoning.ipynb.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sera.plotting.style import count_ticks, method_style, new_figure, styled

DIAGNOSTICS = [("train_reward", "training reward"), ("mixed_groups", "mixed groups"),
               ("token_entropy", "token entropy"), ("response_length", "response length"),
               ("grad_norm", "gradient norm"), ("allocation_spread", "allocation spread")]
AGG_STYLE = {"token-mean": "-", "seqnorm": "--"}


def _trace(grid: np.ndarray, tokens) -> list[tuple[int, int]]:
    """Cells visited by the moves before DONE, stopping at the first wall or edge."""
    from sera.tasks.maze import MOVES

    r, c = 1, 1
    cells = [(r, c)]
    for token in tokens:
        if token == "DONE" or token not in MOVES:
            break
        dr, dc = MOVES[token]
        r, c = r + dr, c + dc
        cells.append((r, c))
        if not (0 <= r < grid.shape[0] and 0 <= c < grid.shape[1]) or grid[r, c] == 1:
            break
    return cells


@styled
def plot_maze_paths(grid: np.ndarray, answers: list[list[str]], rewards, title: str = ""):
    """A maze (walls dark) with sampled answers drawn on it: correct paths green, failures red
    (each ends where it stopped, hit a wall or left the grid)."""
    fig, ax = new_figure(width=4.8, height=3.4)
    ax.imshow(grid, cmap="Greys", vmin=0, vmax=1.4)
    rng = np.random.default_rng(0)
    for tokens, reward in zip(answers, rewards, strict=True):
        cells = np.array(_trace(grid, tokens), dtype=float)
        cells += rng.uniform(-0.12, 0.12, size=2)  # keep overlapping paths apart
        color = "#2ca02c" if reward > 0 else "#d62728"
        ax.plot(cells[:, 1], cells[:, 0], color=color, lw=1.4, alpha=0.7)
    ax.plot(1, 1, "o", color="#1f77b4", ms=8, label="start")
    ax.plot(grid.shape[1] - 2, grid.shape[0] - 2, "*", color="#ff7f0e", ms=12, label="goal")
    ax.plot([], [], color="#2ca02c", label=f"correct ({int(np.sum(rewards))})")
    ax.plot([], [], color="#d62728", label=f"failed ({len(rewards) - int(np.sum(rewards))})")
    ax.set(xticks=[], yticks=[], title=title)
    ax.grid(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    return fig


def _runs(table: pd.DataFrame):
    return table.groupby(["method", "agg"], sort=False)


@styled
def plot_sequence_validation(metrics: pd.DataFrame, ks=(1, 16)):
    """Validation Pass@K on held-out prompts along RL training (mean over seeds), per method
    (colour) and loss aggregation (solid token-mean, dashed seqnorm)."""
    fig, axes = new_figure(ncols=len(ks), width=3.7, height=3.0, squeeze=False)
    for ax, k in zip(axes[0], ks, strict=True):
        rows_k = metrics[(metrics["metric"] == "val_pass") & (metrics["k"] == k)]
        for (method, agg), rows in _runs(rows_k):
            series = rows.groupby("step")["value"].mean()
            style = method_style(method)
            ax.plot(series.index, series.values, color=style.color, ls=AGG_STYLE.get(agg, "-"),
                    marker="o", ms=3, label=f"{style.label} {agg}")
        ax.set(xlabel="RL step", ylabel=f"validation Pass@{k}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, handlelength=3.5)
    return fig


@styled
def plot_sequence_profile(profile: pd.DataFrame, gains: pd.DataFrame | None = None,
                      subject: str = "mazes"):
    """Final Pass@K against K per method and aggregation, mean over seeds (left) and, when
    given, SERA - MaxRL per aggregation (right): each seed's paired difference over the
    held-out prompts (hollow dots) and the Student-t 95% interval over seeds (none with fewer
    than 3 seeds). profile: sera.results.passk_profile; gains:
    sera.results.paired_gain; subject names the held-out prompts on the axis."""
    fig, axes = new_figure(ncols=2 if gains is not None else 1, width=3.7, height=3.1,
                           squeeze=False)
    ax = axes[0][0]
    for (method, agg), rows in profile.groupby(["method", "agg"], sort=False):
        rows = rows.groupby("k", as_index=False)["pass@k"].mean()
        style = method_style(method)
        ax.plot(rows["k"], rows["pass@k"], color=style.color, ls=AGG_STYLE.get(agg, "-"),
                marker="o", ms=3, label=f"{style.label} {agg}")
    ax.set(xscale="log", xlabel="K", ylabel=f"final Pass@K (held-out {subject})")
    count_ticks(ax, profile["k"].max(), which="x")
    ax.legend(loc="lower right", fontsize=7, handlelength=3.5)
    if gains is not None:
        ax = axes[0][1]
        color = method_style("sera").color
        for agg, rows in gains.groupby("agg", sort=False):
            x = rows["k"].to_numpy() * (1.08 if agg == "seqnorm" else 1.0)
            ax.errorbar(x, rows["gain"],
                        yerr=[rows["gain"] - rows["low"], rows["high"] - rows["gain"]],
                        color=color, ls=AGG_STYLE.get(agg, "-"), marker="o", ms=3, capsize=2,
                        label=agg)
            per_seed = rows["per_seed"] if "per_seed" in rows else [()] * len(rows)
            for xk, values in zip(x, per_seed, strict=True):
                ax.scatter(np.full(len(values), xk * 1.03), values, s=9, facecolors="none",
                           edgecolors=color, lw=0.7)
        seeds = int(gains["seeds"].max()) if "seeds" in gains else 0
        ax.axhline(0, color="#404040", lw=0.8)
        ax.set(xscale="log", xlabel="K", ylabel="SERA - MaxRL",
               title=f"{seeds} seeds" + (": t 95% over seeds" if seeds >= 3
                                         else ": too few for an interval"))
        count_ticks(ax, gains["k"].max(), which="x")
        ax.legend(loc="best", fontsize=7, handlelength=3.5)
    return fig


@styled
def plot_allocation_vs_estimate(allocations: pd.DataFrame, n0: int):
    """SERA's rollouts per prompt against the prompt's historical success estimate, over all
    its allocated batches (darker: later steps), with the uniform count n0 for reference."""
    fig, ax = new_figure(width=4.2, height=3.2)
    jitter = np.random.default_rng(0).uniform(-0.2, 0.2, len(allocations))
    points = ax.scatter(allocations["estimate"], allocations["rollouts"] + jitter,
                        c=allocations["step"], cmap="viridis", s=6, alpha=0.6)
    ax.axhline(n0, color=method_style("maxrl").color, ls=":", label=f"uniform N0 = {n0}")
    ax.set(xlabel="historical success estimate", ylabel="rollouts N_q", yscale="log")
    ticks = [t for t in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
             if t <= max(allocations["rollouts"].max(), n0) * 1.2]
    ax.set_yticks(ticks, labels=[str(t) for t in ticks])
    ax.minorticks_off()
    fig.colorbar(points, ax=ax, label="RL step")
    ax.legend(loc="upper right")
    return fig


@styled
def plot_training_diagnostics(table: pd.DataFrame):
    """Training reward, mixed groups, token entropy, response length, gradient norm and
    allocation spread along RL training, one line per method and aggregation."""
    fig, axes = new_figure(ncols=3, nrows=2, width=2.9, height=2.4)
    for ax, (metric, title) in zip(axes.ravel(), DIAGNOSTICS, strict=True):
        for (method, agg), rows in _runs(table[table["metric"] == metric]):
            series = rows.groupby("step")["value"].mean().rolling(5, min_periods=1).mean()
            ax.plot(series.index, series.values, color=method_style(method).color,
                    ls=AGG_STYLE.get(agg, "-"), label=f"{method_style(method).label} {agg}")
        ax.set(title=title, xlabel="RL step")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=5)
    return fig
