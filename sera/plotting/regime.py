"""Figures of the regime map (notebooks/08_when_sera_helps.ipynb): where the simulator predicts
that SERA beats MaxRL, the starting difficulty it depends on, and why (mixed groups, budget on
p ~ 0). Inputs are sera.studies.simulate's tables with a `profile` column added."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sera.plotting.style import line, message_figure, new_figure, styled
from sera.tables import with_arm


@styled
def plot_difficulty_profiles(profiles: dict):
    """Histogram of each profile's success probabilities (one panel each), with the share of
    prompts that never succeeded and the mean."""
    names = list(profiles)
    fig, axes = new_figure(ncols=len(names), width=3.0, height=2.6, squeeze=False)
    bins = np.linspace(0, 1, 21)
    for ax, name in zip(axes[0], names, strict=True):
        p = np.asarray(profiles[name], dtype=float)
        ax.hist(p, bins=bins, color="0.45")
        ax.set_title(f"{name}: mean {p.mean():.2f}, {np.mean(p < 0.05):.0%} below 0.05")
        ax.set_xlabel("success probability p before RL")
    axes[0][0].set_ylabel("prompts")
    return fig


def _grid(part: pd.DataFrame, value: str):
    """A (n0 x step) array of `value` with its row and column labels."""
    table = part.pivot_table(index="n0", columns="step", values=value)
    return table.to_numpy(), table.index.to_list(), table.columns.to_list()


@styled
def plot_regime_map(gains: pd.DataFrame, k: int = 1, limit: float | None = None):
    """Predicted SERA - MaxRL Pass@K as heat maps over (steps, N0), one panel per profile;
    each cell prints the gain in percentage points, and a dot marks cells whose interval over
    the repetitions excludes 0. gains: sera.studies.simulate.predicted_gain rows with a profile
    column."""
    part = gains[gains["k"] == k]
    part = part[part["step"] > 0]
    if part.empty:
        return message_figure(f"no simulated gains at K = {k}")
    names = list(dict.fromkeys(part["profile"]))
    limit = limit or max(float(np.nanmax(np.abs(part["gain"]))), 1e-3)
    fig, axes = new_figure(ncols=len(names), width=3.3, height=2.9, squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        mine = part[part["profile"] == name]
        values, rows, columns = _grid(mine, "gain")
        low, _, _ = _grid(mine, "low")
        high, _, _ = _grid(mine, "high")
        image = ax.imshow(values, cmap="RdBu", vmin=-limit, vmax=limit, origin="lower",
                          aspect="auto")
        for i in range(len(rows)):
            for j in range(len(columns)):
                sure = low[i, j] > 0 or high[i, j] < 0
                ax.text(j, i, f"{100 * values[i, j]:+.1f}" + ("\u2022" if sure else ""),
                        ha="center", va="center", fontsize=7,
                        color="white" if abs(values[i, j]) > 0.6 * limit else "black")
        ax.set_xticks(range(len(columns)), labels=[str(c) for c in columns])
        ax.set_yticks(range(len(rows)), labels=[str(r) for r in rows])
        ax.set_xlabel("RL steps")
        ax.set_title(name)
        ax.grid(False)
    axes[0][0].set_ylabel("rollouts per prompt N0")
    bar = fig.colorbar(image, ax=axes[0].tolist(), shrink=0.9)
    bar.set_label(f"SERA - MaxRL, Pass@{k}")
    fig.numbers = {"gain": {name: _grid(part[part["profile"] == name], "gain")[0]
                            for name in names}}
    return fig


@styled
def plot_regime_slider(gains: pd.DataFrame, k: int, n_min: int, difficulty: float):
    """plot_regime_map of one (n_min, difficulty) setting of a precomputed sweep (the slider
    view): gains carries n_min and difficulty columns."""
    part = gains[(gains["n_min"] == n_min) & np.isclose(gains["difficulty"], difficulty)]
    if part.empty:
        return message_figure(f"n_min = {n_min}, difficulty x{difficulty:g} was not simulated")
    limit = float(np.nanmax(np.abs(gains.loc[gains["k"] == k, "gain"]))) or 1e-3
    return plot_regime_map(part, k, limit=limit)


@styled
def plot_regime_diagnostics(gains: pd.DataFrame, k: int = 1):
    """At the last simulated step, per profile against N0: the share of the budget spent on
    prompts with p < 0.05 (left) and the mixed groups per step (right), SERA beside MaxRL."""
    part = gains[gains["k"] == k]
    part = part[part["step"] == part["step"].max()]
    fig, axes = new_figure(ncols=2, width=4.0, height=3.0)
    styles = ("-", "--", ":", "-.")
    for (name, mine), ls in zip(part.groupby("profile", sort=False), styles * 4, strict=False):
        mine = mine.sort_values("n0")
        for method in ("sera", "maxrl"):
            color = line(method)["color"]
            axes[0].plot(mine["n0"], mine[f"{method}_zero_share"], color=color, ls=ls,
                         marker="o", ms=3, label=f"{method}, {name}")
            axes[1].plot(mine["n0"], mine[f"{method}_mixed_groups"], color=color, ls=ls,
                         marker="o", ms=3, label=f"{method}, {name}")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(part["n0"])), labels=[str(n) for n in sorted(set(part["n0"]))])
        ax.minorticks_off()
        ax.set_xlabel("rollouts per prompt N0")
    axes[0].set_ylabel("budget share, prompts with p < 0.05")
    axes[1].set_ylabel("groups with mixed outcomes (share)")
    axes[1].legend(fontsize=6, ncols=2)
    return fig


@styled
def plot_confirmation(table: pd.DataFrame, title: str = ""):
    """Predicted beside measured gain over MaxRL against K (log axis), one panel per arm (and
    one row per point when the table has a point column, its arms side by side from the left,
    sharing the row's scale): the simulator's prediction, written before the runs (grey diamond
    and interval over its repetitions), and the real runs' mean (dot), Student-t 95% interval
    over seeds (bar; none with fewer than 3 seeds) and each seed's paired difference (hollow
    dots). table: sera.studies.confirm.compare(_points) rows."""
    if table.empty:
        return message_figure("no stored runs to compare")
    table = table if "point" in table.columns else table.assign(point="")
    order = {arm_name: i for i, arm_name in enumerate(dict.fromkeys(table["arm"]))}
    rows_of = {name: sorted(dict.fromkeys(part["arm"]), key=order.get)
               for name, part in table.groupby("point", sort=False)}
    fig, axes = new_figure(ncols=max(map(len, rows_of.values())), nrows=len(rows_of),
                           width=3.3, height=2.8, squeeze=False, sharey="row")
    for row, (name, arms) in zip(axes, rows_of.items(), strict=True):
        for ax in row[len(arms):]:  # a point with fewer arms than the widest row
            fig.delaxes(ax)
        for ax, arm_name in zip(row[:len(arms)], arms, strict=True):
            rows = table[(table["point"] == name) & (table["arm"] == arm_name)].sort_values("k")
            _confirmation_panel(ax, rows, arm_name)
            seeds = int(rows["seeds"].max())
            ax.set_title(f"{name + chr(10) if name else ''}{arm_name} - maxrl "
                         f"({seeds} seed{'s' if seeds != 1 else ''})", fontsize=9)
        row[0].set_ylabel("Pass@K gain over MaxRL")
    axes[0][0].legend(loc="best", fontsize=7)
    if title:
        fig.suptitle(title)
    return fig


def _confirmation_panel(ax, rows: pd.DataFrame, arm_name: str) -> None:
    k = rows["k"].to_numpy(dtype=float)
    color = _arm_color(arm_name)
    ax.errorbar(k * 0.9, rows["predicted"], yerr=[rows["predicted"] - rows["predicted_low"],
                                                  rows["predicted_high"] - rows["predicted"]],
                fmt="D", color="0.5", ms=4, lw=1.2, label="predicted (simulator)")
    measured_err = np.vstack([rows["measured"] - rows["low"], rows["high"] - rows["measured"]])
    ax.errorbar(k * 1.1, rows["measured"], yerr=np.nan_to_num(measured_err), fmt="o",
                color=color, ms=5, lw=1.6, label="measured (runs)")
    for kk, values in zip(k, rows["per_seed"], strict=True):
        values = np.atleast_1d(values)
        ax.scatter(np.full(values.size, kk * 1.22), values, s=10, facecolors="none",
                   edgecolors=color, lw=0.7)
    ax.axhline(0, color="#404040", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(k, labels=[str(int(v)) for v in k])
    ax.minorticks_off()
    ax.set_xlabel("K")


SOURCES = {"measured": {"ls": "-", "marker": "o"}, "simulated": {"ls": "--", "marker": "D"}}
"""How the real runs and the simulator's runs of one point are told apart in plot_departure."""


