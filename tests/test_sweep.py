"""sera.studies.sweep on the stored learning-rate sweep, recomputed with independent code: Pass@K
from the combinatorial definition, the selection rule by brute force over the cells, Welch's
interval from its textbook formula."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sera.plotting.sweep import plot_frontier
from sera.results import MIN_SEEDS
from sera.studies import sweep
from sera.studies.confirm.storage import stored_table

POINT = "maze-n0-8-long-lr"


def _pass(n, c, k):
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


@pytest.fixture(scope="module")
def final():
    return stored_table(POINT, "final")


def test_every_arm_of_the_sweep_changes_only_the_step():
    steps = sweep.multipliers(POINT)
    assert steps["maxrl"] == steps["sera"] == 1.0
    assert sorted(set(steps.values())) == [0.25, 0.35, 0.5, 0.7, 1.0, 1.3]
    assert all(steps[f"{m} lr-{x:g}"] == x for m in ("maxrl", "sera") for x in (0.35, 0.5, 0.7,
                                                                                   1.3))
    assert steps["maxrl lr-0.25"] == 0.25  # the grid extended below MaxRL's first choice


def test_a_cell_is_the_mean_over_seeds_of_each_runs_mean_over_its_half(final):
    table = sweep.cells(POINT, sweep.REPORT)
    row = table.iloc[len(table) // 2]
    steps = sweep.multipliers(POINT)
    runs = final[(final["method"] == row["method"]) & (final["prompt"] % 2 == 1)
                 & (final["arm"].map(steps) == row["multiplier"])]
    per_seed = runs.groupby("seed").apply(
        lambda run: np.mean([_pass(n, c, int(row["k"]))
                             for n, c in zip(run["n"], run["correct"], strict=True)]),
        include_groups=False)
    assert row["mean"] == pytest.approx(per_seed.mean(), abs=1e-12)
    assert row["seeds"] == per_seed.size
    half = stats.t.ppf(0.975, per_seed.size - 1) * per_seed.std(ddof=1) / np.sqrt(per_seed.size)
    assert row["high"] - row["mean"] == pytest.approx(half, rel=1e-9)


def test_the_chosen_step_is_the_best_selection_half_cell_by_brute_force(final):
    steps = sweep.multipliers(POINT)
    picked = sweep.chosen(POINT).set_index("method")
    chosen_by_hand = {}
    for method in ("maxrl", "sera"):
        best = None
        for mult in sorted(set(steps.values())):
            runs = final[(final["method"] == method) & (final["arm"].map(steps) == mult)
                         & (final["prompt"] % 2 == 0)]
            if runs["seed"].nunique() < MIN_SEEDS:
                continue
            score = runs.groupby("seed").apply(lambda r: (r["correct"] / r["n"]).mean(),
                                               include_groups=False).mean()
            if best is None or score > best[1] + 1e-12:
                best = (mult, score)
        if best is not None:
            chosen_by_hand[method] = best[0]
            assert picked.loc[method, "select_pass1"] == pytest.approx(best[1], abs=1e-12)
    assert picked["multiplier"].to_dict() == chosen_by_hand


def test_welch_matches_its_formula():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.4, 0.05, 6), rng.normal(0.35, 0.12, 9)
    gain, low, high = sweep.welch(a, b)  # sera.results.welch
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = stats.t.ppf(0.975, dof) * math.sqrt(va + vb)
    assert gain == pytest.approx(a.mean() - b.mean())
    assert (low, high) == pytest.approx((gain - half, gain + half))


def test_the_frontier_draws_a_line_per_method_through_its_steps():
    table = sweep.cells(POINT)
    fig = plot_frontier(table, ks=(8, 32))
    assert len(fig.axes) == 2
    labels = {t.get_text() for t in fig.axes[0].texts}
    expected = {f"{m:g}x" for m in table["multiplier"]}
    assert labels == expected
    drawn = [line for line in fig.axes[1].lines if len(line.get_xdata()) > 1 or
             line.get_marker() == "o"]
    assert len(drawn) >= table["method"].nunique()


def test_a_point_whose_arms_change_more_than_the_step_is_no_sweep():
    with pytest.raises(ValueError, match="not only the learning rate"):
        sweep.multipliers("math-n0-4-320-avx2")
    assert isinstance(sweep.half(pd.Series([0, 1, 2])), np.ndarray)


def test_the_tuned_comparison_waits_for_each_method_s_whole_grid(monkeypatch):
    picks = sweep.chosen(POINT).set_index("method")
    # maxrl ran one step more than sera (0.25x, added when its choice sat at the grid's edge)
    assert picks.loc["maxrl", "registered"] == 6 and picks.loc["sera", "registered"] == 5
    assert (picks["cells"] == picks["registered"]).all() and not picks["at_edge"].any()
    assert not sweep.tuned(POINT).empty
    partial = picks.reset_index().assign(cells=lambda t: t["cells"] - (t["method"] == "sera"))
    monkeypatch.setattr(sweep, "chosen", lambda name: partial)
    with pytest.raises(ValueError, match=r"whole registered grid.*sera \(4 of 5 steps\)"):
        sweep.tuned(POINT)


def test_an_arm_beside_the_sweep_has_cells_but_no_chosen_step(monkeypatch):
    name = "math-n0-4-320-lr"  # registers sera-evidence-waterline at the preset step only
    assert sweep.grid_of(name, "sera-evidence-waterline") == [1.0]
    assert sweep.is_sweep(name)
    table = sweep.cells(name, sweep.SELECT, ks=(1,))
    best = float(table["mean"].max())
    beside = pd.DataFrame([{"method": "sera-evidence-waterline", "multiplier": 1.0, "k": 1,
                            "mean": best + 0.1, "low": best, "high": best + 0.2,
                            "seeds": MIN_SEEDS}])
    monkeypatch.setattr(sweep, "cells", lambda *a, **k: pd.concat([table, beside]))
    picks = sweep.chosen(name)
    assert "sera-evidence-waterline" not in set(picks["method"])
    with pytest.raises(ValueError, match="fewer than 3 steps"):
        sweep.tuned(name, "sera-evidence-waterline")


def test_a_point_with_two_steps_per_method_is_no_sweep():
    # math-n0-4-640-avx2 runs three step sizes in all, but no method at more than two
    assert len(set(sweep.multipliers("math-n0-4-640-avx2").values())) >= 3
    assert not sweep.is_sweep("math-n0-4-640-avx2")
    assert sweep.is_sweep(POINT)


def test_the_frontier_gap_is_the_best_control_cell_reaching_the_same_pass_at_1():
    """frontier_gap's estimate recomputed from the cell table by brute force: for each sera cell,
    its Pass@K minus the largest MaxRL Pass@K among the cells whose Pass@1 is at least its own."""
    table = sweep.cells(POINT)
    table = table[table["seeds"] >= MIN_SEEDS].pivot_table(index=["method", "multiplier"],
                                                           columns="k", values="mean")
    for k in (8, 32):
        found = sweep.frontier_gap(POINT, k, draws=200).set_index("multiplier")
        for mult, row in table.loc["sera"].iterrows():
            reaching = [r[k] for _, r in table.loc["maxrl"].iterrows() if r[1] >= row[1]]
            expected = row[k] - max(reaching) if reaching else math.nan
            got = found.loc[mult, "gap"]
            assert (math.isnan(got) and math.isnan(expected)) or \
                got == pytest.approx(expected, abs=1e-12)
            if not math.isnan(got):
                assert found.loc[mult, "low"] <= found.loc[mult, "high"]
    # a point above every control cell's Pass@1 has no frontier to compare with
    assert math.isnan(sweep._above(np.array([[0.3, 0.6], [0.4, 0.5]]), 0.45, 0.7))
    assert sweep._above(np.array([[0.3, 0.6], [0.4, 0.5]]), 0.35, 0.7) == pytest.approx(0.2)


def test_the_step_ratio_reads_both_chosen_steps(monkeypatch):
    def picks(sera, maxrl, cells=(5, 5)):
        return pd.DataFrame({"method": ["maxrl", "sera"], "multiplier": [maxrl, sera],
                             "select_pass1": [0.3, 0.3], "cells": list(cells),
                             "registered": [5, 5], "at_edge": [False, False]})

    for (sera, maxrl), side in (((0.5, 0.7), "below"), ((0.5, 0.5), "at"), ((0.5, 0.35), "above")):
        monkeypatch.setattr(sweep, "chosen", lambda name, s=sera, m=maxrl: picks(s, m))
        ratio = sweep.step_ratio(POINT)
        assert (ratio["sera"], ratio["control"], ratio["side"]) == (sera, maxrl, side)
        assert ratio["ratio"] == pytest.approx(sera / maxrl)
    monkeypatch.setattr(sweep, "chosen", lambda name: picks(0.5, 0.7, cells=(4, 5)))
    assert sweep.step_ratio(POINT) == {}  # a provisional choice is no measurement


def test_the_frontier_gap_on_cells_whose_answer_is_known(monkeypatch):
    """Synthetic seeds: two MaxRL cells (Pass@1, Pass@8) = (0.5, 0.6) and (0.4, 0.7), the same in
    every seed, so that every resample gives the same frontier; sera cells below, above and at
    the edge of MaxRL's Pass@1 range."""
    rows = []
    for method, mult, pass1, pass8, spread in (
            ("maxrl", 1.0, 0.5, 0.6, 0.0), ("maxrl", 0.5, 0.4, 0.7, 0.0),
            ("sera", 0.5, 0.3, 0.9, 0.0),    # below both: 0.9 - max(0.6, 0.7) = +0.2
            ("sera", 1.0, 0.6, 0.9, 0.0),    # above every MaxRL Pass@1: no frontier
            ("sera", 0.7, 0.49, 0.65, 0.02)):  # at the edge: some resamples pass 0.5
        for seed in range(6):
            wobble = spread * (1 if seed % 2 else -1)
            for k, value in ((1, pass1 + wobble), (8, pass8)):
                rows.append({"method": method, "multiplier": mult, "seed": seed, "k": k,
                             "split": "all", "value": value})
    monkeypatch.setattr(sweep, "per_seed", lambda name, ks: pd.DataFrame(rows))
    gap = sweep.frontier_gap(POINT, 8, draws=400).set_index("multiplier")
    assert gap.loc[0.5, ["gap", "low", "high"]].tolist() == pytest.approx([0.2, 0.2, 0.2])
    assert gap.loc[0.5, "dropped"] == 0
    assert math.isnan(gap.loc[1.0, "gap"]) and math.isnan(gap.loc[1.0, "low"])
    edge = gap.loc[0.7]
    assert edge["gap"] == pytest.approx(0.65 - 0.6)  # its mean Pass@1 0.49 is reached by 0.5
    # a resample whose Pass@1 passes 0.5 has no frontier: that takes 5 or 6 of its 6 draws from
    # the seeds at 0.51 (7 in 64 resamples), above MAX_DROPPED, so there is no interval
    assert edge["dropped"] > sweep.MAX_DROPPED and math.isnan(edge["low"])
    monkeypatch.setattr(sweep, "per_seed", lambda name, ks: pd.DataFrame(
        [r for r in rows if r["method"] == "sera"]))
    assert sweep.frontier_gap(POINT, 8, draws=10).empty  # no MaxRL cell yet: no rows
