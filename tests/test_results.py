"""Study tables from the runs' long tables: summaries, profiles, paired gains, the paper."""

import numpy as np
import pandas as pd
import pytest

import sera
import sera.results as results


def _final(method, seed, correct, n=8):
    return pd.DataFrame({"method": method, "seed": seed, "n0": 8, "agg": "token-mean",
                         "prompt": np.arange(len(correct)), "n": n, "correct": correct})


def test_passk_profile_per_run():
    final = pd.concat([_final("sera", 0, np.arange(50) % 9), _final("maxrl", 0, np.zeros(50))])
    profile = results.passk_profile(final)
    assert set(profile["k"]) == {1, 2, 4, 8}
    one = profile[(profile["method"] == "sera") & (profile["k"] == 1)]["pass@k"].item()
    assert one == pytest.approx((np.arange(50) % 9).mean() / 8)
    exact = pd.DataFrame({"method": "ce", "seed": 0, "n0": 4, "prompt": [0, 1], "p": [0.5, 0.1]})
    k2 = results.passk_profile(exact, ks=[2])["pass@k"].item()
    assert k2 == pytest.approx(((1 - 0.25) + (1 - 0.81)) / 2)


def test_paired_gain_pools_seeds_into_one_interval():
    rng = np.random.default_rng(0)
    parts = []
    for seed in (0, 1, 2):
        base = rng.integers(0, 8, 40)
        parts += [_final("sera", seed, np.minimum(base + 1, 8)), _final("maxrl", seed, base)]
    gain = results.paired_gain(pd.concat(parts), ks=[1], n_resamples=2000)
    row = gain.iloc[0]
    assert row["pairs"] == 120 and row["seeds"] == 3 and row["agg"] == "token-mean"
    a = pd.concat([p for p in parts if p["method"].iloc[0] == "sera"])
    b = pd.concat([p for p in parts if p["method"].iloc[0] == "maxrl"])
    assert row["gain"] == pytest.approx((a["correct"].to_numpy() - b["correct"].to_numpy()).mean()
                                        / 8)
    assert 0 < row["low"] <= row["gain"] <= row["high"]


def test_summaries_compare_like_with_like():
    rows = []
    for method in ("maxrl", "sera"):
        for seed in (0, 1):
            keys = {"method": method, "estimates": "none", "allocator": "uniform", "seed": seed,
                    "n0": 4, "agg": "response-mean", "u_min": None}
            for step, value in enumerate((0.2, 0.4, 0.9)):
                rows.append({**keys, "step": step, "metric": "cosine", "k": None,
                             "value": value})
            rows.append({**keys, "step": 3, "metric": "pass", "k": 1,
                         "value": 0.25 * seed + (0.5 if method == "sera" else 0.25)})
    per_run = results.summarize_runs(pd.DataFrame(rows))
    assert per_run["mean_cosine"].tolist() == pytest.approx([0.5] * 4)
    assert per_run["final_cosine"].tolist() == pytest.approx([0.9] * 4)
    summary = results.summarize(per_run)
    row = summary[summary["method"] == "sera"].iloc[0]
    assert row["pass@1 mean"] == 0.625 and row["pass@1 sd"] == 0.125 and row["seeds"] == 2
    reference = pd.DataFrame({"study": "x", "method": ["sera", "sera"], "metric":
                              ["final_cosine", "pass"], "k": [None, 1], "value": [0.8, 0.6],
                              "note": ["final checkpoint", "final"]})
    compared = results.compare_with_paper(summary, reference, "x", 4, "ours")
    assert compared["ours"].tolist() == pytest.approx([0.9, 0.625])
    assert compared["statistic"].tolist() == ["final_cosine", "pass@1"]
    direction = results.direction_table(summary, treatment="sera")
    assert direction.loc["sera pass@1 above maxrl", "N0=4"]


def test_reference_numbers_load():
    from pathlib import Path

    table = pd.read_csv(Path(sera.__file__).parents[1] / "data" / "paper_reference.csv")
    assert {"study", "method", "n0", "metric", "k", "value", "note"} <= set(table.columns)
    assert set(table["study"]) == {"imagenet", "maze", "math"}
