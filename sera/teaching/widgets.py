"""The notebooks' interactive controls: labelled sliders around the sera.plotting functions.

Each explorer is a box of sliders above one live matplotlib figure (drawn by Agg in the kernel,
shown as a PNG in an ipywidgets Image): moving a slider redraws that figure in place, through the
same plot function that the figure cell calls with fixed values (sliders only display), while the
slider is dragged. Sliders whose ranges depend on each other are linked (N_min <= N0 <= N_max), and
a setting a figure cannot draw shows a short message, never a traceback. Used by notebooks 01-03
and 08; needs ipywidgets (the notebooks extra).
"""

from __future__ import annotations

import asyncio
import base64
import gc
import io

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.legend import Legend
from matplotlib.text import Text
from traitlets import CFloat, CInt

import sera.plotting as splot
from sera.plotting.style import SeraFigure, drawing_into, looks

LABEL = {"description_width": "initial"}
WIDTH = "600px"  # room for a long label and a usable slider track
SETTLE = 0.15  # seconds a slider rests before its figure is laid out again
# The explorer on a layer of its own, so that the page repaints only the explorer while a slider
# moves, not the whole notebook around it (in a measured drag, a quarter of the browser's time).
CONTAIN = "<style>.sera-explorer { contain: content; will-change: transform; }</style>"
PICTURES = 64  # looks an explorer keeps pictures of (see _paint); a new one past them makes room
_LIVE: dict = {}  # the explorer each plot function shows now; a rerun cell closes the old one


# A slider's moves are not echoed back to the page. ipywidgets echoes every value a page sends
# (so that other views of the widget follow it): a message each way per move of the hand, some
# sixty a second, on the cores that draw the frames. Without the echo, another view of the
# same explorer (the cell shown twice, a second tab) keeps its slider where it was while the
# figure still follows; in three back-to-back runs of notebook 02 in tests/test_browser.py
# the drags ran at 14.9-15.9 frames a second (median) against 14.1-15.0 with it.
class FloatSlider(widgets.FloatSlider):
    value = CFloat(0.0, help="Float value").tag(sync=True, echo_update=False)


class IntSlider(widgets.IntSlider):
    value = CInt(0, help="Int value").tag(sync=True, echo_update=False)


def _float(value, low, high, step, label):
    """A labelled slider. Continuous quantities get steps of about 1/100 to 1/250 of their
    range, so that a hand crossing the track meets more stops than the figure has frames."""
    return FloatSlider(value=value, min=low, max=high, step=step, description=label,
                       style=LABEL, layout=widgets.Layout(width=WIDTH))


def _int(value, low, high, label):
    return IntSlider(value=value, min=low, max=high, description=label, style=LABEL,
                     layout=widgets.Layout(width=WIDTH))


