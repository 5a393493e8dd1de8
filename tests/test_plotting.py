"""The plotting functions behind the sliders, called directly (interact swallows exceptions),
and the promise that saved figures are byte-identical from run to run."""

import numpy as np
import pytest
from matplotlib.figure import Figure

import sera.plotting as splot
import sera.studies.analysis


@pytest.mark.parametrize("p, n", [(0.01, 2), (0.1, 8), (0.99, 64), (0.5, 3)])
def test_kappa_slider_at_its_corners(p, n):
    fig = splot.plot_kappa_slider(p=p, n=n)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert f"{float(sera.kappa(p, n)):.3f}" in fig.axes[1].get_title()


@pytest.mark.parametrize("p1, p2, n, angle", [(0.05, 0.6, 8, 60), (0.99, 0.01, 2, 10),
                                              (0.5, 0.5, 64, 170), (0.05, 0.3, 8, 60)])
def test_direction_tilt(p1, p2, n, angle):
    fig = splot.plot_direction_tilt(p1, p2, n, angle)
    assert isinstance(fig, Figure)
    v = splot.fidelity.tilt_vectors(p1, p2, n, angle)
    assert sum(v["counts"]) == pytest.approx(2 * n)
    if min(v["counts"]) > 2 + 1e-9:  # both unclipped: the waterline equalizes kappa exactly
        assert v["tilt_equalized"] == pytest.approx(0.0, abs=1e-6)
    else:  # N_min binds for the easy prompt: the tilt shrinks but need not vanish
        assert v["tilt_equalized"] <= v["tilt_uniform"] + 1e-9
    if p1 == p2:
        assert v["tilt_uniform"] == pytest.approx(0.0, abs=1e-6)


def test_uniform_counts_tilt_towards_the_easy_prompt():
    v = splot.fidelity.tilt_vectors(0.05, 0.3, 8, 60)
    assert v["tilt_uniform"] > 5 and v["tilt_equalized"] < 1e-5
    # The easy prompt's direction (g2) gains: the uniform update is closer to g2 than exact is.
    def angle(u, w):
        return np.arccos(u @ w / np.linalg.norm(u) / np.linalg.norm(w))
    assert angle(v["uniform"], v["g2"]) < angle(v["exact"], v["g2"])


@pytest.mark.parametrize("method", ["paper", "exact", "uniform"])
@pytest.mark.parametrize("a, b, batch, n0, n_min, n_max", [
    (0.5, 1.5, 32, 8, 2, 64), (0.1, 0.1, 4, 2, 2, 8), (5.0, 0.1, 128, 64, 8, 256),
    (1.0, 1.0, 7, 3, 3, 8)])
def test_waterline_slider_over_its_range(a, b, batch, n0, n_min, n_max, method):
    if n0 < n_min:
        n0 = n_min
    fig = splot.plot_waterline_beta(a, b, batch, n0, n_min, n_max, method, seed=3)
    assert len(fig.axes) == 2
    counts = fig.axes[0].collections[0]  # the integer counts, one bar per prompt
    heights = [path.vertices[:, 1].max() for path in counts.get_paths()]
    assert len(heights) == batch and sum(heights) == pytest.approx(batch * n0)


def test_waterline_slider_says_why_it_cannot_draw():
    fig = splot.plot_waterline_beta(1, 1, batch=8, n0=2, n_min=4, n_max=64)
    assert "N0 must lie between N_min = 4 and N_max = 64" in fig.axes[0].texts[0].get_text()


@pytest.mark.parametrize("u_min", [0.0, 0.3, 0.95])
def test_safeguard_slider(u_min):
    p = np.random.default_rng(0).beta(0.4, 1.5, 40)
    fig = splot.plot_safeguard(p, 320, 2, 64, u_min)
    assert isinstance(fig, Figure)


