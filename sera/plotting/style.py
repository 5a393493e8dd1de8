"""One figure style and one way to save figures: PNG and PDF, byte-identical from run to run."""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import matplotlib.style
import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.container import Container
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from sera._checks import registry
from sera.baselines import COMPARED


@dataclass(frozen=True)
class Style:
    """How one method is drawn in every figure."""

    color: str
    ls: str
    label: str
    family: str
    """sera, maxrl, estimator (another advantage), rule (a one-shot allocation rule), sequential
    (a rule that samples in rounds) or allocation (sera.allocate's own names)."""


def _rule_styles():
    """Each registered rule (sera.baselines.COMPARED) in its colour, solid, and its `-maxrl`
    variant dashed."""
    for rule in COMPARED.values():
        yield rule.name, Style(rule.colour, "-", rule.name, "rule")
        if rule.maxrl_variant:
            yield f"{rule.name}-maxrl", Style(rule.colour, "--", f"{rule.name}-maxrl", "rule")


# Every method of sera.methods.METHODS and sera.allocation.METHODS, in legend order. A
# rule and its `-maxrl` variant share a colour; the variant is dashed. The SERA family is red and
# told apart by lightness and line: the paper's sera solid, sera-oracle light and dash-dotted,
# the package's rate-rule variant orange-red and dashed, with its strong safeguard dark and dotted,
# the remedy candidates deep red: the evidence-scaled step dashed, the capped lone success dotted
# and the evidence-held waterline dash-dotted.
STYLES = registry([
    ("ce", Style("#404040", "-", "ce", "estimator")),
    ("maxrl", Style("#1f77b4", "-", "maxrl", "maxrl")),
    ("sera-oracle", Style("#ff9896", "-.", "sera-oracle", "sera")),
    ("sera", Style("#d62728", "-", "sera", "sera")),
    ("sera-rate", Style("#f16913", "--", "sera-rate", "sera")),
    ("sera-rate-safeguard", Style("#67000d", ":", "sera-rate-safeguard", "sera")),
    ("sera-evidence-step", Style("#a50f15", "--", "sera-evidence-step", "sera")),
    ("sera-capped", Style("#a50f15", ":", "sera-capped", "sera")),
    ("sera-evidence-waterline", Style("#a50f15", "-.", "sera-evidence-waterline", "sera")),
    ("grpo", Style("#2ca02c", "-", "grpo", "estimator")),
    ("rloo", Style("#98df8a", "-", "rloo", "estimator")),
    ("reweight", Style("#9467bd", "-", "reweight", "maxrl")),
    ("rl2ml-0.5-reconstruction", Style("#6baed6", "-", "rl2ml-0.5-reconstruction", "estimator")),
    ("rl2ml-2-reconstruction", Style("#08519c", "-", "rl2ml-2-reconstruction", "estimator")),
    *_rule_styles(),
    ("cero-reconstruction", Style("#393b79", "-", "cero-reconstruction", "rule")),
    ("dapo", Style("#ff7f0e", "-", "dapo", "sequential")),
    ("dapo-maxrl", Style("#ff7f0e", "--", "dapo-maxrl", "sequential")),
    ("dars-hw-2stage", Style("#9edae5", "-", "dars-hw-2stage", "sequential")),
    ("sara-reconstruction", Style("#637939", "-", "sara-reconstruction", "sequential")),
    ("paper", Style("#ff7f0e", "-", "paper", "allocation")),
    ("exact", Style("#8c1c13", "-", "exact", "allocation")),
    ("uniform", Style("#1f77b4", "-", "uniform", "allocation")),
], "method style")


def method_style(name: str) -> Style:
    """The style of a method (or of sera.allocate's paper, exact, uniform). An unknown name is an
    error rather than a grey line: add it to STYLES."""
    if name not in STYLES:
        raise KeyError(f"no style for method {name!r}: add it to sera.plotting.style.STYLES "
                       f"(known: {', '.join(STYLES)})")
    return STYLES[name]


def line(name: str) -> dict:
    """color and ls of a method, as keyword arguments for Axes.plot."""
    style = method_style(name)
    return {"color": style.color, "ls": style.ls}


RC = {
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "legend.fontsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.6,
    "pdf.fonttype": 42,
    "svg.hashsalt": "sera",
}

DEFAULT_FOLDER = Path(os.environ.get("SERA_FIGURES", "figures"))

# What matplotlib writes into a file besides the picture (a date, which SOURCE_DATE_EPOCH only
# fixes, and its own version) is left out, so that equal figures give equal bytes.
METADATA = {"png": {"Software": None},
            "pdf": {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None}}


