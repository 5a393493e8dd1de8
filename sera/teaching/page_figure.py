"""A matplotlib figure as drawing instructions for a web page, and a slider's whole track of them.

An explorer (sera.teaching.widgets) sends the page, for each slider, the figure at every stop of
that slider with the others held where they are; the page (explorer.js) draws a frame from these
instructions as the hand moves, with no message to the kernel. The instructions come from the
figure the plot function drew: a renderer that records what matplotlib asks it to draw (paths,
markers, texts, images, in the figure's pixels) instead of painting, so the page shows the same
curves, axes, labels, colours and legend as the figure cell, and the numbers beside each frame are
the ones the plot function put in `figure.numbers`.
"""

from __future__ import annotations

import base64
import io
import json
import math
import threading
import zlib

import matplotlib as mpl
import numpy as np
from matplotlib.backend_bases import GraphicsContextBase, RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg

from sera.plotting.style import RC, drawing_into, looks

# One drawing at a time: ipykernel may run a comm's messages (a frame asked for, a control let go)
# on another thread than the loop that draws the tracks, and both draw into the explorer's one
# figure (and through sera.plotting.style's stack of figures drawn into).
DRAWING = threading.RLock()


def _rounded(values, digits: int) -> list:
    return [round(float(v), digits) for v in values]