def test_table_figures_draw():
    table = sera.studies.analysis.compare_rounding(instances=60, seed=1)
    assert isinstance(splot.plot_rounding_gap(table), Figure)
    conc = sera.studies.analysis.budget_concentration([1e-4, 1e-2], [0.2, 0.5], budget=24)
    assert isinstance(splot.plot_budget_concentration(conc), Figure)
    study = sera.studies.analysis.reweighting_study([0.05, 0.3, 0.7], n0=4, draws=500)
    assert isinstance(splot.plot_reweighting(study), Figure)
    for fig in (splot.plot_kappa_curves(), splot.plot_rollouts_for_fidelity(),
                splot.plot_mixed_probability(), splot.plot_allocation_vs_success(batch=16)):
        assert isinstance(fig, Figure)


def test_saved_figures_are_byte_identical(tmp_path):
    first = splot.savefig(splot.plot_waterline_beta(seed=2), "w", tmp_path / "a")
    second = splot.savefig(splot.plot_waterline_beta(seed=2), "w", tmp_path / "b")
    for x, y in zip(first, second, strict=True):
        assert x.read_bytes() == y.read_bytes(), x.name
    different = splot.savefig(splot.plot_waterline_beta(seed=3), "w", tmp_path / "c")
    assert different[0].read_bytes() != first[0].read_bytes()


def test_saved_figures_keep_no_clock_or_software_version(tmp_path, monkeypatch):
    # The same figure saved at two moments, by two versions of matplotlib, in two different
    # ambient matplotlib settings (a matplotlibrc, a style, a notebook's rcParams): the same
    # bytes, so that rerunning a notebook changes a tracked figure only when its picture does.
    import matplotlib as mpl

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    first = splot.savefig(splot.plot_kappa_slider(p=0.1, n=8), "k", tmp_path / "a")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "2000000000")
    monkeypatch.setattr(mpl, "__version__", "99.0.0")
    ambient = {"savefig.transparent": True, "savefig.bbox": "tight", "savefig.pad_inches": 0.5,
               "savefig.facecolor": "0.9", "pdf.compression": 9, "pdf.fonttype": 3}
    with mpl.rc_context(ambient):
        second = splot.savefig(splot.plot_kappa_slider(p=0.1, n=8), "k", tmp_path / "b")
    for x, y in zip(first, second, strict=True):
        assert x.read_bytes() == y.read_bytes(), x.name
    info = first[1].read_bytes()
    for word in (b"CreationDate", b"ModDate", b"Producer", b"Creator", b"atplotlib"):
        assert word not in info, word
    assert b"atplotlib" not in first[0].read_bytes()  # no PNG Software chunk


def test_a_saved_figure_shows_the_png_it_wrote_until_it_changes(tmp_path):
    fig = splot.plot_kappa_curves()
    drawn = fig._repr_png_()  # unsaved: drawn at the display resolution
    assert isinstance(drawn, bytes)
    png = splot.savefig(fig, "curves", tmp_path)[0]
    shown, size = fig._repr_png_()
    assert shown == png.read_bytes() and len(shown) > len(drawn)
    assert size == {"width": round(fig.get_figwidth() * fig.DISPLAY_DPI),
                    "height": round(fig.get_figheight() * fig.DISPLAY_DPI)}
    fig.axes[0].set_title("changed after saving")
    assert fig._repr_png_() not in (shown, drawn)  # drawn again, with the new title


def test_savefig_rejects_paths_as_names(tmp_path):
    with pytest.raises(ValueError, match="plain file stem"):
        splot.savefig(splot.plot_kappa_curves(), "../escape", tmp_path)