class SeraFigure(Figure):
    """A matplotlib Figure that shows itself as an image in any Jupyter front end: it renders
    its own PNG, so it needs neither pyplot nor the inline backend to be loaded."""

    DISPLAY_DPI = 80  # on screen; savefig writes 150. Fewer pixels redraw a slider faster.
    saved_png: bytes | None = None  # what sera.plotting.savefig last wrote (see there)
    # The numbers the figure shows (counts, a level, kappa), by name, as the plot function
    # computed them: what a page that draws the figure itself shows and can be checked against.
    numbers: dict = {}

    def _repr_png_(self):
        """The PNG a notebook shows, at DISPLAY_DPI. A figure unchanged since savefig shows the
        PNG it wrote, at the same size on the page, instead of being drawn a third time."""
        if self.saved_png is not None and not self.stale:
            width, height = self.get_size_inches() * self.DISPLAY_DPI
            return self.saved_png, {"width": round(width), "height": round(height)}
        return self.drawn_png()

    def drawn_png(self) -> bytes:
        """The figure drawn now as a PNG at DISPLAY_DPI."""
        buffer = io.BytesIO()
        with mpl.rc_context(RC):
            self.savefig(buffer, format="png", dpi=self.DISPLAY_DPI, metadata=METADATA["png"])
        return buffer.getvalue()


def message_figure(text: str, width: float = 6.0, height: float = 2.0):
    """A figure that only says something: what a slider shows for a setting it cannot draw
    (an infeasible budget, say), in place of a traceback."""
    fig, ax = new_figure(width=width, height=height)
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=10,
            transform=ax.transAxes)
    fig.numbers = {"message": text}
    return fig


def headroom(value: float) -> float:
    """The smallest of 1, 1.5, 2, 3, 4, 5, 6 and 8 times a power of ten at or above value: an
    axis limit that moves in a few steps, not with every change of the data, so that a slider's
    figure keeps its axes (the frames of a slider's track share them) while the data move within
    them."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(step * scale for step in (1, 1.5, 2, 3, 4, 5, 6, 8, 10)
                if step * scale >= value * (1 - 1e-12))


def bars(ax, x, height, width: float = 0.8, color=None, alpha=None, label=None):
    """Bars of `height` centred at `x`, drawn as one PolyCollection rather than one Rectangle
    each (Axes.bar): a batch of 128 prompts is one artist, which a slider redraws many times a
    second. They rest on zero, as Axes.bar's do (no margin below them)."""
    x, height = np.asarray(x, dtype=float), np.asarray(height, dtype=float)
    left, right, base = x - width / 2, x + width / 2, np.zeros_like(x)
    corners = np.stack([np.column_stack(c) for c in
                        ((left, base), (left, height), (right, height), (right, base))], axis=1)
    collection = PolyCollection(corners, facecolors=color, edgecolors="none", alpha=alpha,
                                label=label)
    collection.sticky_edges.y.append(0.0)
    ax.add_collection(collection, autolim=True)
    ax.autoscale(enable=None)  # the view follows when next needed (Axes.bar autoscales on
    return collection          # every call, which a slider's frame would pay for)


