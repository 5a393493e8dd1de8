"""The notebooks' interactive figures: sliders around sera.plotting functions, drawn in the page.

Each explorer shows one figure with its sliders. The kernel draws the figure through the same
plot function that the figure cell calls with fixed values (sliders only display), and sends the
page, for each slider, the figure at every stop of that slider with the others where they are (a
track: drawing instructions, see sera.teaching.page_figure). The page (explorer.js, an anywidget)
draws each frame of a drag itself, with no message to the kernel; when a slider is let go, the
kernel lays the figure out again at the new setting and sends the other sliders' tracks for it.
A frame the page does not hold yet is asked for, one at a time. A setting a figure cannot draw
shows a short message, never a traceback. Used by notebooks 01-03 and 08; needs anywidget (the
notebooks extra). `static_html` writes an explorer that works with no kernel (the static site).
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import anywidget
import ipywidgets
import numpy as np
import traitlets

import sera.plotting as splot
from sera.plotting.style import SeraFigure
from sera.teaching.page_figure import DRAWING, Track, Tracks, pack, unpack

SCRIPT = Path(__file__).with_name("explorer.js")
SLICE = 0.03  # seconds of track drawing between two looks at the kernel's messages
_LIVE: dict = {}  # the explorer each plot function shows now; a rerun cell closes the old one


@dataclass(frozen=True)
class Control:
    """A slider (or, with choice=True, a drop-down) over `stops`, the values it can take, in
    order; `value` is where it starts and `labels` what the page shows for each stop."""

    label: str
    stops: tuple
    value: object
    labels: tuple = ()
    choice: bool = False

    def __post_init__(self):
        if self.value not in self.stops:
            raise ValueError(f"{self.label}: the start {self.value!r} is not one of its stops")
        if not self.labels:
            object.__setattr__(self, "labels", tuple(
                f"{v:g}" if isinstance(v, float) else str(v) for v in self.stops))

    def index(self, value) -> int:
        """The stop at `value` (a float to within 1e-9 of it)."""
        for i, stop in enumerate(self.stops):
            if stop == value or (isinstance(stop, float) and not isinstance(value, str)
                                 and abs(stop - value) < 1e-9):
                return i
        raise ValueError(f"{self.label}: {value!r} is not one of its stops "
                         f"({self.labels[0]} to {self.labels[-1]})")


def _float(value, low, high, step, label) -> Control:
    """A continuous quantity in steps of about 1/100 to 1/250 of its range, so that a hand
    crossing the track meets more stops than the figure has frames."""
    count = int(round((high - low) / step)) + 1
    return Control(label, tuple(float(v) for v in np.round(low + step * np.arange(count), 10)),
                   float(value))


def _int(value, low, high, label) -> Control:
    return Control(label, tuple(range(low, high + 1)), value)


class Explorer(anywidget.AnyWidget):
    """`controls` (by argument name) over the figure of `plot`, drawn in the page. `figure` is
    the one figure the plot functions draw into (at rest after `set`, at a track's last stop
    after `track`); `draws` counts the draws at rest."""

    _esm = SCRIPT
    name = traitlets.Unicode().tag(sync=True)
    controls = traitlets.List().tag(sync=True)  # [{name, label, labels, choice}]
    values = traitlets.Dict().tag(sync=True)  # name -> index of the stop it is at
    size = traitlets.List().tag(sync=True)  # the figure's width and height in pixels
    frame = traitlets.Bytes().tag(sync=True)  # the figure at rest: pack({at, ops, numbers})

    def __init__(self, plot, name: str, **controls: Control):
        self.plot, self.draws, self._controls = plot, 0, controls
        # the figure the plot makes at the start (its own size), drawn into from here on
        self.figure = plot(**{key: control.value for key, control in controls.items()})
        self.figure.set_dpi(SeraFigure.DISPLAY_DPI)
        self._tracks = Tracks(plot, self.figure)
        self._queue: deque = deque()
        self._job = None
        self._waiting = 0  # messages waiting to draw (see _work)
        self._working = False  # a _work is scheduled
        self._sent: dict = {}  # name -> (content, packed track) at the current values
        super().__init__(
            name=name, size=list(self._tracks.size),
            controls=[{"name": key, "label": c.label, "labels": list(c.labels),
                       "choice": c.choice} for key, c in controls.items()],
            values={key: c.index(c.value) for key, c in controls.items()})
        self._rest()
        self.observe(self._committed, "values")
        self.on_msg(self._message)

    def settings(self, values: dict | None = None) -> dict:
        """The plot's arguments at `values` (stop indices; the explorer's own by default)."""
        values = self.values if values is None else values
        return {key: c.stops[values[key]] for key, c in self._controls.items()}

    def set(self, **settings) -> None:
        """Move controls to these values (a script's or a test's way to move a slider); the figure
        is drawn at rest at once."""
        values = dict(self.values)
        for key, value in settings.items():
            if key not in self._controls:
                raise ValueError(f"no control {key!r}; this explorer has {list(self._controls)}")
            values[key] = self._controls[key].index(value)
        self.values = values

    @property
    def numbers(self) -> dict:
        """The numbers the figure at rest shows (the plot function's `figure.numbers`)."""
        return unpack(self.frame)["numbers"]

    def track(self, key: str) -> dict:
        """The frames of control `key` at each of its stops, the others where they are."""
        control = self._controls[key]
        return self._tracks.track([self.settings({**self.values, key: i})
                                   for i in range(len(control.stops))])

    def _rest(self) -> None:
        rest = self._tracks.rest(self.settings())
        self.draws += 1
        self.frame = pack({"at": self.values, **rest})

    def _committed(self, change=None) -> None:
        self._waiting += 1
        try:
            with DRAWING:  # the track being drawn is dropped whole, never midway
                self._commit(change)
        finally:
            self._waiting -= 1

    def _commit(self, change) -> None:
        """A control was let go (or set): draw the figure at rest there, then the tracks of the
        others, as time allows. The track of a control that moved alone still holds (the
        others are where they were)."""
        old = change["old"] if change else {}
        moved = [key for key in self._controls if old.get(key) != self.values.get(key)]
        self._rest()
        self._sent = {key: sent for key, sent in self._sent.items() if moved == [key]}
        self._job = None
        self._queue = deque(key for key in self._controls if key not in self._sent)
        self._schedule()

    def _message(self, _, content, buffers) -> None:
        """The page's messages; ipykernel may read them on another thread than the loop that
        draws the tracks, so each is handled whole between two slices of that work."""
        self._waiting += 1
        try:
            with DRAWING:
                self._answer(content)
        finally:
            self._waiting -= 1

    def _answer(self, content) -> None:
        if content.get("hello"):  # a view opened: the tracks it may have missed, then the rest
            for message, data in self._sent.values():
                self.send(message, [data])
            if self._job is None and not self._queue:
                self._queue = deque(key for key in self._controls if key not in self._sent)
                self._schedule()
        elif "want" in content and content["want"] in self._queue:
            self._queue.remove(content["want"])
            self._queue.appendleft(content["want"])
        elif "frame" in content:
            values = {key: int(content["frame"][key]) for key in self._controls}
            frames = self._tracks.track([self.settings(values)])
            self.send({"kind": "frame", "at": values}, [pack(frames)])

    def _schedule(self) -> None:
        if self._working:
            return
        try:
            asyncio.get_running_loop().call_soon(self._work)
            self._working = True
        except RuntimeError:  # no kernel loop (a script, a test): tracks are made on demand
            pass

    def _work(self) -> None:
        """Draw track frames for SLICE seconds, send each track as it is done, and come back
        after the kernel has read its messages. A message waiting to draw (ipykernel may read
        comm messages on another thread) goes first: the slice ends for it."""
        start = time.perf_counter()
        with DRAWING:
            while time.perf_counter() - start < SLICE and not self._waiting:
                if self._job is None:
                    if not self._queue:
                        self._working = False
                        return
                    key = self._queue.popleft()
                    self._job = (key, dict(self.values), Track(self._tracks))
                key, values, track = self._job
                track.add(self.settings({**values, key: len(track)}))
                if len(track) == len(self._controls[key].stops):
                    self._send_track(key, values, track.result())
                    self._job = None
        asyncio.get_running_loop().call_later(0.002 if self._waiting else 0, self._work)

    def _send_track(self, key, values, track) -> None:
        message = {"kind": "track", "name": key, "at": values}
        data = pack(track)
        self._sent[key] = (message, data)
        self.send(message, [data])

    def static_state(self) -> dict:
        """Everything the page needs with no kernel: the controls, the figure at rest and every
        control's track at the current values."""
        return {"name": self.name, "controls": self.controls, "values": self.values,
                "size": self.size, "frame": base64.b64encode(self.frame).decode("ascii"),
                "tracks": [{"name": key, "at": self.values,
                            "data": base64.b64encode(pack(self.track(key))).decode("ascii")}
                           for key in self._controls]}

    def static_html(self) -> str:
        """The explorer as one piece of HTML that needs no kernel and no network: its script and
        every track at its starting values. There one control moves at a time from the
        starting values (a kernel draws the combinations)."""
        tag = f"sera-explorer-{self.name}-{id(self):x}"
        code = SCRIPT.read_text().replace("export default { render };", "")
        state = json.dumps(self.static_state()).replace("</", "<\\/")
        return (f'<div id="{tag}" class="sera-explorer-static"></div>\n'
                f'<script type="module">\n{code}\n'
                f'render({{ model: staticModel({state}), '
                f'el: document.getElementById("{html.escape(tag)}") }});\n</script>\n')

    def close(self) -> None:
        """Close the explorer and the widgets it holds (its layout): closing it alone leaves them
        registered in the kernel."""
        self._queue.clear()
        self._job = None
        for key in self.keys:
            value = getattr(self, key)
            if isinstance(value, ipywidgets.Widget):
                value.close()
        super().close()

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:  # what a front end without widgets shows: the figure at rest
            data = bundle[0] if isinstance(bundle, tuple) else bundle
            data["image/png"] = base64.b64encode(self.figure.drawn_png()).decode("ascii")
        return bundle


def _explore(plot, key=None, **controls):
    """The explorer of `plot`; the one it replaces (the same cell run again) is closed, so
    neither widgets nor figures pile up in the kernel."""
    key = key or plot.__name__
    if key in _LIVE:
        _LIVE.pop(key).close()
    _LIVE[key] = Explorer(plot, key, **controls)
    return _LIVE[key]


def kappa_explorer():
    """kappa from the log-success series (notebook 01): success probability and rollouts."""
    return _explore(splot.plot_kappa_slider, "kappa",
                    p=_float(0.1, 0.01, 0.99, 0.01, "success probability p"),
                    n=_int(8, 2, 64, "rollouts N"))


def tilt_explorer():
    """How uniform counts tilt a two-prompt update (notebook 01)."""
    return _explore(splot.plot_direction_tilt, "tilt",
                    p1=_float(0.05, 0.01, 0.99, 0.01, "hard prompt p1"),
                    p2=_float(0.3, 0.01, 0.99, 0.01, "easy prompt p2"),
                    n=_int(8, 2, 64, "rollouts N each"),
                    angle_deg=_float(60, 10, 170, 1, "angle between gradients (deg)"))


def waterline_explorer():
    """The waterline on a Beta(a, b) batch (notebook 02); a budget outside N_min <= N0 <= N_max
    says so in place of the figure."""
    return _explore(
        splot.plot_waterline_beta, "waterline",
        a=_float(0.5, 0.1, 5.0, 0.02, "Beta a (more: easier prompts)"),
        b=_float(1.5, 0.1, 5.0, 0.02, "Beta b (more: harder prompts)"),
        batch=_int(32, 4, 128, "prompts B"),
        n0=_int(8, 2, 64, "rollouts per prompt N0 (budget B x N0)"),
        n_min=_int(2, 2, 8, "fewest rollouts N_min"),
        n_max=_int(64, 8, 256, "most rollouts N_max"),
        method=Control("integer rounding", ("paper", "exact", "uniform"), "paper", choice=True),
        seed=_int(0, 0, 20, "random batch"))


def safeguard_explorer():
    """The observability safeguard on a Beta(a, b) batch (notebook 03)."""
    return _explore(
        splot.plot_safeguard_beta, "safeguard",
        a=_float(0.4, 0.1, 3.0, 0.02, "Beta a (more: easier prompts)"),
        b=_float(1.5, 0.1, 3.0, 0.02, "Beta b (more: harder prompts)"),
        batch=_int(40, 4, 128, "prompts B"),
        n0=_int(8, 2, 32, "rollouts per prompt N0 (budget B x N0)"),
        n_max=_int(64, 8, 256, "most rollouts N_max"),
        u_min=_float(0.3, 0.0, 0.95, 0.01, "safeguard threshold u_min"),
        seed=_int(0, 0, 20, "random batch"))


EXPLORERS = {"kappa": kappa_explorer, "tilt": tilt_explorer, "waterline": waterline_explorer,
             "safeguard": safeguard_explorer}


def regime_explorer(gains):
    """The simulated regime map of one profile (notebook 08) for each precomputed K, n_min and
    difficulty: the sliders pick among the settings that were simulated."""
    def choice(values, label, fmt=str):
        stops = tuple(sorted(set(values)))
        return Control(label, stops, stops[0], tuple(fmt(v) for v in stops))

    return _explore(lambda k, n_min, difficulty: splot.plot_regime_slider(
        gains, k, n_min, difficulty), key="regime",
        k=choice(gains["k"].tolist(), "Pass@K, K"),
        n_min=choice(gains["n_min"].tolist(), "fewest rollouts n_min"),
        difficulty=choice(gains["difficulty"].tolist(), "prompts harder (odds divided by)",
                          lambda v: f"x{v:g}"))