class Explorer(widgets.VBox):
    """Sliders (`controls`, by argument name) above `figure`, shown live in `image`; `draws`
    counts the redraws and `blits` those that repainted only the axes' contents. Displayed, it
    also carries the initial figure as a PNG, which is what a front end without widgets (and the
    static site) shows.

    A frame reaches the page as one PNG of the whole figure in an Image widget: the page decodes
    and shows it, nothing more. (An ipympl canvas also encodes its last frame back to a data URL
    in the page on every frame and copies it between two canvases, which tests/test_browser.py
    measured slower in a drag.) In the page a slider sends its next value only once the kernel
    has answered the last (ipywidgets keeps one message in flight), so the page's frame rate is
    at most one per round trip, whatever a frame costs here."""

    def __init__(self, plot, **controls):
        self.plot, self.controls, self.draws, self.blits = plot, controls, 0, 0
        self._queued, self._settle, self._collector = False, None, None
        self._background = self._backdrop = None
        self._pictures: dict = {}  # legends and titles as painted, by their look (see _paint)
        self.figure = plot(**self.values())
        self.figure.set_dpi(SeraFigure.DISPLAY_DPI)  # the size the static PNG has
        width, height = FigureCanvasAgg(self.figure).get_width_height()
        self.figure.canvas.draw()
        # at the figure's own size in pixels (a box would stretch it to its own width; a fixed
        # box lays nothing out again when a frame arrives); a pane narrower than the figure
        # scales it down whole inside that box (object-fit), never squashed
        self.image = widgets.Image(value=_png(self.figure.canvas), format="png",
                                   layout=widgets.Layout(width=f"{width}px", height=f"{height}px",
                                                         object_fit="contain",
                                                         align_self="flex-start"))
        super().__init__([*controls.values(), self.image, widgets.HTML(CONTAIN)])
        self.add_class("sera-explorer")
        for control in controls.values():
            # continuous_update is on: the figure follows the hand while a slider moves
            control.observe(self.redraw, "value")

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def redraw(self, _=None) -> None:
        """Redraw for the sliders' values: at once without a kernel loop (a test, a
        script), else as the next frame, so that the kernel answers the slider at once and
        the moves that arrive while a frame is drawn make one frame, at the latest values."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._frame(None)
            return
        if not self._queued:
            self._queued = True
            loop.call_soon(self._frame, loop)

    def _frame(self, loop) -> None:
        """Draw the figure for the sliders' values and send it to the page. While a slider
        moves (a kernel loop runs), the plot redraws into the axes it drew last time and,
        when their limits, ticks and labels are unchanged, only what was drawn in them is
        painted over the saved background and sent (blitting: the axes' ticks and labels
        cost most of a full draw); otherwise the figure is drawn whole, keeping the last
        layout (the constrained layout costs half a frame). Python's collector runs once a
        frame, when the last frame's artists have just become garbage (left to itself it
        stops every few frames for a sweep of the whole kernel). Once the sliders
        rest for SETTLE seconds the figure is laid out and drawn whole again."""
        self._queued = False
        figure = self.figure
        laid_out = [ax.get_position() for ax in figure.axes]
        if loop is not None and self._collector is None:
            self._collector = gc.isenabled()
            gc.disable()
        with drawing_into(figure):
            try:
                self.plot(**self.values())
            except ValueError as error:  # a setting the plot rejects: say why, no traceback
                splot.message_figure(str(error))
        self.draws += 1
        if loop is None:
            self._rest()
            return
        gc.collect(0)
        backdrop = _backdrop(figure)
        if self._background is not None and backdrop == self._backdrop:
            _blit(figure, self._background, self._pictures)
            self.blits += 1
        else:
            self._background = _draw_behind(figure, laid_out, self._pictures)
            self._backdrop = backdrop
        if self._settle is not None:
            self._settle.cancel()
        self._show()
        self._settle = loop.call_later(SETTLE, self._rest)

    def _show(self) -> None:
        """Send the canvas as it stands to the page, as a PNG."""
        self.image.value = _png(self.figure.canvas)

    def _rest(self) -> None:
        self._settle = self._background = self._backdrop = None
        for artist in _moving(self.figure):
            artist.set_animated(False)
        self.figure.canvas.draw()
        self._show()
        self._release_collector()

    def _release_collector(self) -> None:
        if self._collector:
            gc.enable()
        self._collector = None

    def close(self) -> None:
        """Close the sliders, the image and the widgets they hold (layouts, styles) too:
        closing a box alone leaves them registered in the kernel."""
        if self._settle is not None:
            self._settle.cancel()
        self._release_collector()
        _close_children(self)
        super().close()

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:
            # the PNG the page was last sent: the figure is not drawn again for it
            bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        return bundle


def _png(canvas) -> bytes:
    """The canvas's pixels as a PNG, compressed fast (level 1: a few milliseconds a frame)."""
    from PIL import Image

    with io.BytesIO() as png:
        Image.fromarray(np.asarray(canvas.buffer_rgba())).save(png, format="png",
                                                                compress_level=1)
        return png.getvalue()


def _moving(figure) -> list:
    """What a plot drew in the figure's axes (lines, bars, texts, titles, legends), in the order
    a full draw paints them: what a blitted frame paints over the saved background."""
    moving = []
    for ax in sorted(figure.axes, key=lambda a: a.get_zorder()):
        frame = {ax.patch, ax.xaxis, ax.yaxis, *ax.spines.values()}
        moving += sorted((a for a in ax.get_children() if a not in frame),
                         key=lambda a: a.get_zorder())
    return moving


def _backdrop(figure) -> list:
    """What the saved background shows: each axes' place, limits, scales, ticks and labels, and
    the figure's own texts. A frame whose backdrop equals the last one's can be blitted."""
    def ticks(axis):
        values = axis.get_majorticklocs()
        return tuple(values), tuple(axis.get_major_formatter().format_ticks(values))

    return [(tuple(ax.get_position().bounds), ax.get_xlim(), ax.get_ylim(), ax.get_xscale(),
             ax.get_yscale(), ax.get_xlabel(), ax.get_ylabel(), ax.axison, ticks(ax.xaxis),
             ticks(ax.yaxis)) for ax in figure.axes] + \
        [text.get_text() for text in figure.texts] + [len(figure.legends)]


