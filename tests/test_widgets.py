"""The notebooks' sliders, driven without a browser: every control to its ends and the two-slider
combinations that once reached an infeasible budget; each move must redraw (the explorer's one
figure, in place) and never raise. tests/test_browser.py drives the same controls in JupyterLab."""

import asyncio
import io
import time

import numpy as np
import PIL.Image
import pytest
from matplotlib.figure import Figure

ipywidgets = pytest.importorskip("ipywidgets")
import sera.plotting as splot  # noqa: E402
import sera.teaching.widgets  # noqa: E402


def _controls(explorer):
    return explorer.controls


def _shown(explorer) -> np.ndarray:
    """The pixels of the PNG the page was last sent."""
    return np.asarray(PIL.Image.open(io.BytesIO(explorer.image.value))).astype(int)


def _shows_the_canvas(explorer) -> bool:
    """The page was sent the figure as the canvas holds it now, losslessly, at the figure's
    own width in pixels."""
    canvas = np.asarray(explorer.figure.canvas.buffer_rgba()).astype(int)
    width = explorer.figure.canvas.get_width_height()[0]
    return np.array_equal(_shown(explorer), canvas) and explorer.image.layout.width == \
        f"{width}px"


def _move(explorer, widget, value):
    figure, draws, old = explorer.figure, explorer.draws, widget.value
    start = time.perf_counter()
    widget.value = value
    seconds = time.perf_counter() - start
    assert explorer.figure is figure and isinstance(figure, Figure)  # redrawn in place
    if widget.value != old:  # a move (not to where it already was) redraws
        assert explorer.draws > draws, f"{widget.description} = {value} did not redraw"
    return seconds


@pytest.mark.parametrize("name", sorted(sera.teaching.widgets.EXPLORERS))
def test_every_control_redraws_at_its_ends(name):
    explorer = sera.teaching.widgets.EXPLORERS[name]()
    assert isinstance(explorer.figure, Figure) and explorer.image in explorer.children
    assert _shows_the_canvas(explorer)  # the first figure
    controls = _controls(explorer).values()
    assert all(getattr(control, "continuous_update", True) for control in controls)
    times = []
    for key, control in _controls(explorer).items():
        assert control.description != key and " " in control.description  # readable labels
        values = list(control.options) if hasattr(control, "options") else [control.min,
                                                                             control.max]
        for value in values:
            times.append(_move(explorer, control, value))
            assert _shows_the_canvas(explorer), (key, value)  # each redraw reaches the page
    print(f"{name}: {len(times)} redraws, median {sorted(times)[len(times) // 2]:.3f} s")


@pytest.mark.parametrize("name, moves", [
    ("waterline", [("n_min", 8), ("n0", 7)]),
    ("waterline", [("n_max", 8), ("n0", 64), ("n_min", 8)]),
    ("safeguard", [("n_max", 8), ("n0", 9)]),
    ("safeguard", [("n0", 32), ("n_max", 8)]),
])
def test_linked_sliders_never_reach_an_infeasible_budget(name, moves):
    explorer = sera.teaching.widgets.EXPLORERS[name]()
    controls = _controls(explorer)
    for key, value in moves:
        _move(explorer, controls[key], value)
        texts = [t.get_text() for ax in explorer.figure.axes for t in ax.texts]
        assert not any("does not fit" in t for t in texts), (moves, texts)
    n_min = controls["n_min"].value if "n_min" in controls else 2
    assert n_min <= controls["n0"].value <= controls["n_max"].value


def test_an_infeasible_setting_shows_a_message_not_a_traceback():
    import sera.plotting as splot

    fig = splot.plot_waterline_beta(n0=7, n_min=8)
    assert "does not fit the bounds" in fig.axes[0].texts[0].get_text()
    fig = splot.plot_safeguard_beta(n0=9, n_max=8)
    assert "does not fit the bounds" in fig.axes[0].texts[0].get_text()


def test_regime_explorer_moves_over_every_simulated_setting():
    from sera.studies import simulate

    p0 = [0.02, 0.1, 0.3, 0.6] * 4
    base = simulate.SimulationConfig(eval_every=4, batch_size=4)
    table = simulate.regime_map(p0, [4], steps=8, repetitions=2, base=base)
    sweep = simulate.predicted_gain(table).assign(profile="toy", n_min=2, difficulty=1.0)
    explorer = sera.teaching.widgets.regime_explorer(sweep)
    for control in _controls(explorer).values():
        assert " " in control.description
        for value in [v for _, v in control.options]:
            _move(explorer, control, value)