def study_tables():
    """A small metrics table and final table in the runs' long format."""
    import pandas as pd

    rows, final = [], []
    for method, u_min in (("ce", None), ("maxrl", None), ("sera-oracle", 0.05), ("sera", 0.05),
                          ("sera", 0.5)):
        for seed in (0, 1):
            keys = {"method": method, "seed": seed, "n0": 4, "agg": "response-mean",
                    "u_min": u_min}
            for step in range(0, 20, 5):
                rows.append({**keys, "step": step, "metric": "cosine", "k": None,
                             "value": 0.5 + 0.01 * step})
                for k in (1, 128):
                    rows.append({**keys, "step": step, "metric": "val_pass", "k": k,
                                 "value": 0.1 + 0.02 * step})
                if method == "sera":
                    for name, value in (("history_mae", 0.2), ("history_pearson", -0.1),
                                        ("ideal_mae", 0.1), ("ideal_pearson", 0.9)):
                        rows.append({**keys, "step": step, "metric": name, "k": None,
                                     "value": value})
            for k in (1, 2, 4, 128):
                rows.append({**keys, "step": 20, "metric": "pass", "k": k,
                             "value": 1 - 0.5**k})
            final += [{**keys, "prompt": q, "p": p} for q, p in enumerate((0.2, 0.5, 0.9))]
    return pd.DataFrame(rows), pd.DataFrame(final)


def test_study_figures_draw_from_the_long_tables():
    import pandas as pd

    import sera.results

    metrics, final = study_tables()
    assert len(splot.plot_cosine_over_training(metrics).axes) == 1
    fig = splot.plot_validation_over_training(metrics, ks=(1, 128))
    assert len(fig.axes) == 2
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"ce", "maxrl", "sera", "sera-oracle", "sera (u_min 0.5)"} <= labels
    assert len(splot.plot_passk_profile(sera.results.passk_profile(final)).axes) == 1
    snapshot = pd.DataFrame({"p_hat": [0.2, 0.5, 0.9], "p_exact": [0.1, 0.6, 0.95],
                             "available": [True, True, True]})
    fig = splot.plot_history_estimates(snapshot, metrics)
    assert len(fig.axes) == 2 and fig.axes[1].get_ylim()[0] < -0.1  # Pearson below 0 shows


def test_maze_figures_draw():
    import pandas as pd

    from sera.tasks import maze

    grid = maze.generate(9, np.random.default_rng(0))
    good = maze.shortest_path(grid) + ["DONE"]
    fig = splot.plot_maze_paths(grid, [good, ["UP", "DONE"], ["garbage"]], [1.0, 0.0, 0.0])
    assert "correct (1)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    rows = []
    for method, agg in (("maxrl", "token-mean"), ("sera", "seqnorm")):
        for step in range(0, 10, 5):
            for k in (1, 16):
                rows.append((step, method, 0, 8, "val_pass", k, 0.3, agg))
            for metric in ("train_reward", "mixed_groups", "token_entropy", "response_length",
                           "grad_norm", "allocation_spread"):
                rows.append((step, method, 0, 8, metric, None, 0.3, agg))
    table = pd.DataFrame(rows, columns=["step", "method", "seed", "n0", "metric", "k", "value",
                                        "agg"])
    assert len(splot.plot_sequence_validation(table).axes) == 2
    assert len(splot.plot_training_diagnostics(table).axes) == 6
    profile = pd.DataFrame({"method": ["maxrl"] * 3, "agg": ["token-mean"] * 3, "k": [1, 2, 4],
                            "pass@k": [0.2, 0.3, 0.4]})
    gains = pd.DataFrame({"agg": ["token-mean"] * 3, "k": [1, 2, 4], "gain": [0.0, 0.01, 0.02],
                          "low": [-0.1, -0.1, -0.1], "high": [0.1, 0.1, 0.1]})
    assert len(splot.plot_sequence_profile(profile, gains).axes) == 2
    allocations = pd.DataFrame({"step": [1, 2], "prompt": [0, 1], "estimate": [0.1, 0.8],
                                "rollouts": [20, 2]})
    assert isinstance(splot.plot_allocation_vs_estimate(allocations, 8), Figure)