def _draw_behind(figure, laid_out, pictures: dict):
    """Draw the figure whole without its axes' contents, keeping the axes at `laid_out` (their
    positions before the frame, one per axes) instead of laying the figure out again; save that
    background and paint the contents over it. Returns the background."""
    moving = _moving(figure)
    for artist in moving:
        artist.set_animated(True)
    canvas, engine = figure.canvas, figure.get_layout_engine()
    if len(laid_out) == len(figure.axes):
        figure.set_layout_engine("none")
        for ax, box in zip(figure.axes, laid_out, strict=True):
            ax.set_position(box)
    canvas.draw()
    figure.set_layout_engine(engine)
    for ax in figure.axes:  # set_position took them out of the layout; the axes are kept
        ax.set_in_layout(True)
    background = canvas.copy_from_bbox(figure.bbox)
    _paint(figure, moving, pictures)
    return background


def _blit(figure, background, pictures: dict) -> None:
    """Paint the axes' contents over the saved background."""
    canvas = figure.canvas
    canvas.restore_region(background)
    _paint(figure, _moving(figure), pictures)


def _paint(figure, moving, pictures: dict) -> None:
    """Paint `moving` in order onto the canvas. A legend, and a plain text (a title) drawn
    again unchanged, is painted from its picture: the RGBA pixels it gave when drawn alone on a
    transparent canvas, kept in `pictures` by its look (see _look), to within one level of 255
    of the artist drawn in place. Texts cost most of a blitted frame to lay out and render
    (benchmarks/slider_frames.py measures a frame); a slider seldom changes a legend or most
    titles, and copying a picture costs far less than rendering the text. A
    text is pictured the second time it looks the same (the first time, `pictures` notes its
    look), so a title that changes with every frame costs no more than drawn in place."""
    renderer = figure.canvas.get_renderer()
    for artist in moving:
        legend = isinstance(artist, Legend)
        if not (legend or _plain_text(artist)):
            figure.draw_artist(artist)
            continue
        look = _look(artist, renderer)
        picture = pictures.get(look, Ellipsis)  # Ellipsis: never seen; False: a text seen once
        if picture is Ellipsis and not legend:  # a text's first look: drawn in place, noted
            _make_room(pictures)
            pictures[look] = False
            figure.draw_artist(artist)
            continue
        if picture is Ellipsis or picture is False:
            _make_room(pictures)
            pictures[look] = picture = _picture(artist, renderer)
        if picture is not None:
            pixels, x, y = picture
            gc = renderer.new_gc()
            renderer.draw_image(gc, x, y, pixels)
            gc.restore()


def _plain_text(artist) -> bool:
    """A text with words and no box around them (an Annotation draws an arrow too)."""
    return type(artist) is Text and bool(artist.get_text()) and artist.get_bbox_patch() is None


def _make_room(pictures: dict) -> None:
    """Forget the looks seen once, then every picture, when `pictures` holds PICTURES looks."""
    if len(pictures) >= PICTURES:
        for look in [look for look, picture in pictures.items() if picture is False]:
            del pictures[look]
    if len(pictures) >= PICTURES:
        pictures.clear()


def _look(artist, renderer) -> tuple:
    """What the pixels of a legend or a text depend on: its place and size, and the look of
    every artist it draws (a legend's texts, handles whole and frame; a text itself). A legend
    shown again by sera.plotting.style.legend keeps the look of its parts from last time."""
    parts = getattr(artist, "_sera_parts", None)
    if parts is None:
        parts = tuple(looks(part) for part in artist.findobj() if not isinstance(part, Legend))
        if isinstance(artist, Legend):
            artist._sera_parts = parts
    return tuple(artist.get_window_extent(renderer).bounds), parts


def _picture(artist, renderer):
    """(pixels, x, y): the legend or text drawn alone on a transparent canvas of the figure's size,
    cropped to what it painted, rows from the bottom up as Renderer.draw_image takes them, and
    the crop's lower left corner; None when it paints nothing."""
    from matplotlib.backends.backend_agg import RendererAgg

    width, height = int(renderer.width), int(renderer.height)
    alone = RendererAgg(width, height, renderer.dpi)
    artist.draw(alone)
    rgba = np.asarray(alone.buffer_rgba())
    rows, columns = np.nonzero(rgba[..., 3])
    if rows.size == 0:
        return None
    top, bottom = rows.min(), rows.max() + 1
    left, right = columns.min(), columns.max() + 1
    return rgba[top:bottom, left:right][::-1].copy(), int(left), int(height - bottom)


def _close_children(root) -> None:
    """Close every widget root holds (sliders, image, layouts, styles), found
    through the widgets' traits: closing a box alone leaves them registered in the kernel."""
    stack, seen = [root], set()
    while stack:
        widget = stack.pop()
        if id(widget) in seen:
            continue
        seen.add(id(widget))
        for name in widget.keys:
            value = getattr(widget, name)
            values = value if isinstance(value, (list, tuple)) else [value]
            stack += [v for v in values if isinstance(v, widgets.Widget)]
        if widget is not root:
            widget.close()