def integer_ticks(axis) -> None:
    """Whole-number ticks only (for counts and indices)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def count_ticks(ax, largest: float, which: str = "y") -> None:
    """Readable ticks 1, 2, 4, 8, ... up to `largest` on a log-scaled count axis."""
    ticks = [t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
             if t <= largest * 1.05]
    if which == "y":
        ax.set_yticks(ticks, labels=[str(t) for t in ticks])
    else:
        ax.set_xticks(ticks, labels=[str(t) for t in ticks])
    ax.minorticks_off()


def styled(plot):
    """Draw inside the house style. Figures are plain matplotlib Figures, not pyplot ones, so
    no global figure list grows; Jupyter displays them all the same."""

    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        with mpl.rc_context(RC):
            return plot(*args, **kwargs)

    return wrapper


_TARGETS: list = []  # figures that new_figure redraws into, innermost last (see drawing_into)


@contextlib.contextmanager
def drawing_into(fig):
    """Inside this block new_figure redraws into `fig` (keeping its size) instead of making a
    figure: a live slider (sera.teaching.widgets) redraws the one figure it shows through
    the same plot functions as the figure cells. A plot that asks for the grid of axes it asked
    for last time gets the same axes back, emptied of what was drawn in them (see `_emptied`), so
    that their ticks and frames need not be made again."""
    _TARGETS.append(fig)
    try:
        yield fig
    finally:
        _TARGETS.pop()


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.2, **kw):
    """A figure in the house style: (fig, axes); inside drawing_into, that figure, its axes
    emptied when the same grid was asked for last time, else made anew."""
    with mpl.rc_context(RC):
        grid = (ncols, nrows, width, height, repr(sorted(kw.items())))
        if not _TARGETS:
            fig = SeraFigure(figsize=(width * ncols, height * nrows), layout="constrained")
        else:
            fig = _TARGETS[-1]
            kept = getattr(fig, "_sera_grid", None)
            fig.numbers = {}
            if kept is not None and kept[0] == grid and kept[2] == fig.axes:
                for ax in kept[2]:
                    _emptied(ax)
                return fig, kept[1]
            for ax in fig.axes:  # Figure.clear would clear each axes before dropping it: slow
                fig.delaxes(ax)
            fig.clear()
        axes = fig.subplots(nrows, ncols, **kw)
        fig._sera_grid = (grid, axes, list(fig.axes))
    return fig, axes


def _emptied(ax) -> None:
    """Take out what a plot drew in ax (lines, bars, texts, legend, titles, labels, its data
    limits and colour cycle) and leave the frame, the axis objects and their tick machinery,
    which cost most of a redraw to make. The plot then sets its limits, scales and ticks again,
    as it does on a fresh axes."""
    for artist in [*ax.lines, *ax.patches, *ax.collections, *ax.texts, *ax.images, *ax.artists,
                   *ax.tables]:
        artist.remove()
    ax.containers.clear()
    # the legend is put aside, not removed: `legend` shows it again if the plot asks for one
    # that looks the same
    ax._sera_spare_legend, ax.legend_ = ax.legend_, None
    for loc in ("center", "left", "right"):
        ax.set_title("", loc=loc)
    ax.set(xlabel="", ylabel="")
    ax.set_axis_on()
    ax.set_prop_cycle(None)
    ax.dataLim.set_points(Bbox.null().get_points())
    ax.ignore_existing_data_limits = True
    ax.set_autoscale_on(True)


def legend(ax, **kwargs):
    """ax.legend(**kwargs): a legend of the labelled artists in ax. Inside drawing_into, the
    legend ax showed last time comes back when `kwargs` and every entry (label and look of its
    artist) are the same: a slider's figure seldom changes its legends, and making one is a
    large part of a frame (benchmarks/slider_frames.py). Its position is worked out when drawn,
    as a new legend's would be."""
    if not _TARGETS:
        return ax.legend(**kwargs)
    handles, labels = ax.get_legend_handles_labels()
    key = (repr(sorted(kwargs.items())), tuple(labels),
           tuple(tuple(map(looks, _drawn(handle))) for handle in handles))
    spare, ax._sera_spare_legend = getattr(ax, "_sera_spare_legend", None), None
    if spare is not None and getattr(spare, "_sera_key", None) == key:
        ax.legend_ = spare
    else:
        ax.legend(handles, labels, **kwargs)._sera_key = key
    return ax.legend_


def _drawn(handle) -> list:
    """The artists a legend entry's handle stands for (a container, as errorbar makes: its
    parts)."""
    return [*handle.get_children()] if isinstance(handle, Container) else [handle]


# What an artist looks like, as far as its getters tell (those it lacks are skipped); a line's
# dash pattern has no public getter, so it is read from its attribute.
LOOK = ("text", "fontproperties", "color", "facecolor", "edgecolor", "linestyle", "linewidth",
        "drawstyle", "marker", "markersize", "markeredgewidth", "markerfacecolor",
        "markeredgecolor", "fillstyle", "sizes", "alpha", "hatch", "boxstyle", "rotation",
        "visible")


def looks(artist) -> tuple:
    """The look of one artist (its type, dash pattern and the LOOK getters it has), as values
    two artists that draw alike share."""
    def value(thing) -> str:  # objects without a value repr (fonts, box styles): their fields
        text = repr(thing)
        return repr(vars(thing)) if " object at 0x" in text else text

    return (type(artist).__name__, getattr(artist, "_unscaled_dash_pattern", None),
            *(value(getattr(artist, f"get_{name}")()) for name in LOOK
              if hasattr(artist, f"get_{name}")))


def savefig(fig, name: str, folder: str | os.PathLike | None = None) -> list[Path]:
    """Write fig as name.png and name.pdf into folder (default: $SERA_FIGURES or ./figures).

    The same figure gives the same bytes on every run, so a rerun notebook changes a tracked
    figure only when its picture changes: dates and software versions are left out of the files
    (METADATA), and they are written with matplotlib's defaults plus RC whatever matplotlibrc,
    style or notebook settings are in force (a user's savefig.bbox, transparency or PDF
    compression would change the files). Returns the written paths.
    """
    if not name or any(c in name for c in "/\\. "):
        raise ValueError(f"name must be a plain file stem like 'kappa_curves', got {name!r}")
    folder = Path(folder) if folder is not None else DEFAULT_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png", folder / f"{name}.pdf"]
    with mpl.style.context("default"), mpl.rc_context(RC):
        png = io.BytesIO()
        fig.savefig(png, format="png", metadata=METADATA["png"])
        paths[0].write_bytes(png.getvalue())
        fig.savefig(paths[1], format="pdf", metadata=METADATA["pdf"])
    if isinstance(fig, SeraFigure):
        # Shown as saved until an artist changes: any change marks the figure stale again.
        fig.saved_png, fig.stale = png.getvalue(), False
    return paths
