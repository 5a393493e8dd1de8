"""The notebooks' explorers, driven without a browser: every control to its ends, every track's
numbers against sera's own functions, the drawing instructions replayed through Agg against the
figure Agg draws, and the kernel's side of the conversation with the page (tracks, frames asked
for, a control let go). tests/test_browser.py drives the same explorers in JupyterLab and on the
static site."""

import asyncio
import base64

import matplotlib as mpl
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.font_manager import FontProperties
from matplotlib.path import Path
from matplotlib.transforms import Bbox, IdentityTransform

pytest.importorskip("anywidget")
import sera  # noqa: E402
import sera.plotting as splot  # noqa: E402
import sera.teaching.widgets as widgets  # noqa: E402
from sera.fidelity import kappa  # noqa: E402
from sera.plotting.style import RC, SeraFigure  # noqa: E402
from sera.teaching.page_figure import plain, unpack  # noqa: E402

NAMES = sorted(widgets.EXPLORERS)


def _fresh(explorer) -> dict:
    """The numbers a fresh call of the explorer's plot function shows at its settings."""
    return plain(explorer.plot(**explorer.settings()).numbers)


@pytest.mark.parametrize("name", NAMES)
def test_every_control_at_its_ends_shows_what_the_plot_function_draws(name):
    explorer = widgets.EXPLORERS[name]()
    assert explorer.numbers == _fresh(explorer)
    for key, control in explorer._controls.items():
        assert " " in control.label and control.label != key  # a readable label
        for value in dict.fromkeys([control.stops[0], control.stops[-1], control.value]):
            draws = explorer.draws
            explorer.set(**{key: value})
            assert explorer.draws == draws + 1 or value == control.value, (key, value)
            assert explorer.numbers == _fresh(explorer), (key, value)


def test_the_kappa_track_holds_sera_kappa_at_every_stop():
    explorer = widgets.kappa_explorer()
    explorer.set(n=13)
    track = explorer.track("p")
    stops = explorer._controls["p"].stops
    assert len(track["frames"]) == len(track["numbers"]) == len(stops) == 99
    for p, numbers in zip(stops, track["numbers"], strict=True):
        assert numbers["p"] == p and numbers["n"] == 13
        assert numbers["kappa"] == float(kappa(p, 13))  # the same float, not a near one
        # kappa is p times the kept part of the log-success series
        assert abs(numbers["kappa"] - p * sum(numbers["terms"])) < 1e-12


@pytest.mark.parametrize("key", ["a", "n_max", "method"])
def test_the_waterline_track_holds_sera_allocate_at_every_stop(key):
    explorer = widgets.waterline_explorer()
    explorer.set(batch=24, n0=6, n_min=3, n_max=20, seed=5)
    track = explorer.track(key)
    for i, numbers in enumerate(track["numbers"]):
        s = explorer.settings({**explorer.values, key: i})
        if not s["n_min"] <= s["n0"] <= s["n_max"]:
            assert "does not fit" in numbers["message"]
            continue
        p = np.sort(np.random.default_rng(s["seed"]).beta(s["a"], s["b"], s["batch"]))
        result = sera.allocate(p, s["batch"] * s["n0"], s["n_min"],
                               min(s["n_max"], s["batch"] * s["n0"]), rule=s["method"])
        assert numbers["counts"] == result.counts.tolist(), s
        assert abs(numbers["level"] - result.level) <= 1e-9, s
        assert np.allclose(numbers["fidelity"], result.fidelity, rtol=0, atol=1e-9)
        assert sum(numbers["counts"]) == s["batch"] * s["n0"]


def test_the_safeguard_track_holds_sera_allocate_at_every_stop():
    explorer = widgets.safeguard_explorer()
    track = explorer.track("u_min")
    for i, numbers in enumerate(track["numbers"]):
        s = explorer.settings({**explorer.values, "u_min": i})
        p = np.random.default_rng(s["seed"]).beta(s["a"], s["b"], s["batch"])
        result = sera.allocate(p, s["batch"] * s["n0"], 2, s["n_max"], u_min=s["u_min"])
        assert numbers["counts"] == result.counts.tolist()
        assert numbers["retained"] == result.retained.tolist()
        assert numbers["fallback"] == bool(result.fallback)


def test_an_infeasible_setting_shows_a_message_not_a_traceback():
    fig = splot.plot_waterline_beta(n0=7, n_min=8)
    assert "does not fit the bounds" in fig.numbers["message"]
    explorer = widgets.safeguard_explorer()
    explorer.set(n_max=8, n0=9)
    assert "does not fit the bounds" in explorer.numbers["message"]
    texts = [op["text"] for op in unpack(explorer.frame)["ops"] if "text" in op]
    assert any("does not fit" in text for text in texts)  # what the page draws
    explorer.set(n_max=64)  # and back to a figure
    assert "counts" in explorer.numbers


