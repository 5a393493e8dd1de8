"""Names that mean one thing: rules against methods, the selection's spelling, one way to a
method's own plan, and registries that refuse a name given twice."""

import dataclasses
import warnings

import numpy as np
import pandas as pd
import pytest

import sera
import sera.allocation
import sera.baselines
import sera.history
import sera.methods
from sera import _checks, runstore


def test_method_plan_is_what_the_trainer_allocated():
    # The stored runs of the paper's sera at maze-n0-8-long-sera recorded, per step, each
    # prompt's estimate and the rollouts the trainer gave it: method_plan on those estimates
    # gives the same counts at every allocated step checked.
    from sera.trainers.config import AllocatorConfig

    folder = runstore.STUDY_DIR / "maze-n0-8-long-sera"
    table = pd.read_csv(folder / "allocations.csv.gz")
    runs = table[(table["arm"] == "sera") & table["allocated"]]
    config = next(r["config"] for r in runstore.stored_summary(folder)["runs"]
                  if r["config"]["method"] == "sera" and r["config"]["seed"] == 0)
    allocator = AllocatorConfig(**config["allocator"])  # the point's bound: N_max 4 n0
    checked = 0
    for (seed, step), batch in runs.groupby(["seed", "step"]):
        if seed > 1 or step % 40:
            continue
        plan = sera.method_plan("sera", batch["estimate"].to_numpy(), n0=config["n0"],
                                allocator=allocator)
        np.testing.assert_array_equal(plan.counts, batch["rollouts"].to_numpy(),
                                      err_msg=f"seed {seed} step {step}")
        checked += 1
    assert checked >= 10


def test_method_plan_applies_the_methods_own_settings():
    p_hat = np.array([0.0, 0.0, 0.0, 0.9, 0.95])
    own = sera.method_plan("sera", p_hat, n0=4)
    # sera's bound is 8 n0 = 32 and its selection keeps prompts with U(p, N) >= 0.05: p = 0
    # prompts can never be mixed, so they are dropped and the budget of 20 goes elsewhere.
    assert own.counts.sum() == 20 and own.counts.max() <= 32
    bare = sera.allocate(p_hat, 20, n_min=2)
    assert not np.array_equal(own.counts, bare.counts)
    with pytest.raises(ValueError, match="method must be one of"):
        sera.method_plan("not-a-method", p_hat, n0=4)


def test_a_registry_refuses_a_name_given_twice():
    assert _checks.registry([("a", 1), ("b", 2)], "rule") == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="rule 'a' is registered twice"):
        _checks.registry([("a", 1), ("a", 2)], "rule")
    from sera.baselines import BASELINE_RULES
    from sera.methods import METHODS

    assert len(METHODS) == len({m.name for m in METHODS.values()})
    assert set(BASELINE_RULES) == {"knapsack", "gvm", "dars-hw", "dars-et"}


def test_the_method_table_refuses_a_method_given_twice():
    from sera import methods

    again = dataclasses.replace(methods.METHODS["maxrl"], summary="another maxrl")
    with pytest.raises(ValueError, match="method 'maxrl' is registered twice"):
        methods.table([*methods.METHODS.values(), again])
    assert methods.table(methods.METHODS.values()) == methods.METHODS


def test_the_rule_and_protocol_tables_are_registries():
    from sera.allocation import RULES, SELECTABLE
    from sera.baselines import BASELINE_RULES
    from sera.trainers.protocols import PROTOCOLS

    # every rule allocate knows, each once: the waterline's, uniform, then the compared ones
    assert RULES == (*SELECTABLE, *BASELINE_RULES) and len(set(RULES)) == len(RULES)
    with pytest.raises(ValueError, match="allocation rule 'paper' is registered twice"):
        _checks.registry(((name, None) for name in (*RULES, "paper")), "allocation rule")
    assert set(PROTOCOLS) == {m.protocol for m in sera.methods.METHODS.values()}


# ----------------------------------------------------------------------------- rules vs methods


def test_a_rule_is_what_allocate_takes_and_a_method_what_a_trainer_runs():
    from sera.allocation import RULES
    from sera.methods import METHODS

    p = np.array([0.02, 0.1, 0.35, 0.6, 0.95])
    for rule in RULES:
        result = sera.allocate(p, 40, 2, 32, rule=rule)
        assert result.rule == rule and result.counts.sum() == 40
    # rules and methods share only the names that mean the same allocation in both tables
    for name in set(RULES) & set(METHODS):
        assert METHODS[name].allocator == name
    for method in METHODS.values():
        assert method.allocator in (*RULES, "waterline", "none", "cero", "reweight",
                                    "sequential")