def test_comparison_figures_draw():
    import pandas as pd

    import sera.results

    p = np.array([0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9])
    fig = splot.plot_allocators(p, 64, 2, 32, ["exact", "paper", "knapsack", "gvm"])
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert {"sera", "sera (exact)", "knapsack", "gvm", "uniform N0"} <= labels
    rows = []
    for method in ("sera", "dapo", "knapsack-maxrl"):
        for seed in (0, 1):
            for step in range(4):
                rows.append({"method": method, "seed": seed, "step": step, "metric": "rollouts",
                             "k": None, "value": 100.0 * (3 if method == "dapo" else 1)})
                rows.append({"method": method, "seed": seed, "step": step, "metric": "val_pass",
                             "k": 1, "value": 0.1 * step})
    fig = splot.plot_against_budget(pd.DataFrame(rows), "val_pass", k=1)
    assert len(fig.axes) == 4  # one row per family (rule, sequential), steps and rollouts
    rights = fig.axes[1::2]
    assert all(ax.get_xscale() == "log" for ax in rights)
    assert max(line.get_xdata().max() for ax in rights for line in ax.get_lines()) == 900
    for ax in fig.axes[::2]:  # SERA in every facet, at most six lines in each
        names = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "sera" in names and len(names) <= 6
    final = pd.DataFrame([{"method": m, "seed": s, "prompt": q, "p": p}
                          for m, p0 in (("sera", 0.5), ("maxrl", 0.4), ("dapo", 0.6))
                          for s in (0, 1) for q, p in enumerate(np.full(30, p0) + 0.01 * s)])
    gains = sera.results.gains_against(final, "sera", by=(), ks=[1, 4], n_resamples=500)
    assert set(gains["method"]) == {"maxrl", "dapo"}
    assert len(splot.plot_gains(gains).axes) == 2


def test_one_style_per_method_and_no_grey_fallback():
    from sera.allocation import METHODS as ALLOCATION_METHODS
    from sera.methods import METHODS

    names = set(METHODS) | set(ALLOCATION_METHODS)
    assert names <= set(splot.STYLES), names - set(splot.STYLES)
    colors = {name: splot.method_style(name).color for name in METHODS}
    assert "#7f7f7f" not in colors.values()
    for name in METHODS:  # a rule and its -maxrl variant: one colour, the variant dashed
        if name.endswith("-maxrl"):
            base = splot.method_style(name.removesuffix("-maxrl"))
            assert (colors[name], splot.method_style(name).ls) == (base.color, "--")
    with pytest.raises(KeyError, match="add it to sera.plotting.style.STYLES"):
        splot.method_style("no-such-method")


def _regime_gains():
    from sera.studies import simulate

    p0 = np.random.default_rng(0).beta(0.5, 2, 32)
    base = simulate.SimulationConfig(eval_every=4, batch_size=8)
    table = simulate.regime_map(p0, [4, 8], steps=8, repetitions=3, base=base)
    return simulate.predicted_gain(table)


def test_regime_figures_draw_with_one_cell_per_setting():
    import pandas as pd

    gains = _regime_gains()
    both = pd.concat([gains.assign(profile="easy"), gains.assign(profile="hard")])
    fig = splot.plot_regime_map(both, k=1)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["easy", "hard"]
    assert len(panels[0].texts) == 2 * 2  # two N0 x two evaluation steps after step 0
    assert isinstance(splot.plot_regime_diagnostics(both, k=1), Figure)
    assert isinstance(splot.plot_difficulty_profiles({"a": [0.1, 0.5], "b": [0.0, 0.9]}),
                      Figure)
    sweep = both.assign(n_min=2, difficulty=1.0)
    assert isinstance(splot.plot_regime_slider(sweep, 1, 2, 1.0), Figure)
    message = splot.plot_regime_slider(sweep, 1, 4, 1.0)  # a setting that was not simulated
    assert "not simulated" in message.axes[0].texts[0].get_text()


