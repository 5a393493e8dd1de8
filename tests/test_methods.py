"""The method table and the loop's bookkeeping, without a model: planning, epochs, history."""

import subprocess
import sys

import numpy as np
import pytest

import sera
from sera.methods import METHODS, estimate, plan, supported
from sera.trainers.config import AllocatorConfig, RunConfig, differences


def test_every_method_plans_the_budget_from_its_own_estimates():
    history = AllocatorConfig().history(20)
    history.record_groups(np.arange(20), np.arange(20) % 5, np.full(20, 4))
    history.end_epoch()
    ids = np.arange(6, 14)
    exact = np.linspace(0.05, 0.9, ids.size)
    state = {}
    for method in METHODS.values():
        p, available = estimate(method, history, ids, exact)
        if method.protocol != "one-shot":
            with pytest.raises(ValueError, match="samples in rounds"):
                plan(method, AllocatorConfig(), 8, ids, p, available, state, history)
            continue
        allocation = plan(method, AllocatorConfig(), 8, ids, p, available, state, history)
        if method.allocator == "none":
            assert allocation is None
            continue
        cap = (method.n_max_factor or 8) * 8
        assert allocation.counts.sum() == 64, method.name
        if method.allocator == "gvm":  # no bounds (its authors' code): the p = 0 prompts get 0
            assert (allocation.counts[allocation.p == 0] == 0).all()
        else:
            assert allocation.counts.min() >= 2, method.name
            assert allocation.counts.max() <= cap, method.name
        if method.allocator in ("uniform", "reweight"):
            assert (allocation.counts == 8).all()
        if method.allocator == "reweight":
            np.testing.assert_allclose(allocation.weights, 1 / sera.kappa(allocation.p, 8))
        elif not method.weighted:
            assert (allocation.weights[allocation.retained] == 1).all()
        else:
            kept = allocation.retained
            np.testing.assert_allclose(allocation.counts[kept] * allocation.weights[kept], 8.0)
        if method.estimates == "exact":
            np.testing.assert_allclose(allocation.p, exact)
        elif method.estimator == "last-epoch":  # the raw rates k/4, 0 and 1 included
            np.testing.assert_allclose(allocation.p, (ids % 5) / 4)
        else:
            np.testing.assert_allclose(allocation.p, history.estimate(ids)[0])
    assert set(state) == {"cero"}  # the stateful allocator kept its cumulative counts
    fresh = plan(METHODS["cero-reconstruction"], AllocatorConfig(), 8, ids, exact, None, {},
                 history)
    np.testing.assert_array_equal(state["cero"].cumulative[ids], fresh.counts)


def test_the_baselines_see_zero_and_one_where_the_smoothed_estimate_cannot():
    # after one epoch of 8 failures, Knapsack RL's rule gives the prompt n_min (its authors'
    # code: 2) and GVM's gives it nothing, as their code does; the smoothed estimate is never 0
    history = AllocatorConfig().history(4)
    history.record_groups(np.arange(4), [0, 2, 4, 8], np.full(4, 8))
    history.end_epoch()
    ids = np.arange(4)
    for name in ("knapsack", "gvm"):
        method = METHODS[name]
        p, available = estimate(method, history, ids)
        np.testing.assert_allclose(p, [0, 0.25, 0.5, 1])
        counts = plan(method, AllocatorConfig(), 8, ids, p, available).counts
        assert counts.sum() == 32
        assert counts[0] == 0 if name == "gvm" else counts[0] >= 2
    assert estimate(METHODS["sera"], history, ids)[0].min() > 0


def test_sera_falls_back_until_its_prompts_are_seen():
    history = AllocatorConfig().history(10)
    ids = np.arange(5)
    allocation = plan(METHODS["sera"], AllocatorConfig(), 4, ids,
                      *estimate(METHODS["sera"], history, ids))
    assert allocation.rule == "uniform" and allocation.fallback


def test_the_same_name_means_the_same_thing_everywhere():
    assert "sera-oracle" in supported(exact=True) and "sera-oracle" not in supported(exact=False)
    assert "ce" not in supported(exact=False)
    assert METHODS["sera"].estimates == "history"
    assert METHODS["sera-oracle"].estimates == "exact"


