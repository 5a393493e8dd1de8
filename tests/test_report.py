"""The results page and the README's results table: generated from the stored runs, and each
number checked against an independent computation from the raw tables."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sera import runstore
from sera.studies import confirm, report, screen
from sera.studies.confirm import storage

NAN = math.nan


@pytest.mark.parametrize("gain, low, high, predicted, expected", [
    (0.05, 0.01, 0.09, 0.04, "ahead, as predicted"),
    (0.05, 0.01, 0.09, 0.20, "ahead, not as predicted"),
    (-0.05, -0.09, -0.01, -0.02, "behind, as predicted"),
    (-0.05, -0.09, -0.01, 0.03, "behind, not as predicted"),
    # An interval holding zero and the prediction: the runs neither confirm nor refute it
    # (the stored row "-15.0 [-33.0, +3.0]" against a predicted +2.5).
    (-0.15, -0.33, 0.03, 0.025, "inconclusive"),
    (-0.136, -0.273, 0.0001, 0.019, "inconclusive, not as predicted"),
    (0.0, -0.02, 0.02, 0.10, "inconclusive, not as predicted"),
    (0.0, -0.02, 0.02, NAN, "inconclusive"),
    (0.05, 0.01, 0.09, NAN, "ahead"),
    (-0.05, -0.09, -0.01, NAN, "behind"),
    (0.05, NAN, NAN, 0.04, "no interval"),
])
def test_verdict_of_an_interval_and_a_prediction(gain, low, high, predicted, expected):
    assert report.verdict(gain, low, high, predicted) == expected
    assert report.verdict(gain, low, high, predicted, seeds=report.MIN_SEEDS) == expected


def test_no_verdict_below_the_least_seeds():
    assert report.verdict(0.05, 0.01, 0.09, seeds=1) == "1 seed: no verdict"
    assert report.verdict(0.05, 0.01, 0.09, 0.04, seeds=report.MIN_SEEDS - 1) == \
        f"{report.MIN_SEEDS - 1} seeds: no verdict"


def _vocabulary(said: str) -> bool:
    """Whether a verdict is one sera.results.verdict can give."""
    side, _, prediction = said.partition(", ")
    if said.endswith(": no verdict"):
        return said.split(" ")[0].isdigit()
    return said == "no interval" or (
        side in ("ahead", "behind", "inconclusive")
        and prediction in ("", "as predicted", "not as predicted")
        and said != "inconclusive, as predicted")


def test_every_verdict_the_package_prints_speaks_one_vocabulary():
    """The results page, the confirmation layer's verdicts and the page's digits section all
    state their verdicts in sera.results.verdict's words, and agree cell for cell."""
    said, column = set(), None
    for line in report.page().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("|"):
            column = None
        elif "verdict" in cells:
            column = cells.index("verdict")
        elif column is not None and not set(cells[column]) <= set("-: "):
            said.add(cells[column])
    assert said and all(_vocabulary(s) for s in said), sorted(s for s in said if not _vocabulary(s))
    stated = confirm.verdicts()
    assert all(_vocabulary(s) for s in stated["verdict"])
    for row in stated.itertuples():
        cell = report.point_table(row.point)
        cell = cell[(cell["arm"] == row.arm) & (cell["against"] == row.against)
                    & (cell["k"] == row.k)].iloc[0]
        assert cell["verdict"] == row.verdict


def _independent_gain(name, arm, control, k):
    """Per-seed paired Pass@K differences from the raw stored table, with numpy and scipy only:
    Pass@K per prompt is 1 - C(n-c, k) / C(n, k) (exact integers through math.comb)."""
    final = pd.read_csv(runstore.STUDY_DIR / name / "final.csv.gz")

    def passk(row):
        n, c = int(row["n"]), int(row["correct"])
        return 1.0 - math.comb(n - c, k) / math.comb(n, k) if n >= k else np.nan

    final["passk"] = final.apply(passk, axis=1)
    a = final[final["arm"] == arm].set_index(["seed", "prompt"])["passk"]
    b = final[final["arm"] == control].set_index(["seed", "prompt"])["passk"]
    both = a.index.intersection(b.index)
    per_seed = (a.loc[both] - b.loc[both]).groupby(level="seed").mean().to_numpy()
    low, high = stats.t.interval(0.95, per_seed.size - 1, loc=per_seed.mean(),
                                 scale=stats.sem(per_seed))
    return per_seed.mean(), low, high, per_seed.size