def test_an_explorer_shows_its_initial_figure_and_a_rerun_closes_the_old_one():
    import base64
    import gc

    first = sera.teaching.widgets.kappa_explorer()
    bundle = first._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # live in JupyterLab
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")  # static elsewhere
    gc.collect()
    alive = len(ipywidgets.widgets.widget._instances)
    for _ in range(3):
        sera.teaching.widgets.kappa_explorer()  # the cell run again
    gc.collect()
    assert first.comm is None and first.image.comm is None
    assert len(ipywidgets.widgets.widget._instances) == alive  # nothing piles up


def _settled_png(figure, draws: int = 6) -> bytes:
    """The figure's PNG once a further draw no longer changes it: the constrained layout can
    move a title or a legend by a pixel between the first draws of a figure."""
    last = figure._repr_png_()
    for _ in range(draws):
        png = figure._repr_png_()
        if png == last:
            return png
        last = png
    raise AssertionError(f"the figure still changes after {draws} draws")


@pytest.mark.parametrize("name", sorted(sera.teaching.widgets.EXPLORERS))
def test_the_live_figure_is_the_figure_a_cell_draws(name):
    # redrawn in place (into the axes it drew last time), the explorer's figure has the same
    # pixels as a fresh call of its plot, once both have settled
    explorer = sera.teaching.widgets.EXPLORERS[name]()
    for control in _controls(explorer).values():
        _move(explorer, control, list(control.options)[-1] if hasattr(control, "options")
              else control.max)
        fresh = explorer.plot(**explorer.values())
        assert _settled_png(explorer.figure) == _settled_png(fresh), control.description


@pytest.mark.parametrize("name, key, values", [
    ("kappa", "p", np.linspace(0.1, 0.5, 12).round(2)),
    ("tilt", "p1", np.linspace(0.05, 0.5, 12).round(2)),
    ("waterline", "a", np.linspace(0.5, 1.0, 12).round(1)),
    ("safeguard", "a", np.linspace(0.4, 0.9, 12).round(1)),
])
def test_a_drag_repaints_the_axes_contents_over_a_saved_background(name, key, values):
    # in a kernel loop (a live notebook), frames after the first keep the axes and paint only
    # what is drawn in them; the frame on the canvas is the figure a full draw gives, except
    # that grid lines pass under the bars during the drag and over them at rest (under 1% of
    # the pixels differ by more than two levels of 255: a legend copied from its picture differs
    # from one drawn in place by at most one, which this leaves a level of room over), and the
    # figure at rest is drawn whole
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    explorer = sera.teaching.widgets.EXPLORERS[name]()
    figure, control = explorer.figure, explorer.controls[key]

    async def drag():
        for value in values:
            control.value = value
            await asyncio.sleep(0)  # the frame runs, as between two moves of the hand
        blitted = np.asarray(figure.canvas.buffer_rgba()).astype(int)
        assert np.array_equal(_shown(explorer), blitted)  # the page gets the frame as painted
        for artist in sera.teaching.widgets._moving(figure):
            artist.set_animated(False)
        engine = figure.get_layout_engine()
        figure.set_layout_engine("none")  # the drag's layout, drawn whole
        FigureCanvasAgg.draw(figure.canvas)
        figure.set_layout_engine(engine)
        return blitted, np.asarray(figure.canvas.buffer_rgba()).astype(int)

    async def drag_and_rest():
        frames = await drag()
        await asyncio.sleep(3 * sera.teaching.widgets.SETTLE)
        return frames

    blitted, whole = asyncio.run(drag_and_rest())
    assert _shows_the_canvas(explorer)  # the figure laid out at rest reaches the page
    assert explorer.draws >= 4 and explorer.blits >= explorer.draws / 2, \
        (explorer.draws, explorer.blits)
    differ = (np.abs(blitted - whole).max(axis=-1) > 2).mean()
    assert differ < 0.01, f"{differ:.2%} of the pixels differ from a full draw"
    # at rest the figure is laid out again: the one a cell draws
    fresh = explorer.plot(**explorer.values())
    assert _settled_png(explorer.figure) == _settled_png(fresh)


