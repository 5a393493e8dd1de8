"""A frontier point's test: the matched-Pass@1 line against a brute force, its interval's coverage
on simulated cells whose margin is known, the registration read as data, and the rerun check."""

import shutil

import numpy as np
import pandas as pd
import pytest

from sera import runstore
from sera.studies import frontier

POINT = "math-n0-4-320-frontier"


def test_the_frontier_is_the_line_between_the_bracketing_cells_and_never_past_them():
    cells = np.array([(0.30, 0.60), (0.28, 0.65), (0.25, 0.70), (0.29, 0.55)])
    # (0.29, 0.55) is beaten at both by (0.30, 0.60): it is no part of the frontier
    assert frontier.frontier_at(cells, 0.265) == pytest.approx(0.70 + (0.015 / 0.03) * -0.05)
    assert frontier.frontier_at(cells, 0.295) == pytest.approx(0.65 + 0.75 * -0.05)
    assert frontier.frontier_at(cells, 0.25) == pytest.approx(0.70)
    for outside in (0.2499, 0.3001):
        assert np.isnan(frontier.frontier_at(cells, outside))


def _cells(rng, margin, prompts=96, seeds=6):
    """MaxRL at three steps trading Pass@1 for Pass@8 along a line, `sera` between two of them
    and `margin` above it; per prompt a difficulty, per seed 16 samples at Pass@1 and a noisy
    Pass@8."""
    base = rng.beta(1.2, 2.5, prompts)
    shifts = {("maxrl", 0.25): (0.00, 0.20), ("maxrl", 0.5): (0.06, 0.10),
              ("maxrl", 1.0): (0.12, 0.00), ("sera", 0.35): (0.03, 0.15 + margin)}
    ones, eights = {}, {}
    for cell, (one, eight) in shifts.items():
        p = np.clip(base + one, 0, 1)
        ones[cell] = rng.binomial(16, np.tile(p, (seeds, 1))) / 16
        eights[cell] = np.clip(0.3 + 0.5 * np.tile(base, (seeds, 1)) + eight
                               + rng.normal(0, 0.05, (seeds, prompts)), 0, 1)
    return ones, eights


def test_the_margins_interval_covers_a_known_margin():
    # the true margin is the sera cell's expected Pass@8 minus the line through the expected
    # MaxRL cells at its expected Pass@1; 30 simulated points, 95% intervals: about 28.5 should
    # hold it, fewer than 25 would mean a miscalibrated interval (3 standard deviations)
    rng = np.random.default_rng(5)
    held = 0
    for _ in range(30):
        ones, eights = _cells(rng, 0.03)
        truth_rng = np.random.default_rng(0)
        big_ones, big_eights = _cells(truth_rng, 0.03, prompts=20000, seeds=1)
        controls = [c for c in ones if c[0] == "maxrl"]
        line = np.array([(big_ones[c].mean(), big_eights[c].mean()) for c in controls])
        cell = ("sera", 0.35)
        truth = big_eights[cell].mean() - frontier.frontier_at(line, big_ones[cell].mean())
        row = frontier._margin(ones, eights, cell, controls, 96, 8, 300,
                               int(rng.integers(1 << 30)))
        assert row["bracketed"]
        held += row["low"] <= truth <= row["high"]
    assert held >= 25


@pytest.fixture
def study_copy(tmp_path, monkeypatch):
    """The frontier point and its sweep copied to a study folder of their own."""
    for name in (POINT, frontier.registration(POINT)["sweep"]):
        shutil.copytree(runstore.STUDY_DIR / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("warmup", "rollouts.csv.gz"))
    monkeypatch.setattr(runstore, "STUDY_DIR", tmp_path)
    return tmp_path


def test_a_changed_registration_changes_what_the_page_reads(study_copy):
    # nothing restates the registration's numbers: move the predicted Pass@1 of MaxRL at 0.25x
    # far away in a copy and the prediction's row follows it
    before = frontier.predictions(POINT, table=pd.DataFrame(
        columns=["multiplier", "k", "prompts", "low", "high", "gap", "bracketed"]))
    path = study_copy / POINT / runstore.REGISTRATION
    path.write_text(path.read_text().replace("near = [27.0, 65.0, 86.0]",
                                             "near = [7.0, 65.0, 86.0]"))
    after = frontier.predictions(POINT, table=pd.DataFrame(
        columns=["multiplier", "k", "prompts", "low", "high", "gap", "bracketed"]))
    first = (before["k"] == 1) & (before["arm"] == "maxrl lr-0.25")
    assert list(before.loc[first, "predicted"]) == [27.0]
    assert list(after.loc[first, "predicted"]) == [7.0]
    if before.loc[first, "held"].iloc[0] != "not run":
        assert after.loc[first, "held"].iloc[0] == "no"


def test_a_rerun_that_departs_from_the_sweep_by_one_value_is_not_identical(monkeypatch):
    theirs = pd.DataFrame({"arm": "maxrl lr-0.35", "method": "maxrl", "seed": 0,
                           "step": [0, 0, 80], "metric": ["val_pass", "train_reward", "pass"],
                           "k": [1, 0, 1], "value": [0.2, 0.1, 0.3]})
    mine = theirs.assign(value=[0.2, 0.1, 0.4])  # a new final evaluation only: the same run
    tables = {POINT: mine, "sweep": theirs}
    monkeypatch.setattr(frontier, "registration", lambda name: {"sweep": "sweep"})
    monkeypatch.setattr(frontier, "stored_table", lambda name, table: tables[name])
    monkeypatch.setattr(frontier, "multipliers", lambda name: {"maxrl lr-0.35": 0.35})
    assert frontier.reruns(POINT)["identical"].tolist() == [True]
    tables[POINT] = mine.assign(value=[0.2, 0.1000001, 0.4])
    assert frontier.reruns(POINT)["identical"].tolist() == [False]


def test_the_description_is_the_margin_over_the_best_cell_with_as_high_a_pass1():
    # one seed, one prompt per cell: the cells are their own means
    ones = {("maxrl", 0.25): np.array([[0.30]]), ("maxrl", 0.5): np.array([[0.32]]),
            ("maxrl", 1.0): np.array([[0.25]]), ("sera", 0.35): np.array([[0.28]])}
    ks = {("maxrl", 0.25): np.array([[0.70]]), ("maxrl", 0.5): np.array([[0.66]]),
          ("maxrl", 1.0): np.array([[0.80]]), ("sera", 0.35): np.array([[0.75]])}
    controls = [c for c in ones if c[0] == "maxrl"]
    seeds = {c: np.array([0]) for c in ones}
    gap, best = frontier._gap(ones, ks, ("sera", 0.35), controls, seeds, np.array([0]))
    # MaxRL at 1x (Pass@1 0.25 < 0.28) does not reach it; of the two that do, 0.70 is the best
    assert best == pytest.approx(0.75 - 0.70)
    assert gap == pytest.approx(0.75 - (0.80 + (0.28 - 0.25) / 0.05 * (0.70 - 0.80)))
    ones[("sera", 0.35)] = np.array([[0.40]])
    assert np.isnan(frontier._gap(ones, ks, ("sera", 0.35), controls, seeds, np.array([0]))[1])
