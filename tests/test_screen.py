"""The screen (sera.studies.screen) against a plain recomputation from the stored metrics, and the
claim its pass rule rests on, checked on every stored long math point."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sera import runstore
from sera.studies import confirm, report, screen

POINT = "math-n0-4-320-avx2"


def test_the_epochs_are_the_points_prompts_over_its_batch():
    assert screen.steps_of(POINT) == (16, 79)  # 256 prompts, 16 a step
    assert screen.steps_of("maze-n0-8-long") == (20, 99)  # 320 mazes, 16 a step


def test_the_gaps_recompute_from_the_stored_rows():
    rows = pd.read_csv(runstore.STUDY_DIR / POINT / runstore.stored_file("metrics"))
    rows = rows[(rows["metric"] == "train_reward") & (rows["step"] >= 16) & (rows["step"] <= 79)]
    table = screen.gaps(POINT).set_index("arm")
    for arm in ("sera-rate", "sera lr-half", "maxrl batch-half"):
        differences = []
        for seed in range(6):
            mine = rows[(rows["arm"] == arm) & (rows["seed"] == seed)]["value"]
            theirs = rows[(rows["arm"] == "maxrl") & (rows["seed"] == seed)]["value"]
            assert len(mine) == len(theirs) == 64
            differences.append(100 * (sum(mine) / 64 - sum(theirs) / 64))
        mean = sum(differences) / 6
        half = stats.t.ppf(0.975, 5) * np.std(differences, ddof=1) / math.sqrt(6)
        row = table.loc[arm]
        assert row["gap"] == pytest.approx(mean, abs=1e-9)
        assert (row["low"], row["high"]) == pytest.approx((mean - half, mean + half), abs=1e-9)
        assert row["passes"] == (mean >= screen.PASS)


def test_a_point_whose_runs_stop_early_has_no_screen(monkeypatch):
    metrics = confirm.load(POINT).metrics
    short = metrics[metrics["step"] < 40]
    monkeypatch.setattr(screen, "stored_table", lambda name, table: short)
    assert screen.gaps(POINT).empty


def test_the_rule_separates_the_long_math_arms_as_its_docstring_says():
    """Every arm of a long math point that ended more than 5 points behind MaxRL at Pass@1 fails
    the screen, and every arm that ended within 3 passes it, except the arms screen.MISSES names,
    which are exactly the ones that break it."""
    checked, missed = 0, set()
    for name in report.stored_points():
        point = confirm.point(name)
        if point.task != "math" or point.config.steps < 320:
            continue
        final = report.point_table(name)
        final = final[(final["against"] == "maxrl") & (final["k"] == 1)
                      & (final["seeds"] >= report.MIN_SEEDS)].set_index("arm")
        for row in screen.gaps(name).itertuples():
            if row.arm not in final.index:
                continue
            ended = 100 * final.loc[row.arm, "gain"]
            if ended < -5 or ended > -3:
                checked += 1
                if row.passes != (ended > -3):
                    missed.add((name, row.arm))
    assert checked >= 12
    assert missed == set(screen.MISSES)
