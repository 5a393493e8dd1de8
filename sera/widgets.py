"""The notebooks' interactive controls: labelled sliders around the sera.plotting functions.

Each explorer returns an ipywidgets `interactive`: moving a slider redraws the figure that the
figure cell draws with fixed values (sliders only display). Sliders update on release
(continuous_update=False) so that a redraw follows each move once; sliders whose ranges depend
on each other are linked (N_min <= N0 <= N_max), and a setting a figure cannot draw shows a short
message, never a traceback. Used by notebooks 01-03 and 08; needs ipywidgets (the notebooks extra).
"""

from __future__ import annotations

import sera.plotting as splot

LABEL = {"description_width": "initial"}
WIDTH = "600px"  # room for a long label and a usable slider track


def _float(value, low, high, step, label):
    import ipywidgets as widgets

    return widgets.FloatSlider(value=value, min=low, max=high, step=step, description=label,
                               continuous_update=False, style=LABEL,
                               layout=widgets.Layout(width=WIDTH))


def _int(value, low, high, label):
    import ipywidgets as widgets

    return widgets.IntSlider(value=value, min=low, max=high, description=label,
                             continuous_update=False, style=LABEL,
                             layout=widgets.Layout(width=WIDTH))


def _interactive(plot, **controls):
    import ipywidgets as widgets

    # auto_display: show the returned figure (what interact does; interactive alone does not)
    return widgets.interactive(plot, {"auto_display": True}, **controls)


def kappa_explorer():
    """kappa from the log-success series (notebook 01): success probability and rollouts."""
    return _interactive(splot.plot_kappa_slider,
                        p=_float(0.1, 0.01, 0.99, 0.01, "success probability p"),
                        n=_int(8, 2, 64, "rollouts N"))


def tilt_explorer():
    """How uniform counts tilt a two-prompt update (notebook 01)."""
    return _interactive(splot.plot_direction_tilt,
                        p1=_float(0.05, 0.01, 0.99, 0.01, "hard prompt p1"),
                        p2=_float(0.3, 0.01, 0.99, 0.01, "easy prompt p2"),
                        n=_int(8, 2, 64, "rollouts N each"),
                        angle_deg=_float(60, 10, 170, 5, "angle between gradients (deg)"))


def waterline_explorer():
    """The waterline on a Beta(a, b) batch (notebook 02), with N_min <= N0 <= N_max linked."""
    import ipywidgets as widgets

    n_min = _int(2, 2, 8, "fewest rollouts N_min")
    n0 = _int(8, 2, 64, "rollouts per prompt N0 (budget B x N0)")
    n_max = _int(64, 8, 256, "most rollouts N_max")
    _link(n_min, n0, n_max)
    return _interactive(
        splot.plot_waterline_beta,
        a=_float(0.5, 0.1, 5.0, 0.1, "Beta a (more: easier prompts)"),
        b=_float(1.5, 0.1, 5.0, 0.1, "Beta b (more: harder prompts)"),
        batch=_int(32, 4, 128, "prompts B"), n0=n0, n_min=n_min, n_max=n_max,
        method=widgets.Dropdown(options=["paper", "exact", "uniform"], value="paper",
                                description="integer rounding", style=LABEL),
        seed=_int(0, 0, 20, "random batch"))


def safeguard_explorer():
    """The observability safeguard on a Beta(a, b) batch (notebook 03), N0 <= N_max linked."""
    n0 = _int(8, 2, 32, "rollouts per prompt N0 (budget B x N0)")
    n_max = _int(64, 8, 256, "most rollouts N_max")
    _link(None, n0, n_max)
    return _interactive(
        splot.plot_safeguard_beta,
        a=_float(0.4, 0.1, 3.0, 0.1, "Beta a (more: easier prompts)"),
        b=_float(1.5, 0.1, 3.0, 0.1, "Beta b (more: harder prompts)"),
        batch=_int(40, 4, 128, "prompts B"), n0=n0, n_max=n_max,
        u_min=_float(0.3, 0.0, 0.95, 0.05, "safeguard threshold u_min"),
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
    import ipywidgets as widgets

    def choice(values, label, fmt=str):
        options = [(fmt(v), v) for v in sorted(set(values))]
        return widgets.SelectionSlider(options=options, value=options[0][1], description=label,
                                       continuous_update=False, style=LABEL,
                                       layout=widgets.Layout(width=WIDTH))

    return _interactive(lambda k, n_min, difficulty: splot.plot_regime_slider(
        gains, k, n_min, difficulty),
        k=choice(gains["k"], "Pass@K, K"),
        n_min=choice(gains["n_min"], "fewest rollouts n_min"),
        difficulty=choice(gains["difficulty"], "prompts harder (odds divided by)",
                          lambda v: f"x{v:g}"))