def test_regime_explorer_moves_over_every_simulated_setting():
    from sera.studies import simulate

    p0 = [0.02, 0.1, 0.3, 0.6] * 4
    base = simulate.SimulationConfig(eval_every=4, batch_size=4)
    table = simulate.regime_map(p0, [4], steps=8, repetitions=2, base=base)
    sweep = simulate.predicted_gain(table).assign(profile="toy", n_min=2, difficulty=1.0)
    explorer = widgets.regime_explorer(sweep)
    for key, control in explorer._controls.items():
        assert " " in control.label
        track = explorer.track(key)
        assert len(track["frames"]) == len(control.stops)
        for value in control.stops:
            explorer.set(**{key: value})
            assert explorer.numbers == _fresh(explorer)
    assert any("image" in op for op in unpack(explorer.frame)["ops"])  # the heat map


def test_an_explorer_shows_its_initial_figure_and_a_rerun_closes_the_old_one():
    import gc

    import ipywidgets

    first = widgets.kappa_explorer()
    bundle = first._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "application/vnd.jupyter.widget-view+json" in data  # live in JupyterLab
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")  # a picture elsewhere
    gc.collect()
    alive = len(ipywidgets.widgets.widget._instances)
    for _ in range(3):
        widgets.kappa_explorer()  # the cell run again
    gc.collect()
    assert first.comm is None
    assert len(ipywidgets.widgets.widget._instances) == alive  # nothing piles up


def test_a_control_rejects_a_value_off_its_stops():
    explorer = widgets.kappa_explorer()
    with pytest.raises(ValueError, match="rollouts N.*2 to 64"):
        explorer.set(n=65)
    with pytest.raises(ValueError, match="no control 'q'"):
        explorer.set(q=1)


def _replayed(ops, width: int, height: int, dpi: float) -> np.ndarray:
    """The instructions painted by Agg, as an independent reading of what they say."""
    renderer = RendererAgg(width, height, dpi)
    to_points = 72 / dpi

    def gc_for(op):
        gc = renderer.new_gc()
        if "clip" in op:
            x, y, w, h = op["clip"]
            gc.set_clip_rectangle(Bbox.from_bounds(x, y, w, h))
        if "stroke" in op:
            gc.set_foreground(op["stroke"], isRGBA=True)
            gc.set_linewidth(op["width"] * to_points)
            if "dash" in op:
                gc.set_dashes(op["offset"] * to_points, [d * to_points for d in op["dash"]])
            gc.set_capstyle(op["cap"])
            gc.set_joinstyle(op["join"])
        else:
            gc.set_linewidth(0)
        return gc

    def path(points, codes):
        return Path(np.asarray(points, float).reshape(-1, 2), codes)

    for op in ops:
        gc = gc_for(op)
        face = op.get("fill")
        if "path" in op:
            renderer.draw_path(gc, path(op["path"], op["codes"]), IdentityTransform(), face)
        elif "marker" in op:
            at = np.asarray(op["at"], float).reshape(-1, 2)
            renderer.draw_markers(gc, path(op["marker"], op["codes"]), IdentityTransform(),
                                  Path(at), IdentityTransform(), face)
        elif "text" in op:
            gc.set_foreground(op["fill"], isRGBA=True)
            prop = FontProperties(family=op["font"], size=op["size"] * to_points,
                                  weight=op["weight"])
            # Agg takes a text's place from the top (RendererAgg.flipy), a path's from the bottom
            renderer.draw_text(gc, op["x"], height - op["y"], op["text"], prop, op["angle"])
        gc.restore()
    return np.asarray(renderer.buffer_rgba())[..., :3].astype(int)


def _far(one: np.ndarray, other: np.ndarray) -> float:
    """The share of pixels of either picture that differ by more than 128 levels (of 255) from
    every pixel of the other within one pixel of them (a glyph or a line's edge may land a
    pixel over): a thin stroke only one of them has counts."""
    def one_way(a, b):
        padded = np.pad(b, ((1, 1), (1, 1), (0, 0)), mode="edge")
        height, width = a.shape[:2]
        nearest = np.min([np.abs(a - padded[dy:dy + height, dx:dx + width]).max(axis=2)
                          for dy in range(3) for dx in range(3)], axis=0)
        return nearest > 128

    return float((one_way(one, other) | one_way(other, one)).mean())


@pytest.mark.parametrize("name", NAMES)
def test_the_drawing_instructions_paint_the_figure_agg_paints(name):
    # every artist of the figure is in the instructions, where Agg puts it: replayed through
    # Agg they give the figure's own pixels, but for text (Agg draws it at whole pixels) and
    # points rounded to a tenth of a pixel
    explorer = widgets.EXPLORERS[name]()
    width, height = explorer.size
    frame = unpack(explorer.frame)
    replay = _replayed(frame["ops"], width, height, SeraFigure.DISPLAY_DPI)
    canvas = FigureCanvasAgg(explorer.figure)
    with mpl.rc_context(RC):
        canvas.draw()
    agg = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)
    assert replay.shape == agg.shape
    far = _far(replay, agg)
    assert far < 1e-4, f"{far:.3%} of the pixels differ by more than 128 levels"
    # the bound sees one tick label left out
    short = [op for i, op in enumerate(frame["ops"])
             if i != next(j for j, o in enumerate(frame["ops"]) if o.get("text"))]
    assert _far(_replayed(short, width, height, SeraFigure.DISPLAY_DPI), agg) > 1e-4
    # and a track's frame over its backdrop is the same picture as the figure at rest there
    first = next(iter(explorer._controls))
    track = explorer.track(first)
    i = explorer.values[first]
    ops = track["backdrops"][track["backdrop"][i]] + track["frames"][i]
    again = _replayed(ops, width, height, SeraFigure.DISPLAY_DPI)
    assert _far(again, agg) < 1e-4