@pytest.mark.parametrize("old, new", [
    (lambda: sera.allocation.METHODS, lambda: sera.allocation.RULES),
    (lambda: sera.allocation.BASELINES, lambda: tuple(sera.baselines.BASELINE_RULES)),
    (lambda: sera.baselines.RULES, lambda: sera.baselines.BASELINE_RULES),
    (lambda: sera.history.RULES, lambda: sera.history.HISTORY_RULES),
    (lambda: sera.allocate([0.1, 0.5], 8, method="exact").counts,
     lambda: sera.allocate([0.1, 0.5], 8, rule="exact").counts),
    (lambda: sera.allocate([0.1, 0.5], 8).method, lambda: sera.allocate([0.1, 0.5], 8).rule),
    (lambda: sera.methods.METHODS["sera"].u_min, lambda: sera.methods.U_MIN),
    (lambda: sera.methods.METHODS["sera-rate"].u_min, lambda: None),
    (lambda: sera.allocate([0.1, 0.5], 8, u_min=None).counts,
     lambda: sera.allocate([0.1, 0.5], 8, u_min=0.0).counts),
])
def test_an_older_name_still_works_and_names_the_new_one(old, new):
    with pytest.warns(DeprecationWarning, match="is spelled"):
        value = old()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        expected = new()
    np.testing.assert_equal(value, expected)


def test_an_older_name_keeps_its_errors():
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="method must be one"):
        sera.allocate([0.2, 0.3], 8, method="round")
    with pytest.raises(ValueError, match="rule must be one of"):
        sera.allocate([0.2, 0.3], 8, rule="round")
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="give the rule once"):
        sera.allocate([0.2, 0.3], 8, rule="exact", method="exact")
    with pytest.raises(AttributeError):
        sera.allocation.NOT_A_NAME  # noqa: B018


def test_the_packages_own_planning_uses_the_new_names():
    # Every method planned, every rule allocated and a run's keys built with DeprecationWarnings
    # as errors: none of the package's own paths still calls an older name.
    from sera.allocation import RULES
    from sera.methods import METHODS, estimate, plan
    from sera.trainers.config import AllocatorConfig, RunConfig

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        history = AllocatorConfig().history(12)
        history.record_groups(np.arange(12), np.arange(12) % 5, np.full(12, 4))
        history.end_epoch()
        ids, exact, state = np.arange(2, 10), np.linspace(0.05, 0.9, 8), {}
        for method in METHODS.values():
            RunConfig(method=method.name).keys()
            if method.protocol == "one-shot":
                plan(method, AllocatorConfig(), 4, ids,
                     *estimate(method, history, ids, exact), state, history)
            if method.allocator not in ("none", "cero") and method.protocol == "one-shot":
                sera.method_plan(method.name, exact, n0=4)
        for rule in RULES:
            sera.allocate(exact, 32, 2, 16, rule=rule)


# ----------------------------------------------------------------------------- u_min


def test_one_spelling_for_the_selection_off_and_one_for_the_methods_own():
    from sera.methods import METHODS, U_MIN
    from sera.trainers.config import AllocatorConfig

    # a method's own threshold is a number, 0.0 when it selects nothing
    for method in METHODS.values():
        assert isinstance(method.selection, float) and 0.0 <= method.selection < 1
    assert METHODS["sera"].selection == U_MIN and METHODS["sera-rate"].selection == 0.0
    # in a config, None is the method's own and 0.0 the selection off
    for name in ("sera", "sera-rate", "sera-rate-safeguard"):
        method = METHODS[name]
        assert AllocatorConfig().for_method(method).u_min == method.selection
        assert AllocatorConfig(u_min=0.0).for_method(method).u_min == 0.0
    # and the bare allocator's 0.0 is no selection at all
    p = np.array([0.0, 0.0, 0.4, 0.5])
    off = sera.allocate(p, 16, 2, 8, u_min=0.0)
    assert off.retained.all() and not off.fallback


def test_stored_configs_keep_their_meaning():
    # Stored runs recorded the allocator's u_min as null (the method's own) or a number; read
    # back, each resolves to the threshold its run applied, as its keys recorded it.
    from sera.methods import METHODS
    from sera.trainers.config import AllocatorConfig, RunConfig

    seen = set()
    for folder in sorted(runstore.STUDY_DIR.glob("*/provenance.json")):
        for record in runstore.stored_summary(folder.parent).get("runs", []):
            config = record["config"]
            stored = config["allocator"]
            allocator = AllocatorConfig(**stored)
            method = METHODS[config["method"]]
            resolved = allocator.for_method(method).u_min
            expected = method.selection if stored["u_min"] is None else stored["u_min"]
            assert resolved == expected, record["run"]
            keys = RunConfig(method=config["method"], allocator=allocator).keys()
            if method.allocator == "waterline":
                assert keys["u_min"] == (expected or None), record["run"]
            seen.add((config["method"], stored["u_min"]))
    assert ("sera", None) in seen and ("sera-rate", None) in seen