def _explore(plot, key=None, **controls):
    """The explorer of `plot`; the one it replaces (the same cell run again) is closed, so
    neither widgets nor figures pile up in the kernel."""
    key = key or plot.__name__
    if key in _LIVE:
        _LIVE.pop(key).close()
    _LIVE[key] = Explorer(plot, **controls)
    return _LIVE[key]


def kappa_explorer():
    """kappa from the log-success series (notebook 01): success probability and rollouts."""
    return _explore(splot.plot_kappa_slider,
                    p=_float(0.1, 0.01, 0.99, 0.01, "success probability p"),
                    n=_int(8, 2, 64, "rollouts N"))


def tilt_explorer():
    """How uniform counts tilt a two-prompt update (notebook 01)."""
    return _explore(splot.plot_direction_tilt,
                    p1=_float(0.05, 0.01, 0.99, 0.01, "hard prompt p1"),
                    p2=_float(0.3, 0.01, 0.99, 0.01, "easy prompt p2"),
                    n=_int(8, 2, 64, "rollouts N each"),
                    angle_deg=_float(60, 10, 170, 1, "angle between gradients (deg)"))


def waterline_explorer():
    """The waterline on a Beta(a, b) batch (notebook 02), with N_min <= N0 <= N_max linked."""
    n_min = _int(2, 2, 8, "fewest rollouts N_min")
    n0 = _int(8, 2, 64, "rollouts per prompt N0 (budget B x N0)")
    n_max = _int(64, 8, 256, "most rollouts N_max")
    _link(n_min, n0, n_max)
    return _explore(
        splot.plot_waterline_beta,
        a=_float(0.5, 0.1, 5.0, 0.02, "Beta a (more: easier prompts)"),
        b=_float(1.5, 0.1, 5.0, 0.02, "Beta b (more: harder prompts)"),
        batch=_int(32, 4, 128, "prompts B"), n0=n0, n_min=n_min, n_max=n_max,
        method=widgets.Dropdown(options=["paper", "exact", "uniform"], value="paper",
                                description="integer rounding", style=LABEL),
        seed=_int(0, 0, 20, "random batch"))


def safeguard_explorer():
    """The observability safeguard on a Beta(a, b) batch (notebook 03), N0 <= N_max linked."""
    n0 = _int(8, 2, 32, "rollouts per prompt N0 (budget B x N0)")
    n_max = _int(64, 8, 256, "most rollouts N_max")
    _link(None, n0, n_max)
    return _explore(
        splot.plot_safeguard_beta,
        a=_float(0.4, 0.1, 3.0, 0.02, "Beta a (more: easier prompts)"),
        b=_float(1.5, 0.1, 3.0, 0.02, "Beta b (more: harder prompts)"),
        batch=_int(40, 4, 128, "prompts B"), n0=n0, n_max=n_max,
        u_min=_float(0.3, 0.0, 0.95, 0.01, "safeguard threshold u_min"),
        seed=_int(0, 0, 20, "random batch"))


def _link(n_min, n0, n_max) -> None:
    """Keep N_min <= N0 <= N_max as either slider moves (the other's range follows)."""

    def follow(_=None):
        if n_min is not None:
            n0.min = n_min.value
        n0.max = max(n_max.value, n0.min)
        n_max.min = max(n0.value, n_max.min if n_min is None else n_min.value, 2)

    for slider in (n_min, n0, n_max):
        if slider is not None:
            slider.observe(follow, "value")
    follow()


EXPLORERS = {"kappa": kappa_explorer, "tilt": tilt_explorer, "waterline": waterline_explorer,
             "safeguard": safeguard_explorer}


def regime_explorer(gains):
    """The simulated regime map of one profile (notebook 08) for each precomputed K, n_min and
    difficulty: the sliders pick among the settings that were simulated."""
    def choice(values, label, fmt=str):
        options = [(fmt(v), v) for v in sorted(set(values))]
        return widgets.SelectionSlider(options=options, value=options[0][1], description=label,
                                       style=LABEL, layout=widgets.Layout(width=WIDTH))

    return _explore(lambda k, n_min, difficulty: splot.plot_regime_slider(
        gains, k, n_min, difficulty), key="regime",
        k=choice(gains["k"], "Pass@K, K"),
        n_min=choice(gains["n_min"], "fewest rollouts n_min"),
        difficulty=choice(gains["difficulty"], "prompts harder (odds divided by)",
                          lambda v: f"x{v:g}"))