def test_a_legend_is_painted_from_its_picture_to_within_one_level():
    # the picture of a legend (drawn alone on a transparent canvas) copied over the figure gives
    # the pixels of the legend drawn in place, to within one level of 255; a legend that looks
    # the same is painted from the picture it already has, a changed one gets its own
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from sera.teaching.widgets import _paint

    def painted(figure, pictures):
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        whole = np.asarray(canvas.buffer_rgba()).astype(int)
        legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None]
        for legend in legends:
            legend.set_animated(True)
        canvas.draw()
        behind = np.asarray(canvas.buffer_rgba()).astype(int)
        _paint(figure, legends, pictures)
        return whole, behind, np.asarray(canvas.buffer_rgba()).astype(int), len(legends)

    pictures = {}
    for method, count in (("paper", 2), ("paper", 2), ("exact", 3)):
        whole, behind, copied, legends = painted(splot.plot_waterline_beta(method=method),
                                                 pictures)
        assert legends == 2 and len(pictures) == count, (method, len(pictures))
        assert (np.abs(whole - behind).max(axis=-1) > 2).sum() > 1000  # the legends' pixels
        assert np.abs(whole - copied).max() <= 1, method


def test_a_move_from_the_page_redraws_without_an_echo_and_linked_ranges_still_reach_it():
    explorer = sera.teaching.widgets.waterline_explorer()
    sent = []

    def recording(widget):
        return lambda msg, buffers=None: sent.append((widget, msg))

    for control in explorer.controls.values():
        control._send = recording(control)
    n0, n_max, before = explorer.controls["n0"], explorer.controls["n_max"], explorer.draws
    n0.set_state({"value": 40})  # as a message from the page sets it
    assert n0.value == 40 and explorer.draws == before + 1
    assert not [msg for _, msg in sent if msg["method"] == "echo_update"], sent
    # what the kernel changes in turn (N_max's lower end follows N0) is sent as an update
    assert any(widget is n_max and msg["state"].get("min") == 40 for widget, msg in sent), sent
    # a stock slider echoes the same move (what the explorer's sliders leave out)
    stock = ipywidgets.IntSlider(value=8, min=2, max=64)
    stock._send = recording(stock)
    stock.set_state({"value": 40})
    assert [msg["method"] for widget, msg in sent if widget is stock] == ["echo_update"]


def test_a_title_drawn_again_unchanged_is_painted_from_its_picture():
    # the first time a title looks as it does it is drawn in place and noted; the second time
    # it is painted from its picture, to within one level of 255 of the title drawn in place
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from sera.teaching.widgets import _paint

    def painted(title, pictures):
        fig, ax = splot.new_figure()
        ax.plot([0, 1], [0, 1])
        ax.set_title(title)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        whole = np.asarray(canvas.buffer_rgba()).astype(int)
        ax.title.set_animated(True)
        canvas.draw()
        behind = np.asarray(canvas.buffer_rgba()).astype(int)
        _paint(fig, [ax.title], pictures)
        return whole, behind, np.asarray(canvas.buffer_rgba()).astype(int)

    pictures = {}
    for title, kinds in (("c = 0.5", [bool]), ("c = 0.5", [tuple]),
                         ("c = 0.6", [tuple, bool]), ("c = 0.5", [tuple, bool])):
        whole, behind, copied = painted(title, pictures)
        assert sorted(type(p).__name__ for p in pictures.values()) == \
            sorted(k.__name__ for k in kinds), (title, pictures.values())
        assert (np.abs(whole - behind).max(axis=-1) > 2).sum() > 50  # the title's pixels
        assert np.abs(whole - copied).max() <= 1, title


def test_a_legend_look_tells_apart_what_changes_its_pixels():
    # two figures drawn alike have legends that look alike; a dash pattern, a marker or a
    # font weight alone makes another look (and so another picture)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from sera.teaching.widgets import _look

    def look(ls=(0, (6, 2)), marker="o", weight="normal"):
        fig, ax = splot.new_figure()
        ax.plot([0, 1], [0, 1], ls=ls, label="line")
        ax.errorbar([0.5], [0.5], yerr=[0.1], marker=marker, label="point")
        ax.legend(prop={"weight": weight})
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        return _look(ax.get_legend(), canvas.get_renderer())

    assert look() == look()
    assert look(ls=(0, (1, 1))) != look()
    assert look(marker="s") != look()
    assert look(weight="bold") != look()
