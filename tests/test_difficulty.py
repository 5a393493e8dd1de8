"""The per-difficulty gains: cross-fitted bins that do not turn the control's luck into a gain,
checked on simulated arms whose true per-prompt gains are known."""

import numpy as np
import pandas as pd
import pytest

from sera.studies import difficulty


def _arm(p, seeds, n, rng):
    """A final table: every seed draws n samples of every prompt at success probability p."""
    rows = [{"seed": s, "prompt": i, "n": n, "correct": int(c)}
            for s in range(seeds) for i, c in enumerate(rng.binomial(n, p))]
    return pd.DataFrame(rows)


def test_equal_arms_gain_nothing_in_any_bin_where_binning_on_all_seeds_would():
    # Same success probability for both arms: every bin's true gain is 0. Binning prompts by the
    # control's rate on the very seeds that measure it puts the prompts the control missed by
    # chance in the hardest bin, a spurious gain there; the cross-fitted bins show none.
    rng = np.random.default_rng(0)
    p = rng.beta(0.5, 1.0, 600)
    treatment, control = _arm(p, 6, 2, rng), _arm(p, 6, 2, rng)
    table = difficulty.by_difficulty(treatment, control, k=1, draws=300).set_index("bin")
    rate = difficulty.matrix(control, control["correct"] / control["n"]).mean(axis=0)
    treated = difficulty.matrix(treatment, treatment["correct"] / treatment["n"]).mean(axis=0)
    naive = (treated - rate)[rate <= difficulty.EDGES[0]]
    se = naive.std() / np.sqrt(len(naive))  # of the naive bin's mean gain, over its prompts
    assert naive.mean() > 4 * se  # the bias exists at this size
    assert abs(table.loc["<= 5%", "gain"]) < 2 * se < naive.mean() / 2
    for label in difficulty.LABELS:
        row = table.loc[label]
        assert row["low"] <= 0 <= row["high"], (label, row.to_dict())


@pytest.mark.parametrize("k", [1, 4])
def test_a_known_gain_is_found_in_its_bin(k):
    # The treatment adds 0.2 to the success probability of the prompts the control solves
    # 25-60% of the time and nothing elsewhere: at Pass@1 that bin gains 0.2, the others 0
    # (prompts near a bin's edge may be binned to a neighbour by a fold, hence the tolerance).
    rng = np.random.default_rng(1)
    p = np.repeat([0.0, 0.12, 0.4, 0.85], 150)
    lift = np.where(p == 0.4, 0.2, 0.0)
    treatment, control = _arm(p + lift, 6, 16, rng), _arm(p, 6, 16, rng)
    table = difficulty.by_difficulty(treatment, control, k=k, draws=200).set_index("bin")
    true = 1 - (1 - (p + lift)) ** k - (1 - (1 - p) ** k)
    assert table.loc["25-60%", "gain"] == pytest.approx(true[p == 0.4].mean(), abs=0.05)
    assert table.loc["25-60%", "verdict"] == "ahead"
    for label in ("<= 5%", "> 60%"):
        assert abs(table.loc[label, "gain"]) < 0.03
    assert table["prompts"].sum() == pytest.approx(600)


def test_arms_with_different_prompts_are_refused():
    rng = np.random.default_rng(2)
    control = _arm(np.full(10, 0.3), 6, 4, rng)
    with pytest.raises(ValueError, match="same prompts"):
        difficulty.matrix(control.drop(index=3), control["correct"].drop(index=3) / 4)