def _is(table: pd.DataFrame, keys: list[str], values: tuple) -> pd.Series:
    """Rows whose columns `keys` hold `values`."""
    return (table[keys] == pd.Series(values, index=keys)).all(axis=1)


def _arm_color(arm_name: str) -> str:
    """The arm's method colour (an arm is a method, or a method with another u_min)."""
    return line(arm_name.split(" ")[0])["color"]


@styled
def plot_departure(curves: pd.DataFrame, bands: pd.DataFrame, title: str = ""):
    """The training prompts of one point, real runs (solid) beside the simulator's (dashed):
    success rate of the prompts visited per epoch, share of rollouts in mixed groups per epoch
    (means over seeds), and each arm's last-epoch success minus MaxRL's per warm-up difficulty
    band with its Student-t interval over seeds. curves: sera.studies.diagnosis.training_curves
    rows, bands: sera.studies.diagnosis.band_gains rows, each with a `source` column (measured,
    simulated)."""
    if curves.empty or bands.empty:
        return message_figure("no training rollouts to compare")
    fig, axes = new_figure(ncols=3, width=3.4, height=2.9, squeeze=False)
    axes = axes[0]
    means = curves.groupby(["source", "arm", "epoch"])[["success", "signal"]].mean()
    for (source, arm_name), part in means.groupby(level=["source", "arm"]):
        epochs = part.index.get_level_values("epoch") + 1
        for ax, value in zip(axes[:2], ("success", "signal"), strict=True):
            ax.plot(epochs, part[value], color=_arm_color(arm_name), ls=SOURCES[source]["ls"],
                    label=f"{arm_name}, {source}")
    axes[0].set_ylabel("training prompts: success rate")
    axes[1].set_ylabel("rollouts in mixed groups (share)")
    for ax in axes[:2]:
        ax.set_xlabel("epoch")
    axes[0].legend(fontsize=6)
    present = set(bands["band"].astype(str))  # bands in their order, empty ones left out
    labels = [b for b in pd.Categorical(bands["band"]).categories if b in present]
    arms = list(dict.fromkeys(bands["arm"]))
    slots = [(arm_name, source) for arm_name in arms for source in SOURCES]
    width = 0.8 / len(slots)
    for i, (arm_name, source) in enumerate(slots):
        part = bands[(bands["arm"] == arm_name) & (bands["source"] == source)]
        part = part.set_index("band").reindex(labels)
        x = np.arange(len(labels)) - 0.4 + width * (i + 0.5)
        err = np.vstack([part["gain"] - part["low"], part["high"] - part["gain"]])
        axes[2].errorbar(x, part["gain"], yerr=np.nan_to_num(err), fmt=SOURCES[source]["marker"],
                         color=_arm_color(arm_name), ms=4, lw=1.2,
                         mfc="white" if source == "simulated" else _arm_color(arm_name),
                         label=f"{arm_name}, {source}")
    axes[2].axhline(0, color="#404040", lw=0.8)
    axes[2].set_xticks(np.arange(len(labels)), labels=labels, fontsize=7)
    axes[2].set_xlabel("warm-up success (32 samples)")
    axes[2].set_ylabel("last epoch: success - MaxRL's")
    axes[2].legend(fontsize=6)
    if title:
        fig.suptitle(title)
    return fig