def test_the_kernel_sends_tracks_answers_frames_and_keeps_a_moved_controls_track():
    explorer = widgets.tilt_explorer()
    sent = []
    explorer.send = lambda content, buffers=None: sent.append((content, buffers))

    async def talk():
        explorer._message(None, {"hello": True}, [])
        explorer._message(None, {"want": "angle_deg"}, [])
        twenty = explorer._controls["n"].index(20)  # the page speaks in stops
        explorer._message(None, {"frame": {**explorer.values, "n": twenty}}, [])
        assert sent[0][0]["kind"] == "frame" and sent[0][0]["at"]["n"] == twenty  # at once
        while explorer._queue or explorer._job:
            await asyncio.sleep(0.01)

    asyncio.run(talk())
    tracks = [content["name"] for content, _ in sent if content["kind"] == "track"]
    assert tracks[0] == "angle_deg" and sorted(tracks) == sorted(explorer._controls)
    frame = unpack(sent[0][1][0])
    assert frame["numbers"][0]["counts"] == list(splot.fidelity.tilt_vectors(
        0.05, 0.3, 20, 60.0)["counts"])
    for content, buffers in sent[1:]:  # every stop of every track, with sera's numbers
        track = unpack(buffers[0])
        assert len(track["frames"]) == len(explorer._controls[content["name"]].stops)
    sent.clear()

    async def let_go():
        # the page lets the N slider go at 12
        explorer.values = {**explorer.values, "n": explorer._controls["n"].index(12)}
        while explorer._queue or explorer._job:
            await asyncio.sleep(0.01)

    asyncio.run(let_go())
    assert sorted(c["name"] for c, _ in sent if c["kind"] == "track") == ["angle_deg", "p1", "p2"]
    assert unpack(explorer.frame)["at"]["n"] == explorer._controls["n"].index(12)


def test_the_static_explorer_holds_every_track_and_its_script():
    explorer = widgets.kappa_explorer()
    state = explorer.static_state()
    assert [t["name"] for t in state["tracks"]] == ["p", "n"]
    for t in state["tracks"]:
        track = unpack(base64.b64decode(t["data"]))
        assert len(track["frames"]) == len(explorer._controls[t["name"]].stops)
    page = explorer.static_html()
    assert "staticModel(" in page and "export default" not in page and "</script" in page
    assert page.count("</script>") == 1  # the state cannot end the script early


def test_frames_asked_on_another_thread_while_tracks_are_drawn_carry_their_own_numbers():
    # ipykernel may read a comm's messages on another thread than the loop drawing the tracks;
    # both draw into the explorer's one figure, so each frame and track is checked against a
    # fresh figure at its own settings
    import random
    import threading

    explorer = widgets.safeguard_explorer()
    sent, rng = [], random.Random(0)
    explorer.send = lambda content, buffers=None: sent.append((content, buffers))
    keys = list(explorer._controls)

    def ask():
        for _ in range(25):
            key = rng.choice(keys)
            values = {**explorer.values, key: rng.randrange(len(explorer._controls[key].stops))}
            explorer._message(None, {"frame": values}, [])

    async def talk():
        explorer._message(None, {"hello": True}, [])
        await asyncio.sleep(0.05)
        other = threading.Thread(target=ask)
        other.start()
        while other.is_alive():
            await asyncio.sleep(0.01)
        while explorer._queue or explorer._job:
            await asyncio.sleep(0.01)

    asyncio.run(talk())
    checked = 0
    for content, buffers in sent:
        track = unpack(buffers[0])
        every = range(0, len(track["numbers"]), 9)
        stops = ([content["at"]] if content["kind"] == "frame" else
                 [{**content["at"], content["name"]: i} for i in every])
        for values in stops:
            n = 0 if content["kind"] == "frame" else values[content["name"]]
            assert track["numbers"][n] == plain(explorer.plot(**explorer.settings(values)).numbers)
            checked += 1
    assert checked > 25


def test_a_rest_after_tracks_and_moves_is_laid_out_as_a_fresh_figure():
    # a track puts the axes where the last rest laid them out, which takes them out of the
    # layout; the next rest must lay them out again, as a fresh explorer does
    explorer = widgets.safeguard_explorer()
    start = dict(explorer.values)
    for key, control in explorer._controls.items():
        for stop in (0, len(control.stops) - 1):
            explorer.values = {**explorer.values, key: stop}
            explorer.track("a")
    for key in explorer._controls:
        explorer.values = {**explorer.values, key: start[key]}
    fresh = widgets.Explorer(explorer.plot, "fresh", **explorer._controls)
    assert unpack(explorer.frame)["ops"] == unpack(fresh.frame)["ops"]
    fresh.close()
