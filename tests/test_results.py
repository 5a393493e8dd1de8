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


def test_paired_gain_is_a_t_interval_over_the_seeds_paired_differences():
    rng = np.random.default_rng(0)
    parts, per_seed = [], []
    for seed in (0, 1, 2, 3):
        base = rng.integers(0, 8, 40)
        better = np.minimum(base + rng.integers(0, 3, 40), 8)
        parts += [_final("sera", seed, better), _final("maxrl", seed, base)]
        per_seed.append((better - base).mean() / 8)
    # a prompt evaluated for one method only is left out of that seed's pairs
    parts.append(_final("sera", 0, [3]).assign(prompt=99))
    gain = results.paired_gain(pd.concat(parts), ks=[1])
    row = gain.iloc[0]
    assert row["pairs"] == 160 and row["seeds"] == 4 and row["agg"] == "token-mean"
    np.testing.assert_allclose(row["per_seed"], per_seed)
    d = np.array(per_seed)
    half = 3.182446305284263 * d.std(ddof=1) / 2  # t(0.975, 3) * sd / sqrt(4)
    assert row["gain"] == pytest.approx(d.mean())
    assert (row["low"], row["high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    long = results.seed_gains(pd.concat(parts), ks=[1, 2])
    assert len(long) == 8 and set(long["prompts"]) == {40}


def test_paired_gain_gives_no_interval_below_three_seeds():
    parts = [_final("sera", s, np.full(10, 5)) for s in (0, 1)] + \
            [_final("maxrl", s, np.full(10, 4)) for s in (0, 1)]
    row = results.paired_gain(pd.concat(parts), ks=[1]).iloc[0]
    assert np.isnan(row["low"]) and np.isnan(row["high"]) and "needs 3" in row["note"]
    assert row["per_seed"] == pytest.approx((1 / 8, 1 / 8)) and row["gain"] == pytest.approx(0.125)


def _two_level_table(rng, seeds: int, gain: float, prompts: int = 64, samples: int = 16):
    """A study's final tables with a seed-level effect: each training run of the treatment is
    better or worse as a whole (u_s, sd 0.05), each prompt of each run moves a little (sd 0.02),
    and each prompt's pool is a binomial draw. The expected Pass@1 gain is `gain`."""
    level = rng.uniform(0.35, 0.6, prompts)
    parts = []
    for seed in range(seeds):
        control = level + rng.normal(0, 0.02, prompts)
        treatment = level + gain + rng.normal(0, 0.05) + rng.normal(0, 0.02, prompts)
        assert 0 < min(control.min(), treatment.min()) and max(control.max(),
                                                               treatment.max()) < 1
        parts += [_final("maxrl", seed, rng.binomial(samples, control), samples),
                  _final("sera", seed, rng.binomial(samples, treatment), samples)]
    return pd.concat(parts)


@pytest.mark.parametrize("seeds", [6, 10])
def test_interval_over_seeds_covers_a_seed_level_gain_and_the_pair_bootstrap_does_not(seeds):
    rng = np.random.default_rng(seeds)
    truth, replications = 0.03, 400
    covered = bootstrap_covered = 0
    for _ in range(replications):
        final = _two_level_table(rng, seeds, truth)
        row = results.paired_gain(final, ks=[1]).iloc[0]
        covered += row["low"] <= truth <= row["high"]
        # the previous interval: (seed, prompt) pairs of fixed final models resampled together
        a, b = (results.per_prompt_pass(final[final["method"] == m], 1) for m in ("sera", "maxrl"))
        _, low, high = sera.paired_bootstrap(a, b, n_resamples=400, seed=0)
        bootstrap_covered += low <= truth <= high
    coverage, bootstrap = covered / replications, bootstrap_covered / replications
    print(f"{seeds} seeds: t over seeds covers {coverage:.3f}, pair bootstrap {bootstrap:.3f}")
    assert coverage >= 0.93
    assert bootstrap < 0.8  # evaluation noise only: far short of the nominal 95%


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


def _paired(gains, seeds=None):
    """A final table of sera and maxrl with one prompt of 16 samples per seed, sera ahead of
    maxrl by `gains` (multiples of 1/16 in [-0.5, 0.5]) at Pass@1."""
    rows = []
    for seed, gain in zip(seeds or range(len(gains)), gains, strict=True):
        rows.append({"method": "maxrl", "seed": seed, "prompt": 0, "n": 16, "correct": 8})
        rows.append({"method": "sera", "seed": seed, "prompt": 0, "n": 16,
                     "correct": 8 + round(16 * gain)})
    return pd.DataFrame(rows)


def test_reproduction_against_a_hand_worked_stored_comparison():
    from scipy import stats

    stored = _paired([0.25, 0.5, 0.25, 0.5])  # mean 0.375, sd 0.1443 over 4 seeds
    sd, t = np.std([0.25, 0.5, 0.25, 0.5], ddof=1), stats.t.ppf(0.975, 3)
    row = results.reproduction(stored, _paired([0.0, 0.25]), ks=[1]).iloc[0]
    assert row["verdict"] == "ahead"  # interval 0.375 +- 0.230 excludes 0
    assert row["stored_low"] == pytest.approx(0.375 - t * sd / 2)
    assert row["spread_high"] == pytest.approx(0.375 + t * sd * np.sqrt(1 + 1 / 4))
    assert row["new_gain"] == pytest.approx(0.125) and row["inside"] == 2
    assert row["same_sign"] and row["reproduces"] and row["identical"] == 0
    # a new seed beyond the stored spread (0.266 +- 0.111 here), or a mean of the other sign
    narrow = _paired([0.25, 0.25, 0.25, 0.3125])
    beyond = results.reproduction(narrow, _paired([0.5, 0.25]), ks=[1]).iloc[0]
    assert beyond["inside"] == 1 and beyond["same_sign"] and not beyond["reproduces"]
    flipped = results.reproduction(stored, _paired([-0.25, 0.0]), ks=[1]).iloc[0]
    assert not flipped["same_sign"] and not flipped["reproduces"]
    # a stored interval that covers 0 is no verdict to contradict
    level = results.reproduction(_paired([0.25, -0.25, 0.5, -0.25]), _paired([-0.25]), ks=[1])
    assert level.iloc[0]["verdict"] == "inconclusive" and level.iloc[0]["same_sign"]
    # seeds rerun with identical rows are counted
    again = results.reproduction(stored, _paired([0.25, 0.5], seeds=[0, 1]), ks=[1]).iloc[0]
    assert again["identical"] == 2


def test_arm_labels_match_a_row_by_row_reading_of_the_rule():
    from sera.methods import METHODS
    from sera.tables import arm

    rng = np.random.default_rng(3)
    names = [*list(METHODS)[:8], "not-a-method"]
    thresholds = [None, 0.0, 0.05, 0.1, 0.3]
    table = pd.DataFrame({"method": rng.choice(names, 3000),
                          "u_min": pd.array(rng.choice(thresholds, 3000), dtype=object)})

    def by_hand(method, u_min):
        own = (METHODS[method].selection or None) if method in METHODS else None
        if (u_min is None and own is None) or (u_min is not None and u_min == own):
            return method
        return f"{method} (u_min {u_min or 0:g})"

    expected = [by_hand(m, u) for m, u in zip(table["method"], table["u_min"], strict=True)]
    assert arm(table).tolist() == expected
    assert arm(table.assign(u_min=table["u_min"].astype(float))).tolist() == expected
    assert arm(table.assign(u_min=table["u_min"].astype("Float64"))).tolist() == expected  # pd.NA


def test_benjamini_hochberg_matches_the_step_up_rule_by_hand():
    from sera.results import bh_kept

    rng = np.random.default_rng(3)
    for _ in range(50):
        p = np.concatenate([rng.uniform(0, 0.01, rng.integers(0, 6)), rng.uniform(0, 1, 20)])
        order = np.argsort(p)
        m = p.size
        below = [i for i in range(m) if p[order[i]] <= 0.05 * (i + 1) / m]
        expected = np.zeros(m, dtype=bool)
        if below:
            expected[order[:max(below) + 1]] = True
        np.testing.assert_array_equal(bh_kept(p, 0.05), expected)


def test_the_paired_p_value_is_the_t_tests_and_welch_the_textbook_interval():
    from scipy import stats

    from sera.results import paired_p, welch

    d = np.array([0.02, -0.01, 0.05, 0.03, 0.04, 0.00])
    t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
    assert paired_p(d) == pytest.approx(2 * stats.t.sf(abs(t), d.size - 1))
    assert np.isnan(paired_p([0.1, 0.1, 0.1]))
    a, b = np.array([0.3, 0.35, 0.28, 0.4]), np.array([0.2, 0.5, 0.1, 0.3, 0.25])
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = stats.t.ppf(0.975, dof) * np.sqrt(va + vb)
    gain, low, high = welch(a, b)
    assert (gain, low, high) == pytest.approx((a.mean() - b.mean(), a.mean() - b.mean() - half,
                                               a.mean() - b.mean() + half))
    assert np.isnan(welch([0.1], b)[1])