DRIFT_LABELS = {"val_pass": "held-out Pass@{k}", "response_length": "response length (tokens)",
                "token_entropy": "token entropy (nats)", "train_reward": "training reward"}


@styled
def plot_drift(metrics: pd.DataFrame, panels=(("val_pass", 1), ("response_length", None)),
               smooth: int = 20, title: str = ""):
    """Logged metrics over the steps of a point's runs, one panel per (metric, k) of `panels`:
    each seed thin, the mean over seeds thick, one colour per arm. Metrics logged every step
    are smoothed by a rolling mean over `smooth` steps; evaluations are drawn as logged."""
    metrics = with_arm(metrics)
    fig, axes = new_figure(ncols=len(panels), width=3.4, height=2.9, squeeze=False)
    for ax, (metric, k) in zip(axes[0], panels, strict=True):
        part = metrics[metrics["metric"] == metric]
        if k is not None:
            part = part[part["k"] == k]
        if part.empty:
            ax.text(0.5, 0.5, f"no {metric} logged", ha="center", transform=ax.transAxes)
            continue
        table = part.pivot_table(index="step", columns=["arm", "seed"], values="value")
        if len(table) > 2 * smooth:  # logged every step
            table = table.rolling(smooth, min_periods=1).mean()
        for arm_name in dict.fromkeys(table.columns.get_level_values("arm")):
            runs = table[arm_name]
            ax.plot(runs.index, runs.to_numpy(), color=_arm_color(arm_name), lw=0.4, alpha=0.35)
            ax.plot(runs.index, runs.mean(axis=1), color=_arm_color(arm_name), lw=1.8,
                    label=f"{arm_name} ({runs.shape[1]} seeds)")
        ax.set_xlabel("step")
        ax.set_ylabel(DRIFT_LABELS.get(metric, metric).format(k=k))
    drawn = [ax for ax in axes[0] if ax.lines]
    if drawn:
        drawn[0].legend(fontsize=6)
    if title:
        fig.suptitle(title)
    return fig


