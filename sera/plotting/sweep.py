"""The Pass@1-Pass@K frontier of a learning-rate sweep (sera.studies.sweep).

Used by docs/results.md and notebooks/08_regime_map.ipynb: does a method move the frontier (more
large-K Pass at equal Pass@1), or only slide along it, as a smaller step does?
"""

from __future__ import annotations

import pandas as pd

from sera.plotting.style import legend, line, new_figure, styled


@styled
def plot_frontier(cells: pd.DataFrame, ks=(8, 32), title: str = ""):
    """Per K, a panel of every (method, step) cell's mean Pass@1 (x) against its Pass@K (y), with
    intervals over seeds both ways, one line per method through its steps in order, each point
    labelled with its multiplier of the preset step. cells: sera.studies.sweep.cells."""
    ks = [k for k in ks if k in set(cells["k"])]
    fig, axes = new_figure(ncols=len(ks), width=3.6, height=3.3, squeeze=False)
    for ax, k in zip(axes[0], ks, strict=True):
        for method, part in cells.groupby("method"):
            x = part[part["k"] == 1].set_index("multiplier").sort_index()
            y = part[part["k"] == k].set_index("multiplier").reindex(x.index)
            style = line(method)
            ax.errorbar(100 * x["mean"], 100 * y["mean"],
                        xerr=[100 * (x["mean"] - x["low"]), 100 * (x["high"] - x["mean"])],
                        yerr=[100 * (y["mean"] - y["low"]), 100 * (y["high"] - y["mean"])],
                        marker="o", ms=4, capsize=2, lw=1.4, elinewidth=0.8,
                        ecolor=style["color"] + "80", label=method, **style)
            for mult, xv, yv in zip(x.index, x["mean"], y["mean"], strict=True):
                ax.annotate(f"{mult:g}x", (100 * xv, 100 * yv), textcoords="offset points",
                            xytext=(4, 3), fontsize=7, color=style["color"])
        ax.set(xlabel="held-out Pass@1 (%)", ylabel=f"held-out Pass@{k} (%)")
    legend(axes[0][0], loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
