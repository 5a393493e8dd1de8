"""One way to the method's own plan, and registries that refuse a name given twice."""

import numpy as np
import pandas as pd
import pytest

import sera
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
    from sera.baselines import RULES
    from sera.methods import METHODS

    assert len(METHODS) == len({m.name for m in METHODS.values()})
    assert set(RULES) == {"knapsack", "gvm", "dars-hw", "dars-et"}
