"""The model-free simulator (sera.studies.simulate): one step's expected update against kappa,
through the package's own loop, allocator and advantages; tables, pairing and the stored
profiles."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

import sera
from sera.studies import simulate
from sera.trainers import loop
from sera.trainers.config import AllocatorConfig
from sera.trainers.profiles import load_profiles


def _one_step(tmp_path, method: str, p0, n0: int, lr: float = 0.5):
    """The logit move of every prompt after one step over the whole set."""
    config = simulate.SimulationConfig(method=method, n0=n0, batch_size=len(p0), steps=1,
                                       eval_every=10, lr=lr, out=str(tmp_path / method))
    study = simulate.SimulatedStudy(config, p0)
    before = study.theta.copy()
    results = loop.fit(study)
    return study.theta - before, results


@pytest.mark.parametrize("p, n", [(0.02, 4), (0.3, 4), (0.8, 16)])
def test_one_maxrl_step_moves_each_logit_by_kappa_times_one_minus_p(tmp_path, p, n):
    prompts, lr = 20_000, 0.5
    moves, _ = _one_step(tmp_path, "maxrl", np.full(prompts, p), n, lr)
    expected = lr * simulate.expected_update(p, n)
    assert expected == pytest.approx(lr * sera.kappa(p, n) * (1 - p))
    standard_error = moves.std(ddof=1) / np.sqrt(prompts)
    assert abs(moves.mean() - expected) < 4 * standard_error


def test_unequal_counts_move_each_prompt_by_its_own_kappa(tmp_path):
    # sera-oracle allocates from the exact p: the weights n0 / N_q and the batch normaliser
    # cancel, so prompt q moves by lr * kappa(p_q, N_q) (1 - p_q) in expectation.
    levels = np.repeat([0.05, 0.5], 4000)
    lr = 0.5
    moves, results = _one_step(tmp_path, "sera-oracle", levels, 8, lr)
    counts = results.allocations.set_index("prompt")["rollouts"].sort_index().to_numpy()
    assert counts[0] > counts[-1]  # the hard prompts got more
    for level in (0.05, 0.5):
        mine = levels == level
        n = counts[mine]
        assert (n == n[0]).all()
        expected = lr * simulate.expected_update(level, n[0])
        assert abs(moves[mine].mean() - expected) < 4 * moves[mine].std(ddof=1) / np.sqrt(
            mine.sum())


def test_runs_are_reproducible_and_pass_at_k_is_measured_on_the_prompts(tmp_path):
    p0 = np.random.default_rng(0).beta(0.5, 2, 64)
    config = simulate.SimulationConfig(method="sera", steps=12, eval_every=4, batch_size=16)
    first = simulate.simulate(p0, config, repetitions=2)
    again = simulate.simulate(p0, config, repetitions=2)
    pd.testing.assert_frame_equal(first.metrics, again.metrics)
    start = first.metrics[(first.metrics["metric"] == "val_pass") & (first.metrics["step"] == 0)]
    held = np.clip(p0, 1e-6, 1 - 1e-6)  # the logits stay finite
    for k in config.ks:
        value = start.loc[start["k"] == k, "value"].iloc[0]
        assert value == pytest.approx(np.mean(1 - (1 - held) ** k))
    allocated = first.metrics.loc[first.metrics["metric"] == "allocated", "value"]
    assert allocated.iloc[:4].eq(0).all() and allocated.iloc[4:12].eq(1).all()


def test_regime_map_pairs_methods_by_seed():
    p0 = np.random.default_rng(1).beta(0.5, 2, 32)
    base = simulate.SimulationConfig(eval_every=4, batch_size=8)
    table = simulate.regime_map(p0, [4, 8], steps=8, repetitions=3, base=base)
    assert set(table["method"]) == {"maxrl", "sera"} and set(table["n0"]) == {4, 8}
    assert set(table["step"]) == {0, 4, 8} and set(table["seed"]) == {0, 1, 2}
    gain = simulate.predicted_gain(table)
    row = gain[(gain["n0"] == 8) & (gain["step"] == 8) & (gain["k"] == 1)].iloc[0]
    a = table[(table["method"] == "sera") & (table["n0"] == 8) & (table["step"] == 8)
              & (table["k"] == 1)].sort_values("seed")["pass@k"].to_numpy()
    b = table[(table["method"] == "maxrl") & (table["n0"] == 8) & (table["step"] == 8)
              & (table["k"] == 1)].sort_values("seed")["pass@k"].to_numpy()
    assert row["gain"] == pytest.approx((a - b).mean()) and row["runs"] == 3
    assert row["low"] <= row["gain"] <= row["high"]
    # at step 0 nothing has moved: both methods start from the same profile
    zero = gain[gain["step"] == 0]
    assert np.allclose(zero["gain"], 0)


def test_harder_divides_the_odds_and_profiles_are_stored():
    p = np.array([0.5, 0.2, 0.9])
    q = simulate.harder(p, 4.0)
    np.testing.assert_allclose(q / (1 - q), p / (1 - p) / 4)
    profiles = load_profiles()
    same = simulate.harder(profiles["math"], 1.0)  # the profile itself, to the last bit
    assert same.tobytes() == profiles["math"].tobytes() and same is not profiles["math"]
    assert {"digits", "maze", "math"} <= set(profiles)
    for values in profiles.values():
        assert values.size >= 100 and ((values >= 0) & (values <= 1)).all()


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="lr"):
        simulate.SimulationConfig(lr=0)
    config = simulate.SimulationConfig()
    with pytest.raises(ValueError, match="p0"):
        simulate.SimulatedStudy(config, np.ones((2, 2)) * 0.5)
    with pytest.raises(ValueError):
        simulate.SimulatedStudy(dataclasses.replace(config), [1.5])


def test_posterior_draws_follow_the_jeffreys_posterior_of_each_count():
    samples, draws = 32, 4000
    p_hat = np.array([0, 1, 8, 32]) / samples
    out = simulate.posterior_draws(p_hat, samples, draws, seed=3)
    assert out.shape == (draws, 4) and (out > 0).all() and (out < 1).all()
    s = p_hat * samples
    a, b = s + 0.5, samples - s + 0.5
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    # each column's mean within 4 standard errors of the Beta mean
    assert np.all(np.abs(out.mean(axis=0) - mean) < 4 * np.sqrt(var / draws))
    assert np.array_equal(out, simulate.posterior_draws(p_hat, samples, draws, seed=3))
    with pytest.raises(ValueError, match="counts out of 32"):
        simulate.posterior_draws([0.1], samples, 2)


def test_calibrated_step_size_reproduces_the_measured_rise():
    p0 = np.random.default_rng(0).beta(0.6, 2.0, 64)
    config = simulate.SimulationConfig(method="maxrl", n0=4, batch_size=16, steps=24)
    slow = simulate.pass1_rise(p0, dataclasses.replace(config, lr=0.1))
    fast = simulate.pass1_rise(p0, dataclasses.replace(config, lr=1.0))
    assert 0 < slow < fast  # the rise grows with the step size
    target = (slow + fast) / 2
    lr = simulate.calibrate_lr(p0, config, target)
    assert 0.1 < lr < 1.0
    # the same seeds at every step size: the root's rise is the target up to the root's
    # tolerance and the jumps of a finite number of Bernoulli draws
    assert simulate.pass1_rise(p0, dataclasses.replace(config, lr=lr)) == pytest.approx(
        target, abs=0.01)
    with pytest.raises(ValueError, match="outside what step sizes"):
        simulate.calibrate_lr(p0, config, 0.99)


def test_a_simulated_run_in_memory_matches_the_same_run_through_a_folder(tmp_path, monkeypatch):
    """simulate() writes nothing and needs no torch, and its tables are the ones `loop.fit`
    writes for the same run in a folder (checkpointed along the way)."""
    p0 = np.random.default_rng(3).beta(0.5, 1.5, 40)
    config = simulate.SimulationConfig(method="sera", n0=4, batch_size=8, steps=30,
                                       eval_every=10, seed=2)
    on_disk = loop.fit(simulate.SimulatedStudy(
        dataclasses.replace(config, out=str(tmp_path / "run"), checkpoint_every=7), p0))

    def refuse(*args, **kwargs):
        raise AssertionError("the simulator wrote to disk")

    for name in ("atomic", "begin", "finish"):
        monkeypatch.setattr(simulate.loop.runstore, name, refuse)
    monkeypatch.setattr(simulate.loop.checkpoint, "save", refuse)
    in_memory = simulate.simulate(p0, config)
    pd.testing.assert_frame_equal(in_memory.metrics, on_disk.metrics)
    pd.testing.assert_frame_equal(in_memory.allocations, on_disk.allocations)
    pd.testing.assert_series_equal(in_memory.final["p"], on_disk.final["p"])
    # a caller that reads some tables gets those, the same, and the others empty
    only = simulate.simulate(p0, config, tables=("metrics", "allocations"))
    pd.testing.assert_frame_equal(only.metrics, on_disk.metrics)
    pd.testing.assert_frame_equal(only.allocations, on_disk.allocations)
    assert only.final.empty
    with pytest.raises(ValueError, match="tables must be among"):
        simulate.simulate(p0, config, tables=("metric",))


def test_the_simulator_plotting_diagnosis_and_stored_points_import_without_torch():
    """Notebook 08 reads, simulates and draws without loading a model: the confirmation points
    name their runs through the torch-free presets, and a trainer loads only to build a run."""
    import subprocess
    import sys

    code = ("import sys, sera.studies.simulate, sera.plotting, sera.studies.diagnosis, "
            "sera.results, sera.studies.confirm, sera.trainers.presets; "
            "from sera.studies import confirm; confirm.load('maze-n0-8'); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"


def test_worker_processes_give_the_same_map():
    p0 = np.random.default_rng(5).beta(0.5, 1.5, 24)
    base = simulate.SimulationConfig(batch_size=8, eval_every=10, steps=20, seed=1)
    one = simulate.regime_map(p0, [4, 8], 20, repetitions=2, base=base)
    simulate._SIMULATED.clear()  # simulate again, in the workers
    two = simulate.regime_map(p0, [4, 8], 20, repetitions=2, base=base, processes=2)
    pd.testing.assert_frame_equal(one, two)
    draws = np.vstack([p0, p0[::-1]])
    one = simulate.regime_map_over(draws, [4], 20, base=base)
    simulate._SIMULATED.clear()
    pd.testing.assert_frame_equal(one, simulate.regime_map_over(draws, [4], 20, base=base,
                                                                processes=2))
    with pytest.raises(ValueError, match="processes"):
        simulate.regime_map(p0, [4], 20, base=base, processes=0)


def test_a_setting_two_maps_share_is_simulated_once_with_the_same_table(monkeypatch):
    p0 = np.random.default_rng(6).beta(0.5, 1.5, 16)
    base = simulate.SimulationConfig(batch_size=8, eval_every=10, steps=20, seed=2)
    simulate._SIMULATED.clear()
    fresh = simulate.regime_map(p0, [4, 8], 20, ("maxrl", "sera"), repetitions=2, base=base)
    simulated = []
    monkeypatch.setattr(simulate, "_setting",
                        lambda *task: simulated.append(task[1]) or fresh.iloc[:0])
    # the sweep's N_min 2 is the default: its maxrl and sera settings are the map's
    again = simulate.regime_map(p0, [4, 8], 20, ("maxrl", "sera", "sera-rate"), repetitions=2,
                                base=dataclasses.replace(base, allocator=AllocatorConfig(n_min=2)))
    assert [(c.method, c.n0) for c in simulated] == [("sera-rate", 4), ("sera-rate", 8)]
    shared = again[again["method"] != "sera-rate"].reset_index(drop=True)
    pd.testing.assert_frame_equal(shared, fresh)
    shared.loc[0, "pass@k"] = -1.0  # a caller's edit does not reach the kept table
    assert simulate._SIMULATED[next(iter(simulate._SIMULATED))]["pass@k"].min() >= 0
    simulate._SIMULATED.clear()


def test_the_trajectory_averages_each_diagnostic_over_the_steps_before_each_evaluation():
    """_trajectory against a reading of its rule row by row: the mean of the values logged at
    steps before the evaluation's (NaN before the first), per run and diagnostic."""
    p0 = np.random.default_rng(11).beta(0.5, 1.5, 48)
    config = simulate.SimulationConfig(method="sera", n0=4, batch_size=8, steps=30,
                                       eval_every=7, seed=4)
    metrics = simulate.simulate(p0, config, 2).metrics
    table = simulate._trajectory(metrics)
    assert len(table) == 2 * len(config.ks) * len([*range(0, 30, 7), 30])  # 0, 7, ..., 28, 30
    for row in table.itertuples():
        logged = metrics[(metrics["seed"] == row.seed) & (metrics["step"] < row.step)]
        for name in simulate.DIAGNOSTICS:
            values = logged[logged["metric"] == name].sort_values("step")["value"]
            expected = values.mean() if len(values) else np.nan
            assert getattr(row, name) == pytest.approx(expected, rel=1e-12, nan_ok=True)