def test_config_keys_and_differences():
    keys = RunConfig(method="sera", n0=4, allocator=AllocatorConfig(u_min=0.3)).keys()
    assert keys == {"method": "sera", "estimates": "history", "allocator": "waterline",
                    "seed": 0, "n0": 4, "agg": "response-mean", "u_min": 0.3}
    assert RunConfig(method="maxrl", allocator=AllocatorConfig(u_min=0.3)).keys()["u_min"] is None
    assert differences({"n0": 4, "steps": 10, "allocator": {"u_min": None}},
                       {"n0": 8, "steps": 20, "allocator": {"u_min": 0.5}}) == \
        ["allocator.u_min", "n0"]
    # a setting added after a run was saved is no change while it keeps its default
    new = {"n0": 4, "n_tune": 0, "allocator": {"u_min": None, "rule": "a"}}
    old = {"n0": 4, "allocator": {"u_min": None}}
    fresh = {"n0": 8, "n_tune": 0, "allocator": {"u_min": None, "rule": "a"}}
    assert differences(old, new, fresh) == []
    assert differences(old, {**new, "n_tune": 64}, fresh) == ["n_tune"]
    assert differences(old, new) == ["allocator.rule", "n_tune"]  # no defaults: strict
    with pytest.raises(ValueError, match="method must be one of"):
        RunConfig(method="ppo")


def test_the_math_core_imports_without_torch():
    code = ("import sys, sera, sera.studies.analysis, sera.plotting, sera.history, sera.passk; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_import_sera_loads_neither_the_trainers_nor_pandas_nor_scipy():
    """The core sits below the trainers: `import sera` (a grading kernel's first cell) loads
    numpy and the package's math, and the allocator's settings from the core."""
    code = ("import sys, sera; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pandas', 'scipy', 'torch', 'matplotlib') or m.startswith('sera.trainers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
    from sera.allocator_config import AllocatorConfig
    from sera.trainers.config import AllocatorConfig as kept

    assert kept is AllocatorConfig  # the trainers' name for it still works


def test_sera_is_the_papers_method_and_its_variants_carry_their_own_names():
    from sera.methods import SAFEGUARD, U_MIN

    resolved = {name: AllocatorConfig().for_method(METHODS[name])
                for name in ("sera", "sera-rate", "sera-rate-safeguard", "maxrl")}
    assert (resolved["sera"].history_rule, resolved["sera"].u_min) == ("counts", U_MIN)
    assert (resolved["sera-rate"].history_rule, resolved["sera-rate"].u_min) == ("rate", 0.0)
    assert resolved["sera-rate-safeguard"].u_min == SAFEGUARD == 0.3
    assert resolved["maxrl"].history_rule == "counts"
    # a config that sets a value overrides the method's; 0 turns the selection off
    off = AllocatorConfig(u_min=0.0, history_rule="rate").for_method(METHODS["sera"])
    assert (off.history_rule, off.u_min) == ("rate", 0.0)
    assert off.for_method(METHODS["sera"]) == off  # resolving twice changes nothing
    # a prior given as a list (JSON, by hand) is kept as a tuple, so the config resolves
    listed = AllocatorConfig(history_prior=[2, 3]).for_method(METHODS["sera"])
    assert listed.history_prior == (2.0, 3.0) and listed.history_rule == "counts"
    # the paper's selection is on in the plan, and off once overridden with 0
    p = np.array([1e-4, 0.02, 0.3, 0.5, 0.9, 0.999])
    ids = np.arange(p.size)
    plan_own = plan(METHODS["sera"], AllocatorConfig(), 4, ids, p)
    plan_off = plan(METHODS["sera"], AllocatorConfig(u_min=0.0), 4, ids, p)
    expected = sera.allocate(p, 24, n_min=2, n_max=32, n0=4, u_min=U_MIN)
    np.testing.assert_array_equal(plan_own.counts, expected.counts)
    np.testing.assert_array_equal(plan_off.counts, sera.allocate(p, 24, 2, 32, n0=4).counts)
    assert (plan_own.counts != plan_off.counts).any()  # here the threshold binds
    with pytest.raises(ValueError, match="u_min must lie in"):
        AllocatorConfig(u_min=1.0)


def test_run_keys_and_labels_record_the_threshold_that_ran():
    import pandas as pd

    from sera.tables import arm
    from sera.trainers.grid import run_label

    rows = pd.DataFrame([RunConfig(method=m, allocator=a).keys() for m, a in (
        ("sera", AllocatorConfig()), ("sera-rate", AllocatorConfig()),
        ("sera-rate-safeguard", AllocatorConfig()), ("sera", AllocatorConfig(u_min=0.0)),
        ("sera", AllocatorConfig(u_min=0.5)), ("maxrl", AllocatorConfig()))])
    assert rows["u_min"].fillna(-1).tolist() == [0.05, -1, 0.3, -1, 0.5, -1]  # -1: none
    assert arm(rows).tolist() == ["sera", "sera-rate", "sera-rate-safeguard", "sera (u_min 0)",
                                  "sera (u_min 0.5)", "maxrl"]
    assert run_label(RunConfig(method="sera")) == "sera_n0-16_response-mean_seed-0"
    assert run_label(RunConfig(method="sera", allocator=AllocatorConfig(u_min=0.0))) == \
        "sera_umin-0_n0-16_response-mean_seed-0"