def test_gain_figures_draw_each_seed_beside_the_interval():
    import pandas as pd

    import sera.results

    final = pd.DataFrame([{"method": m, "seed": s, "prompt": q, "agg": "token-mean",
                           "p": p0 + 0.02 * s}
                          for m, p0 in (("sera", 0.5), ("maxrl", 0.4)) for s in range(4)
                          for q in range(10)])
    gains = sera.results.paired_gain(final, ks=[1, 4])
    fig = splot.plot_sequence_profile(sera.results.passk_profile(final, ks=[1, 4]), gains)
    hollow = [c for c in fig.axes[1].collections if len(c.get_offsets()) == 4]
    assert len(hollow) == 2  # one set of 4 seed points per K
    assert "4 seeds" in fig.axes[1].get_title()
    against = sera.results.gains_against(final, "maxrl", by=(), ks=[1])
    fig = splot.plot_gains(against, reference="maxrl")
    assert any(len(c.get_offsets()) == 4 for c in fig.axes[0].collections)


def test_the_safeguard_draws_dropped_prompts_below_the_line_they_were_dropped_for():
    p = np.random.default_rng(0).beta(0.4, 1.5, 40)
    fig = splot.plot_safeguard(p, 40 * 8, 2, 64, u_min=0.3)
    right = fig.axes[1]
    dropped = next(ln for ln in right.get_lines() if ln.get_label().startswith("dropped"))
    assert len(dropped.get_ydata()) > 0 and max(dropped.get_ydata()) < 0.3


def test_the_safeguard_count_axis_stays_put_while_the_batch_changes():
    # the count axis is set by the cap (a slider's drag over a and b keeps its ticks, so its
    # track's frames share one backdrop), and it holds every count with the cap line in view
    limits = set()
    for a in np.linspace(0.1, 3.0, 30):
        fig = splot.plot_safeguard_beta(a=a, b=1.5, n0=8, n_max=64)
        left = fig.axes[0]
        counts = max(max(ln.get_ydata(), default=0) for ln in left.get_lines()[:2])
        cap = next(ln for ln in left.get_lines() if ln.get_label() == "cap 64")
        assert counts <= 64 == cap.get_ydata()[0] < left.get_ylim()[1]
        limits.add(left.get_ylim())
    assert len(limits) == 1, limits
    # a budget below N_max caps the counts instead
    fig = splot.plot_safeguard_beta(batch=4, n0=4, n_max=64)
    assert any(ln.get_label() == "cap 16" for ln in fig.axes[0].get_lines())


def test_the_tilt_arrows_differ_in_hue_and_the_axes_are_labelled():
    fig = splot.plot_direction_tilt()
    ax = fig.axes[0]
    colors = [ln.get_color() for ln in ax.get_lines()]
    assert len(set(colors)) == len(colors) == 5
    assert ax.get_xlabel() and ax.get_ylabel()


def test_the_sera_variants_are_told_apart():
    from sera.plotting.study import _style

    named = ["sera", "sera-oracle", "sera-rate", "sera-rate-safeguard"]
    arms = [_style(name) for name in named] + [_style("sera (u_min 0.5)")]
    assert len({(a["color"], a["ls"]) for a in arms}) == 5
    assert len({_style(name)["color"] for name in named}) == 4  # every named SERA its colour
    assert len({_style(name)["ls"] for name in named}) == 4


def test_confirmation_figure_has_one_panel_per_arm_and_every_seed():
    import pandas as pd

    rows = []
    for arm in ("sera-rate", "sera-rate-safeguard"):
        for k in (1, 8):
            rows.append({"arm": arm, "k": k, "predicted": 0.01, "predicted_low": 0.0,
                         "predicted_high": 0.02, "measured": 0.02, "low": -0.01, "high": 0.05,
                         "seeds": 3, "per_seed": (0.0, 0.02, 0.04)})
    fig = splot.plot_confirmation(pd.DataFrame(rows), title="t")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["sera-rate - maxrl (3 seeds)",
                                                 "sera-rate-safeguard - maxrl (3 seeds)"]
    seed_dots = [c for c in panels[0].collections if c.get_offsets().shape[0] == 3]
    assert len(seed_dots) == 2  # one hollow dot per seed at each K
    empty = splot.plot_confirmation(pd.DataFrame(columns=["arm"]))
    assert "no stored runs" in empty.axes[0].texts[0].get_text()