class Recorder(RendererBase):
    """A renderer that keeps, in `ops`, what it is asked to draw: the page's drawing instructions.
    Text is measured as Agg measures it (so matplotlib lays out the figure as it does for a PNG);
    one recorder serves every frame of a track, so the measurements are cached across frames."""

    def __init__(self, width: int, height: int, dpi: float):
        super().__init__()
        self.width, self.height, self.dpi = width, height, dpi
        self._measure = RendererAgg(width, height, dpi)
        self.ops: list = []

    def flipy(self) -> bool:
        return False

    def get_canvas_width_height(self):
        return self.width, self.height

    def points_to_pixels(self, points):
        return points * self.dpi / 72

    def get_text_width_height_descent(self, s, prop, ismath):
        return self._measure.get_text_width_height_descent(s, prop, ismath)

    def new_gc(self):
        return GraphicsContextBase()

    def take(self) -> list:
        """The instructions recorded since the last take."""
        ops, self.ops = self.ops, []
        return ops

    def _style(self, gc, face) -> dict:
        style = {}
        if gc.get_linewidth() > 0:
            style["stroke"] = _colour(gc.get_rgb(), gc)
            style["width"] = round(self.points_to_pixels(gc.get_linewidth()), 2)
            offset, dashes = gc.get_dashes()
            if dashes is not None:
                style["dash"] = _rounded(self.points_to_pixels(np.asarray(dashes)), 2)
                style["offset"] = round(float(self.points_to_pixels(offset or 0.0)), 2)
            style["cap"] = gc.get_capstyle()
            style["join"] = gc.get_joinstyle()
        if face is not None:
            style["fill"] = _colour(face, gc)
        clip = gc.get_clip_rectangle()
        if clip is not None:
            style["clip"] = _rounded(clip.bounds, 1)
        return style

    def draw_path(self, gc, path, transform, rgbFace=None):  # noqa: N803 (matplotlib's name)
        points, codes = _pixels(path, transform, 1)
        if points:
            self.ops.append({"path": points, "codes": codes, **self._style(gc, rgbFace)})

    def draw_markers(self, gc, marker_path, marker_trans, path, trans, rgbFace=None):  # noqa: N803
        at, _ = _pixels(path, trans, 1)
        if at:
            marker, codes = _pixels(marker_path, marker_trans, 2)
            self.ops.append({"marker": marker, "codes": codes, "at": at,
                             **self._style(gc, rgbFace)})

    def draw_path_collection(self, gc, master_transform, paths, all_transforms, offsets,
                             offset_trans, *looks, **more):
        """As RendererBase draws a collection (a path at a time), but paths in a row that look
        the same become one instruction: a batch's bars are one path of many pieces."""
        from matplotlib.transforms import Affine2D

        path_ids = self._iter_collection_raw_paths(master_transform, paths, all_transforms)
        last = None
        if more.get("hatchcolors") is None:  # as RendererBase reads "none given"
            more["hatchcolors"] = []
        for xo, yo, (path, transform), gc0, face in self._iter_collection(
                gc, list(path_ids), offsets, offset_trans, *looks, **more):
            points, codes = _pixels(path, Affine2D(transform.get_matrix()).translate(xo, yo), 1)
            if not points:
                continue
            codes = codes or [1] + [2] * (len(points) // 2 - 1)
            style = self._style(gc0, face)
            if last is not None and last[1] == style:
                last[0]["path"] += points
                last[0]["codes"] += codes
                continue
            last = ({"path": points, "codes": codes, **style}, style)
            self.ops.append(last[0])

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        # (x, y): the left end of the text's baseline, in pixels from the lower left
        if ismath:
            s = s.replace("$", "")
        self.ops.append({"text": s, "x": round(float(x), 1), "y": round(float(y), 1),
                         "angle": round(float(angle), 2), "fill": _colour(gc.get_rgb(), gc),
                         "size": round(self.points_to_pixels(prop.get_size_in_points()), 2),
                         "weight": str(prop.get_weight()), "font": prop.get_family()[0],
                         **({"clip": _rounded(gc.get_clip_rectangle().bounds, 1)}
                            if gc.get_clip_rectangle() is not None else {})})

    def draw_image(self, gc, x, y, im):
        from PIL import Image

        with io.BytesIO() as png:  # rows come bottom up; a PNG's run top down
            Image.fromarray(np.asarray(im)[::-1]).save(png, format="png")
            data = base64.b64encode(png.getvalue()).decode("ascii")
        self.ops.append({"image": data, "x": round(float(x), 1), "y": round(float(y), 1),
                         "w": int(im.shape[1]), "h": int(im.shape[0])})


def _pixels(path, transform, digits: int):
    """The path's points in pixels, flattened and rounded to `digits`, and its codes (None: a
    move, then straight lines); a point that is not finite is left out, and the next one starts
    a new piece (a gap, as matplotlib draws it)."""
    points = transform.transform(path.vertices) if len(path.vertices) else np.empty((0, 2))
    codes = path.codes
    finite = np.isfinite(points).all(axis=1)
    if not finite.all():
        codes = np.full(len(points), 2, np.uint8) if codes is None else codes.copy()
        codes[0] = 1
        after = np.flatnonzero(~finite) + 1
        codes[after[after < len(codes)]] = 1
        points, codes = points[finite], codes[finite]
    return (np.round(points, digits).ravel().tolist(),
            None if codes is None else codes.tolist())


def _colour(rgb, gc) -> list:
    rgba = [*map(float, rgb)] + ([1.0] if len(rgb) == 3 else [])
    if gc.get_forced_alpha():
        rgba[3] = float(gc.get_alpha())
    return _rounded(rgba, 4)


def plain(value):
    """`value` (numbers, arrays, tuples, dicts of them) as JSON's types; NaN and infinities as
    None, which JSON cannot hold."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def pack(value) -> bytes:
    """JSON, deflated (zlib): what travels to the page, which inflates it with the browser's own
    DecompressionStream("deflate")."""
    return zlib.compress(json.dumps(plain(value), separators=(",", ":")).encode(), 6)


def unpack(data: bytes):
    return json.loads(zlib.decompress(data))


def moving(figure) -> list:
    """What a plot drew in the figure's axes (lines, bars, texts, titles, legends): what changes
    between the frames of a track, in the order a full draw paints them."""
    found = []
    for ax in sorted(figure.axes, key=lambda a: a.get_zorder()):
        frame = {ax.patch, ax.xaxis, ax.yaxis, *ax.spines.values()}
        found += sorted((a for a in ax.get_children() if a not in frame),
                        key=lambda a: a.get_zorder())
    return found


def backdrop(figure) -> str:
    """What the rest of the figure shows: each axes' place, limits, scales, ticks and labels, and
    the figure's own texts. Frames whose backdrops are equal share one set of instructions."""
    def ticks(axis):
        values = axis.get_majorticklocs()
        return tuple(values), tuple(axis.get_major_formatter().format_ticks(values))

    return repr([(tuple(ax.get_position().bounds), ax.get_xlim(), ax.get_ylim(),
                  ax.get_xscale(), ax.get_yscale(), ax.get_xlabel(), ax.get_ylabel(), ax.axison,
                  ticks(ax.xaxis), ticks(ax.yaxis)) for ax in figure.axes]
                + [text.get_text() for text in figure.texts] + [len(figure.legends)])


class Tracks:
    """Frames of one figure for an explorer's plot function: `rest` draws it at a setting with
    its layout worked out, `track` draws it at many settings in that layout (the figure is
    laid out again only for a grid of axes it has not drawn before, as when a setting draws a
    message in place of the plot)."""

    def __init__(self, plot, figure):
        self.plot, self.figure = plot, figure
        FigureCanvasAgg(figure)
        width, height = figure.canvas.get_width_height()
        self.size = (width, height)
        self.recorder = Recorder(width, height, figure.dpi)
        self._layouts: dict = {}
        self._legends: dict = {}

    def rest(self, settings: dict) -> dict:
        """The whole figure at `settings`, laid out: one frame."""
        figure = self.figure
        with DRAWING, mpl.rc_context(RC):  # the house style, whatever the kernel has set
            figure.set_layout_engine("constrained")
            with drawing_into(figure):
                _draw(self.plot, settings)
            _settle(figure)
            self._layouts = {_grid(figure): [ax.get_position() for ax in figure.axes]}
            figure.set_layout_engine("none")
            figure.draw(self.recorder)
            return {"ops": self.recorder.take(), "numbers": plain(figure.numbers)}

    def track(self, settings: list[dict]) -> dict:
        """Frames at each of `settings` in the layout of the last `rest` (see Track)."""
        track = Track(self)
        for values in settings:
            track.add(values)
        return track.result()

    def _record(self, artist) -> None:
        """Draw one moving artist into the recorder; a legend that looks as one drawn before in
        this layout repeats that one's instructions (laying out a legend costs most of a
        frame, and a slider seldom changes one)."""
        if type(artist).__name__ != "Legend" or artist._loc == 0:  # 0: "best" moves with data
            artist.draw(self.recorder)
            return
        look = (tuple(artist.axes.get_position().bounds), artist._loc,
                tuple(looks(part) for part in artist.findobj() if part is not artist))
        if look not in self._legends:
            start = len(self.recorder.ops)
            artist.draw(self.recorder)
            self._legends[look] = self.recorder.ops[start:]
            return
        self.recorder.ops += self._legends[look]

    def _lay_out(self) -> None:
        """Put the axes where the last rest put axes of this grid, else lay the figure out once
        for this grid and remember where."""
        figure, grid = self.figure, _grid(self.figure)
        if grid not in self._layouts:
            figure.set_layout_engine("constrained")
            _settle(figure)
            self._layouts[grid] = [ax.get_position() for ax in figure.axes]
            figure.set_layout_engine("none")
            return
        for ax, box in zip(figure.axes, self._layouts[grid], strict=True):
            ax.set_position(box)
            ax.set_in_layout(True)  # set_position takes an axes out of the layout of a rest


class Track:
    """Frames added one setting at a time: each a list of the instructions that change
    (`frames`), an index into `backdrops` for the rest of the figure, and the numbers the plot
    shows."""

    def __init__(self, tracks: Tracks):
        self.tracks = tracks
        self.frames, self.numbers, self.which, self.backdrops = [], [], [], {}

    def add(self, values: dict) -> None:
        with DRAWING, mpl.rc_context(RC):
            self._add(values)

    def _add(self, values: dict) -> None:
        tracks = self.tracks
        figure, recorder = tracks.figure, tracks.recorder
        with drawing_into(figure):
            _draw(tracks.plot, values)
        tracks._lay_out()
        key = backdrop(figure)
        artists = moving(figure)
        if key not in self.backdrops:
            for artist in artists:
                artist.set_animated(True)
            figure.draw(recorder)
            for artist in artists:
                artist.set_animated(False)
            self.backdrops[key] = (len(self.backdrops), recorder.take())
        for artist in artists:
            tracks._record(artist)
        self.frames.append(recorder.take())
        self.which.append(self.backdrops[key][0])
        self.numbers.append(plain(figure.numbers))

    def __len__(self) -> int:
        return len(self.frames)

    def result(self) -> dict:
        return {"frames": self.frames, "backdrop": self.which, "numbers": self.numbers,
                "backdrops": [ops for _, ops in self.backdrops.values()]}


def _settle(figure, draws: int = 6) -> None:
    """Lay the figure out until its axes stay put: the constrained layout places a title from
    where the axes were, so one pass after other settings can end a few pixels from where a
    fresh figure's passes end."""
    for _ in range(draws):
        before = [ax.get_position().bounds for ax in figure.axes]
        figure.draw_without_rendering()
        if [ax.get_position().bounds for ax in figure.axes] == before:
            return


def _grid(figure) -> str:
    kept = getattr(figure, "_sera_grid", None)
    return repr(kept[0] if kept else len(figure.axes))


def _draw(plot, settings: dict) -> None:
    """Draw `plot` at `settings` into the figure being drawn into; a setting the plot rejects
    draws its reason, never a traceback."""
    from sera.plotting.style import message_figure

    try:
        plot(**settings)
    except ValueError as error:
        message_figure(str(error))
