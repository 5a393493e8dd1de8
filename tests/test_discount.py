"""The discount study: the Brier score of a replayed history against a hand computation, its
meaning (on Bernoulli outcomes it exceeds the irreducible p(1-p) by the squared error), and the
stored table recomputing from the stored runs."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sera.studies import discount


def _allocations(rng, p, steps, prompts_per_step, rollouts):
    """A run's allocations table: one epoch every `len(p) // prompts_per_step` steps, each prompt
    visited once an epoch with Bernoulli(p) outcomes."""
    rows, n = [], len(p)
    per_epoch = n // prompts_per_step
    for step in range(steps):
        epoch = step // per_epoch
        first = (step % per_epoch) * prompts_per_step
        for prompt in range(first, first + prompts_per_step):
            k = rollouts[prompt]
            rows.append({"method": "maxrl", "seed": 0, "step": step, "epoch": epoch,
                         "prompt": prompt, "rollouts": k,
                         "successes": int(rng.binomial(k, p[prompt]))})
    return pd.DataFrame(rows)


def test_brier_matches_a_hand_replay_of_the_counts_rule():
    rng = np.random.default_rng(3)
    p = rng.uniform(0.05, 0.95, 8)
    table = _allocations(rng, p, steps=24, prompts_per_step=4, rollouts=rng.integers(2, 9, 8))
    gamma = 0.7
    got = discount.brier(table, {"g": {"rule": "counts", "gamma": gamma}})["brier"].iloc[0]
    # By hand: s, f fold in at each epoch boundary; a visit is scored once its prompt was seen.
    s, f, seen = np.zeros(8), np.zeros(8), np.zeros(8, bool)
    pend_s, pend_f = np.zeros(8), np.zeros(8)
    total = scored = 0.0
    epoch = 0
    for row in table.itertuples():
        while row.epoch > epoch:
            s, f = gamma * s + pend_s, gamma * f + pend_f
            seen |= (pend_s + pend_f) > 0
            pend_s[:], pend_f[:] = 0, 0
            epoch += 1
        q = row.prompt
        if seen[q]:
            p_hat = (s[q] + 1) / (s[q] + f[q] + 2)
            total += row.successes * (1 - p_hat) ** 2 + (row.rollouts - row.successes) * p_hat ** 2
            scored += row.rollouts
        pend_s[q] += row.successes
        pend_f[q] += row.rollouts - row.successes
    assert got == pytest.approx(total / scored, rel=1e-12)


def test_brier_exceeds_the_irreducible_part_by_the_squared_error():
    # Constant p: E[Brier] = p(1-p) + E[(p_hat - p)^2]; with gamma 1 the estimate converges, so
    # its Brier approaches p(1-p) from above, and gamma 0 (one epoch of 8 rollouts) keeps an
    # error of about p(1-p)/(n+2) plus the prior's pull.
    rng = np.random.default_rng(0)
    p = np.full(400, 0.3)
    table = _allocations(rng, p, steps=400, prompts_per_step=40, rollouts=np.full(400, 8))
    got = discount.brier(table, {"keep": {"rule": "counts", "gamma": 1.0},
                                 "forget": {"rule": "counts", "gamma": 0.0}}).set_index("setting")
    irreducible = 0.3 * 0.7
    scored = got["rollouts"].iloc[0]
    se = np.sqrt(0.3 * 0.7 * (1 - 2 * 0.3) ** 2 / scored + 1e-12) * 4 + 2e-3
    assert abs(got.loc["keep", "brier"] - irreducible) < se
    # gamma 0: p_hat = (s + 1) / 10 with s ~ Bin(8, 0.3): E[(p_hat - p)^2] = (8 pq + (1 - 2p)^2)
    # / 100 exactly.
    excess = (8 * 0.3 * 0.7 + (1 - 2 * 0.3) ** 2) / 100
    assert got.loc["forget", "brier"] - irreducible == pytest.approx(excess, abs=se)


def test_against_default_pairs_runs():
    table = pd.DataFrame({"point": "x", "arm": "maxrl", "seed": [0, 0, 1, 1, 2, 2],
                          "setting": [discount.DEFAULT, "other"] * 3,
                          "brier": [0.20, 0.18, 0.30, 0.29, 0.25, 0.22], "rollouts": 10.0})
    row = discount.against_default(table).set_index("setting").loc["other"]
    diffs = np.array([-0.02, -0.01, -0.03])
    low, high = stats.t.interval(0.95, 2, loc=diffs.mean(), scale=stats.sem(diffs))
    assert row["vs_default"] == pytest.approx(diffs.mean()) and row["runs"] == 3
    assert (row["low"], row["high"]) == pytest.approx((low, high))


def test_the_stored_table_recomputes_from_the_stored_runs():
    stored = pd.read_csv(discount.FOLDER / discount.BRIER)
    name = "math-n0-4-320-avx2"
    again = discount.study([name])
    mine = stored[stored["point"] == name].reset_index(drop=True)
    assert len(mine) == len(again)
    np.testing.assert_allclose(mine["brier"].to_numpy(), again["brier"].to_numpy(), rtol=1e-12)


def test_replay_history_scores_the_same_replay_against_the_exact_p():
    # sera.results.replay_history walks the recorded steps through the same replay as the Brier
    # score; its history MAE, by hand: the mean over the steps whose prompts all had an estimate
    # of the mean |p_hat - p| over the step's prompts.
    from sera.results import replay_history

    rng = np.random.default_rng(4)
    p = rng.uniform(0.05, 0.95, 8)
    table = _allocations(rng, p, steps=24, prompts_per_step=4, rollouts=rng.integers(2, 9, 8))
    table["p_exact"] = p[table["prompt"]]
    gamma = 0.6
    got = replay_history(table, {"g": {"rule": "counts", "gamma": gamma}}).iloc[0]
    s, f, seen = np.zeros(8), np.zeros(8), np.zeros(8, bool)
    pend_s, pend_f = np.zeros(8), np.zeros(8)
    errors, epoch = [], 0
    for _, part in table.groupby("step"):
        while part["epoch"].iloc[0] > epoch:
            s, f = gamma * s + pend_s, gamma * f + pend_f
            seen |= (pend_s + pend_f) > 0
            pend_s[:], pend_f[:] = 0, 0
            epoch += 1
        q = part["prompt"].to_numpy()
        if seen[q].all():
            errors.append(np.abs((s[q] + 1) / (s[q] + f[q] + 2) - p[q]).mean())
        np.add.at(pend_s, q, part["successes"].to_numpy())
        np.add.at(pend_f, q, (part["rollouts"] - part["successes"]).to_numpy())
    assert got["steps"] == len(errors) > 0
    assert got["history_mae"] == pytest.approx(np.mean(errors), rel=1e-12)
    assert got["ideal_mae"] == 0  # p never moves here: the previous visit's p is exact


def test_regret_by_hand():
    # two points, per-run Brier scores; at A the best is counts 0.8 (0.10), at B counts 0.2 (0.20)
    rows = [("A", "counts 0.2", 0.13), ("A", "counts 0.2", 0.15), ("A", "counts 0.5", 0.11),
            ("A", "counts 0.8", 0.10), ("B", "counts 0.2", 0.20), ("B", "counts 0.5", 0.22),
            ("B", "counts 0.8", 0.27), ("A", "rate 0.5", 0.01), ("B", "rate 0.5", 0.01)]
    table = pd.DataFrame(rows, columns=["point", "setting", "brier"])
    gap = discount.regret(table)
    assert "rate 0.5" not in gap.index
    np.testing.assert_allclose(gap.loc["counts 0.2", ["A", "B"]], [0.04, 0.0], atol=1e-12)
    np.testing.assert_allclose(gap["worst"], [0.04, 0.02, 0.07], atol=1e-12)
    assert discount.chosen(table) == "counts 0.5"


def test_sera_plans_with_the_discount_the_stored_study_chooses():
    import inspect

    from sera.history import SuccessHistory
    from sera.methods import METHODS
    from sera.trainers.config import AllocatorConfig

    stored = pd.read_csv(discount.FOLDER / discount.BRIER)
    assert set(stored["point"]) == {*discount.POINTS, "digits"}
    assert discount.chosen(stored) == discount.DEFAULT
    gamma = inspect.signature(SuccessHistory).parameters["gamma"].default
    assert discount.SETTINGS[discount.DEFAULT] == {"rule": METHODS["sera"].history_rule,
                                                   "gamma": gamma}
    assert AllocatorConfig().history_gamma == gamma  # what the trainers plan with
