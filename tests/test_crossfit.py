"""The cross-fitted sweep comparison: its point estimate against a brute force over the stored
sweep's per-seed table, and its interval's coverage on simulated sweeps whose truth is known."""

import numpy as np
import pandas as pd
import pytest

from sera.passk import pass_at_k
from sera.studies import crossfit, frontier, sweep
from sera.studies.confirm.storage import stored_table

SWEEP = "math-n0-4-320-lr"


@pytest.mark.parametrize("k", [1, 32])
def test_the_gain_is_the_mean_of_both_directions_chosen_and_read_by_hand(k):
    # brute force from sweep.per_seed: per direction, each method's best mean Pass@K on the
    # choosing half (ties to the smaller step), read on the other half
    table = sweep.per_seed(SWEEP, ks=(k,))
    # the complete cells of a frontier point that extends the sweep join its grid, on the
    # sweep's 64 prompts (a cell both ran keeps the sweep's evaluation)
    swept = set(zip(table["method"], table["multiplier"], strict=True))
    for name in frontier.extending(SWEEP):
        final = stored_table(name, "final")
        final = final[final["prompt"] < 64]
        final = final.assign(multiplier=final["arm"].map(sweep.multipliers(name)))
        for (method, mult, seed), run in final.groupby(["method", "multiplier", "seed"]):
            whole = final[(final["method"] == method) & (final["multiplier"] == mult)]
            if whole["seed"].nunique() < 6 or (method, mult) in swept:
                continue
            passed = pass_at_k(run["n"].to_numpy(), run["correct"].to_numpy(), k)
            even = (run["prompt"] % 2 == 0).to_numpy()
            extra = pd.DataFrame([{"method": method, "multiplier": mult, "seed": seed, "k": k,
                                   "split": split, "value": passed[mine].mean()}
                                  for split, mine in ((sweep.SELECT, even),
                                                      (sweep.REPORT, ~even))])
            table = pd.concat([table, extra], ignore_index=True)
    means = table.groupby(["method", "multiplier", "split"])["value"].mean()
    gains, steps = [], {}
    for choose, report in ((sweep.SELECT, sweep.REPORT), (sweep.REPORT, sweep.SELECT)):
        at = {}
        for method in ("sera", "maxrl"):
            grid = sorted(table.loc[table["method"] == method, "multiplier"].unique())
            best = max(grid, key=lambda m: (means[method, m, choose], -m))
            at[method] = means[method, best, report]
            steps.setdefault(method, []).append(best)
        gains.append(at["sera"] - at["maxrl"])
    found = crossfit.compare(SWEEP, k, draws=50)
    assert found["gain"] == pytest.approx(np.mean(gains), abs=1e-12)
    assert found["treatment_steps"] == steps["sera"]
    assert found["control_steps"] == steps["maxrl"]
    assert found["low"] <= found["gain"] <= found["high"]


def _simulated(rng, gain, prompts=64, seeds=6):
    """Two methods at three steps each: per prompt a base success rate, each step a shift, each
    seed its own draw of 32 samples. The treatment's best step is `gain` above the control's."""
    base = rng.beta(1, 2, prompts)
    cells = {}
    for method, lift in (("sera", gain), ("maxrl", 0.0)):
        cells[method] = {}
        for step, shift in ((0.5, -0.15), (1.0, 0.0), (2.0, -0.3)):
            p = np.clip(base + lift + shift, 0, 1)
            cells[method][step] = rng.binomial(32, np.tile(p, (seeds, 1))) / 32
    return cells


def test_the_interval_covers_a_known_gain(monkeypatch):
    # 40 simulated sweeps whose best steps are far apart from the others: the cross-fitted
    # 95% interval should hold the true gain (0.05) in about 38 of them; fewer than 33 would be
    # a miscalibrated interval (binomial, 3 standard deviations below 38)
    rng = np.random.default_rng(3)
    held = 0
    for _ in range(40):
        cells = _simulated(rng, 0.05)
        monkeypatch.setattr(crossfit, "cell_matrices", lambda name, k, c=cells: c)
        found = crossfit.compare("simulated", 1, control="maxrl", draws=400,
                                 seed=int(rng.integers(1 << 30)))
        assert found["treatment_steps"] == found["control_steps"] == [1.0, 1.0]
        held += found["low"] <= 0.05 <= found["high"]
    assert held >= 33


def test_leave_one_seed_out_counts_the_fits_that_keep_the_step(monkeypatch):
    rng = np.random.default_rng(4)
    cells = _simulated(rng, 0.05)
    monkeypatch.setattr(crossfit, "cell_matrices", lambda name, k: cells)
    found = crossfit.compare("simulated", 1, control="maxrl", draws=50)
    assert found["stable"] == {"sera": (6, 6, 6), "maxrl": (6, 6, 6)}
    # two steps that cannot be told apart: the choice moves with the seed left out
    cells["maxrl"][0.5] = cells["maxrl"][1.0][::-1].copy()
    cells["maxrl"][0.5][0] += 0.01  # one seed better on every prompt
    found = crossfit.compare("simulated", 1, control="maxrl", draws=50)
    kept = found["stable"]["maxrl"]
    assert found["control_steps"] == [0.5, 0.5] and kept[0] < 6 and kept[1] < 6