@pytest.mark.parametrize("name, arm, control, k", [
    ("maze-n0-8-long-sera", "sera", "maxrl", 1),
    ("maze-n0-8-long-sera", "sera lr-half", "maxrl lr-half", 32),
    ("math-n0-4-320-avx2", "sera-rate", "maxrl", 8),
])
def test_a_page_cell_matches_an_independent_computation(name, arm, control, k):
    table = report.point_table(name)
    row = table[(table["arm"] == arm) & (table["against"] == control) & (table["k"] == k)]
    assert len(row) == 1
    row = row.iloc[0]
    gain, low, high, seeds = _independent_gain(name, arm, control, k)
    assert row["seeds"] == seeds
    np.testing.assert_allclose([row["gain"], row["low"], row["high"]], [gain, low, high],
                               rtol=1e-9, atol=1e-12)


def test_each_arm_names_the_instruction_set_its_stored_runs_record():
    # Read back from the stored provenance without the point's run list: a run's arm is its
    # method with the tag its learning rate, batch or bound gives (half the point's MaxRL step:
    # lr-half; half or twice its batch: batch-half, batch-double; N_max = 2 n0: nmax-2).
    name = "math-n0-4-320-avx2"
    summary = json.loads((runstore.STUDY_DIR / name / "provenance.json").read_text())
    full_lr = max(r["config"]["lr"] for r in summary["runs"])
    batch = summary["runs"][0]["config"]["batch_size"]
    seen = {}
    for record in summary["runs"]:
        config = record["config"]
        if config.get("agg") != "token-mean" or config["allocator"]["n_min"] != 2:
            continue  # the seqnorm and n_min arms
        tag = " lr-half" if config["lr"] < full_lr else \
            " nmax-2" if config["allocator"]["n_max_factor"] == 2 else \
            {batch // 2: " batch-half", 2 * batch: " batch-double"}.get(config["batch_size"], "")
        kinds = {start["cpu_capability"] for start in record["provenance"]
                 if "cpu_capability" in start}
        seen.setdefault(config["method"] + tag, set()).update(kinds)
    found = report.machines(name)
    for arm, kinds in seen.items():
        assert found[arm] == "+".join(sorted(kinds)), arm


def test_the_results_page_and_the_readme_table_match_the_stored_runs():
    # docs/results.md and the README's block are what `python -m sera.studies.report` writes.
    assert report.main(["--check"]) == 0, "run python -m sera.studies.report"


def test_the_readmes_reading_of_the_evidence_holds_on_the_stored_runs():
    # The README reads the mechanism arms as: sera's steps rest on about half MaxRL's successes
    # in mixed groups; MaxRL on half the batch falls behind at Pass@1 (interval below zero);
    # sera-evidence-waterline restores that count (at least 90% of MaxRL's in both halves of its
    # screen) and still trails MaxRL's training reward over epochs 2-5 (interval below zero).
    # sera on twice the batch is level at Pass@1 (interval holding zero), notebook 08 says.
    from sera.studies import diagnosis

    name = "math-n0-4-320-avx2"
    table = report.point_table(name).set_index(["arm", "against", "k"])
    assert table.loc[("maxrl batch-half", "maxrl", 1), "high"] < 0
    double = table.loc[("sera batch-double", "maxrl", 1)]
    assert double["low"] < 0 < double["high"]
    for point, arm in ((name, "sera lr-half"), ("maze-n0-8-long-sera", "sera")):
        per_step = diagnosis.evidence(report.confirm.load(point).allocations)
        ratio = per_step.loc[arm, ["first", "second"]] / per_step.loc["maxrl", ["first", "second"]]
        assert ((0.35 < ratio) & (ratio < 0.65)).all(), (point, arm, ratio)
    screen_point = "math-n0-4-80-avx2"
    per_step = diagnosis.evidence(report.confirm.load(screen_point).allocations)
    held = per_step.loc["sera-evidence-waterline", ["first", "second"]]
    assert (held >= 0.9 * per_step.loc["maxrl", ["first", "second"]]).all(), held
    gaps = screen.gaps(screen_point).set_index("arm")
    assert gaps.loc["sera-evidence-waterline", "high"] < 0


def test_the_second_half_table_recomputes_from_the_stored_evaluations():
    # Pass@1 at the middle and the end of each long run, from the stored metrics' rows alone.
    name = "math-n0-4-long"
    rows = pd.read_csv(runstore.STUDY_DIR / name / runstore.stored_file("metrics"))
    rows = rows[(rows["metric"] == "val_pass") & (rows["k"] == 1) & (rows["method"] == "maxrl")]
    middle = rows[rows["step"] == 320].set_index("seed")["value"]
    end = rows[rows["step"] == 640].set_index("seed")["value"]
    change = 100 * (end - middle)
    half = stats.t.ppf(0.975, change.size - 1) * change.std(ddof=1) / np.sqrt(change.size)
    expected = (f"| {name} | maxrl | {change.size} | {100 * middle.mean():.1f} | "
                f"{100 * end.mean():.1f} | {change.mean():+.1f} [{change.mean() - half:+.1f}, "
                f"{change.mean() + half:+.1f}] | {(change < 0).sum()} of {change.size} |")
    table = report.second_half_section()
    flat = [" ".join(line.split()) for line in table.splitlines()]
    assert " ".join(expected.split()) in flat


def test_the_pages_welch_and_bh_columns_recompute_from_the_stored_runs():
    from sera.results import bh_kept

    tables = report.with_bh({name: report.point_table(name) for name in report.stored_points()})
    every = pd.concat(tables.values(), ignore_index=True)
    # one cell's Welch interval from each arm's per-seed Pass@1, by hand
    row = tables["maze-n0-8-long-sera"].set_index(["arm", "against", "k"]).loc[
        ("sera", "maxrl", 1)]
    final = report.confirm.load("maze-n0-8-long-sera").final
    per_seed = {arm: final[final["arm"] == arm].assign(rate=lambda f: f["correct"] / f["n"])
                .groupby("seed")["rate"].mean().to_numpy() for arm in ("sera", "maxrl")}
    a, b = per_seed["sera"], per_seed["maxrl"]
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = stats.t.ppf(0.975, dof) * np.sqrt(va + vb)
    assert (row["welch_low"], row["welch_high"]) == pytest.approx(
        (a.mean() - b.mean() - half, a.mean() - b.mean() + half))
    # BH over every cell of the page that has a p-value; marks only where the interval excludes 0
    tested = every["p"].notna()
    kept = bh_kept(every.loc[tested, "p"])
    nominal = (every["low"] > 0) | (every["high"] < 0)
    assert set(every.loc[~nominal, "bh"]) <= {""}
    marks = every.loc[tested & nominal, "bh"].to_numpy()
    expected = np.where(kept[nominal[tested].to_numpy()], "kept", "lost")
    np.testing.assert_array_equal(marks, expected)
    assert (every["bh"] == "lost").any() and (every["bh"] == "kept").any()


def test_no_simulator_prediction_for_a_method_that_sets_its_own_step():
    table = report.point_table("math-n0-4-640-avx2")
    stepped = table[table["arm"] == "sera-evidence-step"]
    assert len(stepped) and stepped["predicted"].isna().all()
    assert not any(", as predicted" in v or "not as predicted" in v for v in stepped["verdict"])
    stored = confirm.read_prediction("math-n0-4-640-avx2")
    assert (stored["arm"] == "sera-evidence-step").any()  # stored before the runs, not shown


def test_runs_that_repeat_or_continue_another_point_s_are_named():
    """storage.continued against the stored metrics: every metric of the 640-step sera lr-half
    runs through step 320 equals the 320-step sweep's sera lr-0.5 (not only the three trajectory
    metrics the function compares), and runs from another instruction set are not named."""
    from sera.studies.confirm.storage import stored_table

    found = storage.continued("math-n0-4-640-avx2")
    assert ("math-n0-4-320-lr", "sera lr-0.5", 320) in found["sera lr-half"]
    long, short = (stored_table(name, "metrics") for name in ("math-n0-4-640-avx2",
                                                             "math-n0-4-320-lr"))
    key = ["seed", "step", "metric", "k"]
    a = long[(long["arm"] == "sera lr-half") & (long["step"] < 320)].set_index(key)["value"]
    b = short[(short["arm"] == "sera lr-0.5") & (short["step"] < 320)].set_index(key)["value"]
    both = a.index.intersection(b.index)
    assert len(both) > 0.9 * len(b)
    assert a[both].fillna(-1).equals(b[both].fillna(-1))
    # math-n0-4-320-avx2's MaxRL trained on AVX2 from the same warm-up: another sample
    assert all(other != "math-n0-4-320-avx2" for other, _, _ in found.get("maxrl", []))
    assert report.machines("math-n0-4-320-avx2")["maxrl"] == "AVX2"


def test_the_discount_reading_follows_the_regret_table():
    """A regret table whose answer is known by eye: on the two sequence points counts 0.8's
    worst regret is 0.5 against the default's 3.0, and it would cost 9.0 on the digits point;
    with the default best everywhere the sentence says so."""
    from sera.studies import discount

    sequence, other = ["math-n0-4-320-lr", "maze-n0-8-long-lr"], "digits-n0-16"
    assert set(sequence) <= set(confirm.POINTS) and other not in confirm.POINTS
    gap = pd.DataFrame({sequence[0]: [2.0, 0.0, 4.0], sequence[1]: [3.0, 0.5, 1.0],
                        other: [0.0, 9.0, 2.0]},
                       index=[discount.DEFAULT, "counts 0.8", "counts 0.9"])
    gap = gap.assign(worst=gap.max(axis=1))
    assert report.discount_reading(gap).startswith(
        "On the sequence points alone counts 0.8 predicts best (worst regret 0.5); counts 0.5 "
        "costs 2.0-3.0 there, while counts 0.8 would cost 9.0 on digits-n0-16.")
    assert discount.best_on(gap, [*sequence, other]) == discount.DEFAULT
    flat = gap.assign(**{sequence[0]: [0.0, 0.1, 4.0], sequence[1]: [0.0, 0.5, 1.0]})
    assert report.discount_reading(flat) == (
        "counts 0.5 is also the best choice on the sequence points alone.")
    assert report.discount_reading(gap[[*sequence, "worst"]]) == ""


def test_an_arm_is_compared_with_the_arm_it_was_registered_against():
    """The page compares an arm with the point's control and with the arm its registration names
    (`against`), on every stored point that names one, and never with an arm that has no runs."""
    arms = ["maxrl", "sera lr-0.43", "sera-evidence-step"]
    assert report._controls("maxrl", arms, "sera lr-0.43", "lr-0.43",
                            "sera-evidence-step") == ["maxrl", "sera-evidence-step"]
    assert report._controls("maxrl", arms[:2], "sera lr-0.43", "lr-0.43",
                            "sera-evidence-step") == ["maxrl"]
    named = [(name, a) for name in report.stored_points()
             for a in confirm.point(name).arms if a.against]
    assert named  # math-n0-4-640-avx2's constant step names sera-evidence-step
    for name, arm in named:
        table = report.point_table(name)
        if arm.name in set(table["arm"]):
            rows = table[(table["arm"] == arm.name) & (table["against"] == arm.against)]
            assert set(rows["k"]) == set(report.page_ks(confirm.point(name)))


def _readme_block():
    text = (runstore.ROOT / "README.md").read_text()
    return text.split(report.README_START)[1].split(report.README_END)[0].strip()


def test_the_readmes_results_lead_with_a_short_recommendation_from_the_cross_fit():
    # At most 3 sentences of at most 40 words above at most 14 table rows, and every verdict in
    # its table one of sera.results.verdict's words.
    from sera.studies import readme

    block = _readme_block()
    said = readme.sentences(block)
    assert 1 <= len(said) <= 3, said
    assert all(readme.words(s) <= readme.MAX_WORDS for s in said), said
    rows = [line for line in block.splitlines() if line.startswith("|")][2:]
    assert 1 <= len(rows) <= readme.MAX_ROWS
    assert all(_vocabulary(line.strip("|").split("|")[-1].strip()) for line in rows)


def test_the_recommendation_follows_each_verdict():
    # The advice for a sweep and K turns with its cross-fitted verdict: `sera` where it is
    # ahead, MaxRL where `sera` is behind, neither where the interval holds zero.
    import pandas as pd

    from sera.studies import readme

    def found(gain, low, high, verdict):
        return pd.DataFrame([{"point": "math-n0-4-320-lr", "k": k, "treatment": "sera",
                              "control": "maxrl", "treatment_steps": [0.35, 0.5],
                              "control_steps": [0.7, 0.7], "gain": gain, "low": low,
                              "high": high, "verdict": verdict} for k in (1, 32)])

    nothing = pd.DataFrame(columns=["bin", "prompt_set", "k", "point", "gain", "low", "high"])
    ahead = readme.recommendation(found(0.05, 0.01, 0.09, "ahead"), nothing)[0]
    behind = readme.recommendation(found(-0.05, -0.09, -0.01, "behind"), nothing)[0]
    neither = readme.recommendation(found(0.01, -0.02, 0.04, "inconclusive"), nothing)[0]
    assert "run `sera` at 0.35-0.5x" in ahead and "MaxRL" not in ahead
    assert "run MaxRL at 0.7x" in behind and "run `sera`" not in behind
    assert "unresolved" in neither and " run " not in neither


def test_the_preset_table_compares_a_tagged_arm_with_maxrl_at_its_step():
    # math-n0-4-640-avx2 registered `maxrl lr-half`: `sera lr-half` is read against it, not
    # against MaxRL at twice its step
    point = report.confirm.point("math-n0-4-640-avx2")
    assert report._matched(point, ["sera lr-half", "sera", "sera-evidence-step"]) == [
        "maxrl lr-half", "maxrl", "maxrl"]
    table = report.point_table("math-n0-4-640-avx2").set_index(["arm", "against", "k"])
    cell = report._cell(next(table.loc[[("sera lr-half", "maxrl lr-half", 8)]].reset_index()
                             .itertuples()))
    assert cell + " ‡ §" in report.preset_table()