@styled
def plot_arms(table: pd.DataFrame, ks=(1, 8), title: str = ""):
    """Each arm's gain over MaxRL at each K (one panel per K), arms down the page: the mean over
    seeds (dot) with its Student-t 95% interval (bar; none with fewer than 3 seeds), each seed's
    paired difference (hollow dots) and the simulator's prediction where the arm has one (grey
    diamond). table: sera.studies.confirm.compare rows of one point, or of several with a
    `point` column (each arm then labelled "point: arm", each against its own point's MaxRL)."""
    table = table[table["k"].isin(ks)]
    if table.empty:
        return message_figure("no stored runs to compare")
    keys = ["point", "arm"] if "point" in table.columns else ["arm"]
    rows_of = list(dict.fromkeys(map(tuple, table[keys].to_numpy())))
    fig, axes = new_figure(ncols=len(ks), width=3.6, height=0.45 * len(rows_of) + 1.2,
                           squeeze=False, sharey=True)
    for ax, k in zip(axes[0], ks, strict=True):
        for y, key in enumerate(rows_of):
            rows = table[_is(table, keys, key) & (table["k"] == k)]
            if rows.empty:
                continue
            row = rows.iloc[0]
            color = _arm_color(key[-1])
            seeds = np.atleast_1d(row["per_seed"])
            ax.scatter(seeds, np.full(seeds.size, y + 0.22), s=10, facecolors="none",
                       edgecolors=color, lw=0.7)
            if np.isfinite(row["low"]):
                ax.plot([row["low"], row["high"]], [y, y], color=color, lw=2)
            ax.plot(row["measured"], y, "o", color=color, ms=6)
            if np.isfinite(row["predicted"]):
                ax.plot(row["predicted"], y - 0.22, "D", color="0.5", ms=4)
        ax.axvline(0, color="#404040", lw=0.8)
        ax.set_title(f"Pass@{k}", fontsize=9)
        ax.set_xlabel("gain over MaxRL")
    seeds = [int(table[_is(table, keys, key)]["seeds"].max()) for key in rows_of]
    axes[0][0].set_yticks(range(len(rows_of)),
                          labels=[f"{': '.join(key)} ({n} seeds)"
                                  for key, n in zip(rows_of, seeds, strict=True)])
    axes[0][0].invert_yaxis()
    if title:
        fig.suptitle(title)
    return fig
