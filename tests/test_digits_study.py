"""The digits check of the regime map: a prediction stored before the runs, and gains over MaxRL
that recompute from the stored final tables by an independent route."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sera.studies import digits

ROOT = Path(__file__).resolve().parents[1]


def test_the_prediction_was_committed_before_the_runs():
    # git dates each file's first commit: the prediction must come first
    def added(name):
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H %ct", "--",
                              f"data/study/{digits.NAME}/{name}"],
                             cwd=ROOT, capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip("not a git checkout")
        lines = out.stdout.split()
        assert lines, f"{name} was never committed"
        return lines[-2], int(lines[-1])  # the first commit that added it

    prediction, runs = added("prediction.csv"), added("final.csv.gz")
    assert prediction[0] != runs[0] and prediction[1] <= runs[1]
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", prediction[0], runs[0]],
                              cwd=ROOT)
    assert ancestor.returncode == 0


def test_the_stored_runs_are_the_registered_arms_and_seeds():
    final = pd.read_csv(digits.FOLDER / "final.csv.gz")
    seeds = final.groupby("method")["seed"].nunique()
    assert dict(seeds) == {m: digits.SEEDS for m in ("maxrl", *digits.ARMS)}
    assert (final["n0"] == 16).all() and final["p"].between(0, 1).all()


def test_gains_recompute_from_the_final_tables_by_another_route():
    # per seed: mean over held-out images of 1 - (1 - p)^K, arm minus MaxRL; then a Student-t
    # interval over the seeds from scipy
    final = pd.read_csv(digits.FOLDER / "final.csv.gz")
    table = digits.compare().set_index(["arm", "k"])
    prediction = pd.read_csv(digits.FOLDER / "prediction.csv").set_index(["arm", "k"])
    for arm in digits.ARMS:
        for k in digits.KS:
            per_seed = []
            for seed in range(digits.SEEDS):
                a = final[(final["method"] == arm) & (final["seed"] == seed)]
                b = final[(final["method"] == "maxrl") & (final["seed"] == seed)]
                joined = a.merge(b, on="prompt", suffixes=("_a", "_b"))
                assert len(joined) == len(a) == len(b)
                per_seed.append(np.mean((1 - (1 - joined["p_a"]) ** k)
                                        - (1 - (1 - joined["p_b"]) ** k)))
            low, high = stats.t.interval(0.95, len(per_seed) - 1, loc=np.mean(per_seed),
                                         scale=stats.sem(per_seed))
            row = table.loc[(arm, k)]
            assert row["gain"] == pytest.approx(100 * np.mean(per_seed), abs=1e-9)
            assert (row["low"], row["high"]) == pytest.approx((100 * low, 100 * high), abs=1e-9)
            assert row["predicted"] == pytest.approx(100 * prediction.loc[(arm, k), "gain"])
            guess = prediction.loc[(arm, k), "gain"]
            side = "ahead" if low > 0 else "behind" if high < 0 else "inconclusive"
            inside = low <= guess <= high
            expected = ("inconclusive" if side == "inconclusive" and inside
                        else f"{side}, {'as' if inside else 'not as'} predicted")
            assert row["verdict"] == expected


def test_runs_wait_for_a_stored_prediction(tmp_path, monkeypatch):
    monkeypatch.setattr(digits, "FOLDER", tmp_path / digits.NAME)
    with pytest.raises(RuntimeError, match="write the prediction first"):
        digits.run()
    # and a prediction, once written, is never rewritten
    (tmp_path / digits.NAME).mkdir()
    (tmp_path / digits.NAME / "prediction.csv").write_text("kept\n")
    assert digits.main(["predict"]) == 1
    assert (tmp_path / digits.NAME / "prediction.csv").read_text() == "kept\n"


def test_the_stored_prediction_recomputes_to_the_same_values():
    stored = pd.read_csv(digits.FOLDER / "prediction.csv")
    again = digits.predict(processes=1)
    pd.testing.assert_frame_equal(again.reset_index(drop=True), stored, check_dtype=False,
                                  rtol=1e-9, atol=1e-12)


def test_the_page_names_the_instruction_set_each_arm_trained_on():
    summary = json.loads((digits.FOLDER / "provenance.json").read_text())
    kinds = {}
    for run in summary["runs"]:
        first = run["provenance"][0]
        assert first["cpu_capability"], run["run"]  # recorded when the run started
        kinds.setdefault(run["config"]["method"], set()).add(first["cpu_capability"])
    assert digits.machines() == {m: "+".join(sorted(k)) for m, k in kinds.items()}
    assert set(kinds) == {"maxrl", *digits.ARMS}


def test_the_registration_is_read_by_the_digits_study_and_left_by_the_points(tmp_path):
    from sera.studies.confirm import points

    assert digits.REGISTRATION["study"] == digits.__name__
    assert digits.ARMS == ("sera", "sera-rate") and digits.SEEDS == 6
    assert digits.base().n0 == 16 and digits.base().batch_size == 64  # the fast preset
    assert digits.NAME not in points.POINTS
    # a registration without `study` is a confirmation point, and its task must be a sequence one
    for name, head in (("other", f'study = "{digits.__name__}"\n'), ("typo", "")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "point.toml").write_text(
            f'{head}task = "digits"\npreset = "fast"\nseeds = 6\n[[arms]]\nmethod = "maxrl"\n')
    with pytest.raises(ValueError, match="task must be one of"):
        points.registered(tmp_path)
    (tmp_path / "typo" / "point.toml").unlink()
    assert points.registered(tmp_path) == {}