def test_departure_figure_draws_each_source_and_band():
    import pandas as pd

    from sera.studies import diagnosis

    rows = []
    for source in ("measured", "simulated"):
        for arm in ("maxrl", "sera-rate"):
            for seed in range(3):
                for epoch in range(2):
                    for prompt, successes in enumerate((0, 2, 4)):
                        rows.append({"method": arm, "u_min": float("nan"), "seed": seed,
                                     "epoch": epoch, "prompt": prompt, "rollouts": 4,
                                     "successes": (successes + seed + (arm == "sera-rate")) % 5,
                                     "source": source})
    table = pd.DataFrame(rows)
    parts = [(diagnosis.training_curves(t).assign(source=s),
              diagnosis.band_gains(t, [0.0, 0.1, 0.5]).assign(source=s))
             for s, t in table.groupby("source")]
    curves, bands = (pd.concat(p) for p in zip(*parts, strict=True))
    fig = splot.plot_departure(curves, bands, "t")
    assert len(fig.axes[0].lines) == 4 and len(fig.axes[1].lines) == 4  # 2 arms x 2 sources
    ticks = [t.get_text() for t in fig.axes[2].get_xticklabels()]
    assert ticks == ["never solved", "(0, 0.25]", "(0.25, 0.75]"]
    empty = splot.plot_departure(curves.iloc[:0], bands)
    assert "no training rollouts" in empty.axes[0].texts[0].get_text()


def test_drift_figure_draws_every_seed_and_each_arms_mean():
    import pandas as pd

    rows = []
    for arm in ("maxrl", "sera-rate"):
        for seed in range(3):
            for step in range(0, 101):
                rows.append({"method": arm, "estimates": "none", "allocator": "uniform",
                             "n0": 4, "agg": "token-mean", "u_min": float("nan"), "seed": seed,
                             "step": step, "metric": "response_length", "k": float("nan"),
                             "value": 40.0 - (arm == "sera-rate") * step / 10})
                if step % 50 == 0:
                    rows.append({**rows[-1], "metric": "val_pass", "k": 1.0, "value": 0.2})
    fig = splot.plot_drift(pd.DataFrame(rows), title="t")
    assert len(fig.axes[0].lines) == len(fig.axes[1].lines) == 2 * (3 + 1)
    mean_sera = fig.axes[1].lines[-1]
    assert mean_sera.get_label() == "sera-rate (3 seeds)"
    assert mean_sera.get_ydata()[-1] == pytest.approx(40 - (81 + 100) / 2 / 10)  # last 20 steps
    assert "Pass@1" in fig.axes[0].get_ylabel()
    missing = splot.plot_drift(pd.DataFrame(rows), panels=(("token_entropy", None),))
    assert "no token_entropy" in missing.axes[0].texts[0].get_text()


def test_arms_figure_draws_every_arm_at_every_k_with_its_seeds():
    import pandas as pd

    rows = [{"arm": arm, "k": k, "predicted": 0.01 if arm == "sera" else float("nan"),
             "measured": 0.02 * i, "low": 0.02 * i - 0.03, "high": 0.02 * i + 0.03,
             "seeds": 4, "per_seed": (0.0, 0.01, 0.02, 0.03)}
            for i, arm in enumerate(("sera-rate", "sera", "sera-rate nmin-3")) for k in (1, 8)]
    fig = splot.plot_arms(pd.DataFrame(rows), ks=(1, 8), title="t")
    assert [ax.get_title() for ax in fig.axes] == ["Pass@1", "Pass@8"]
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["sera-rate (4 seeds)", "sera (4 seeds)", "sera-rate nmin-3 (4 seeds)"]
    hollow = [c for c in fig.axes[0].collections if c.get_offsets().shape[0] == 4]
    assert len(hollow) == 3  # every seed of every arm
    diamonds = [ln for ln in fig.axes[0].lines if ln.get_marker() == "D"]
    assert len(diamonds) == 1  # only the arm with a prediction
    assert "no stored runs" in splot.plot_arms(pd.DataFrame(rows), ks=(32,)).axes[0].texts[
        0].get_text()
    # two points in one figure: each arm named with its point, the same arm twice
    both = pd.concat([pd.DataFrame(rows).assign(point="a"), pd.DataFrame(rows[:2]).assign(
        point="b", seeds=6)])
    fig = splot.plot_arms(both, ks=(1, 8))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["a: sera-rate (4 seeds)", "a: sera (4 seeds)",
                      "a: sera-rate nmin-3 (4 seeds)", "b: sera-rate (6 seeds)"]
    assert len([c for c in fig.axes[1].collections if c.get_offsets().shape[0] == 4]) == 4


@pytest.mark.parametrize("value", [1e-9, 0.003, 0.7, 1.0, 1.01, 1.5, 7.9, 8.0, 8.01, 23.0, 64.0,
                                   86.4, 1e12 + 1])
def test_headroom_is_the_next_step_of_the_axis_limit_ladder(value):
    from sera.plotting.style import headroom

    ladder = sorted(s * 10.0 ** e for e in range(-12, 14) for s in (1, 1.5, 2, 3, 4, 5, 6, 8))
    assert headroom(value) == pytest.approx(min(v for v in ladder if v >= value * (1 - 1e-12)))


def test_bars_are_one_artist_with_the_heights_given():
    from sera.plotting.style import bars, new_figure

    fig, ax = new_figure()
    heights = np.array([3.0, 0.0, 7.5, 1.0])
    collection = bars(ax, np.arange(4), heights, color="#d62728", label="counts")
    tops = [path.vertices[:, 1].max() for path in collection.get_paths()]
    assert list(ax.collections) == [collection] and tops == pytest.approx(heights)
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > heights.max()  # rests on zero
    assert ax.get_legend_handles_labels()[1] == ["counts"]


def test_a_redrawn_figure_shows_its_last_legend_only_while_the_entries_look_the_same():
    # inside drawing_into, `legend` hands back the legend the axes had last time when the
    # keyword arguments and every entry's label and look are unchanged; a colour, a label, an
    # errorbar's marker or a keyword makes a new one; outside, every call makes a new one; a
    # figure drawn with a legend shown again has the pixels of one drawn afresh
    from sera.plotting.style import drawing_into, legend, new_figure

    def draw(fig=None, color="#d62728", label="counts", marker="o", loc="upper right"):
        def plot():
            fig, ax = new_figure()
            ax.plot([0, 1], [1, 2], color=color, label=label)
            ax.errorbar([0.5], [1.5], yerr=[0.2], marker=marker, label="point")
            return fig, legend(ax, loc=loc)

        if fig is None:
            return plot()
        with drawing_into(fig):
            return plot()

    def pixels(fig):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba()).copy()

    fig, made = draw()
    first = draw(fig)[1]
    assert first is not made and draw(fig)[1] is first
    for change in ({"color": "#1f77b4"}, {"label": "rollouts"}, {"marker": "s"},
                   {"loc": "lower left"}):
        changed = draw(fig, **change)[1]
        assert changed is not first, change
        assert draw(fig)[1] is not changed, change  # and back, a legend made again
    again = draw(fig)[1]
    assert draw(fig)[1] is again and draw()[1] is not draw()[1]
    assert np.array_equal(pixels(fig), pixels(draw()[0]))


@pytest.mark.parametrize("p1, p2", [(0.01, 0.3), (0.05, 0.3), (0.3, 0.99), (0.99, 0.01)])
@pytest.mark.parametrize("n, angle", [(2, 10), (8, 60), (64, 170)])
def test_the_tilt_figure_redraws_the_same_pixels(p1, p2, n, angle):
    # at the screen's resolution, as an explorer shows it: under the constrained layout this
    # equal-aspect figure cycled through three layouts on successive draws at a third of settings
    fig = splot.plot_direction_tilt(p1=p1, p2=p2, n=n, angle_deg=angle)
    first = fig.drawn_png()
    assert all(fig.drawn_png() == first for _ in range(3))
