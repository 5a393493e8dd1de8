"""The shared loop with a study that needs no model: epochs, batches, history, degenerate runs."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sera import runstore
from sera.trainers import grid, loop
from sera.trainers.config import RunConfig


class Coins:
    """Prompt q succeeds with probability p_q; the study records what it sampled and updated."""

    def __init__(self, config, p):
        self.config, self.p, self.n_prompts = config, np.asarray(p), len(p)
        self.rng = np.random.default_rng(config.seed)
        self.batches, self.calls, self.updates = [], [], []

    def state_dict(self):
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]

    def exact_p(self, ids):
        return self.p[ids]

    def sample(self, run, ids, counts):
        if not self.calls or self.calls[-1][0] != run.step:
            self.batches.append((run.epoch, ids.copy(), run.history.estimate(ids)[0].copy()))
        self.calls.append((run.step, ids.copy(), np.asarray(counts).copy()))
        return self.rng.binomial(counts, self.p[ids]).astype(float)

    def update(self, run, outcome):
        self.updates.append((run.step, outcome.ids.copy(), outcome.allocation.counts.copy()))

    def evaluate(self, run):
        run.log("val_pass", float(self.p.mean()), 1)

    def finish(self, run):
        return pd.DataFrame({"prompt": np.arange(self.n_prompts), "p": self.p})


def _config(tmp_path, **changes):
    config = RunConfig(method="sera", n0=4, batch_size=4, steps=9, eval_every=5,
                       checkpoint_every=4, progress=False, min_allocated_share=0.0,
                       out=str(tmp_path / "run"))
    return dataclasses.replace(config, **changes)


P = np.linspace(0.05, 0.95, 10)


def test_every_prompt_is_trained_on_each_epoch_and_the_last_batch_is_smaller(tmp_path):
    study = Coins(_config(tmp_path), P)
    loop.fit(study)
    sizes = [ids.size for _, ids, _ in study.batches]
    assert sizes == [4, 4, 2, 4, 4, 2, 4, 4, 2]
    for epoch in range(3):
        seen = np.concatenate([ids for e, ids, _ in study.batches if e == epoch])
        assert sorted(seen) == list(range(10))


def test_estimates_change_only_at_epoch_boundaries(tmp_path):
    study = Coins(_config(tmp_path), P)
    results = loop.fit(study)
    by_epoch = {}
    for epoch, ids, estimate in study.batches:
        for q, e in zip(ids, estimate, strict=True):
            assert by_epoch.setdefault((epoch, q), e) == e
    allocated = results.metrics.loc[results.metrics["metric"] == "allocated", "value"]
    assert allocated.tolist() == [0, 0, 0] + [1] * 6  # uniform until epoch 0 has been folded
    first = np.array([by_epoch[(0, q)] for q in range(10)])
    np.testing.assert_allclose(first, 0.5)  # the prior: nothing folded during epoch 0


def test_tables_carry_the_run_keys(tmp_path):
    results = loop.fit(Coins(_config(tmp_path, allocator=dataclasses.replace(
        _config(tmp_path).allocator, u_min=0.2)), P))
    for table in (results.metrics, results.final, results.allocations):
        assert {"method", "estimates", "allocator", "seed", "n0", "agg", "u_min"} <= set(table)
        assert set(table["u_min"]) == {0.2}
    assert "safeguard_fallback" in set(results.metrics["metric"])


def test_a_degenerate_run_fails_loudly_after_saving(tmp_path):
    with pytest.raises(loop.DegenerateRunError, match="in 33% of 9 steps"):
        loop.fit(Coins(_config(tmp_path, batch_size=5, steps=9, min_allocated_share=0.9),
                       np.linspace(0.1, 0.9, 30)))
    saved = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert saved.loc[saved["metric"] == "allocated_share", "value"].item() == pytest.approx(3 / 9)


@pytest.mark.parametrize("method", ["sera", "cero-reconstruction", "knapsack"])
def test_resumed_run_matches_an_uninterrupted_one(tmp_path, method):
    whole = loop.fit(Coins(_config(tmp_path, method=method, out=str(tmp_path / "a")), P))

    def stop(run):
        if run.step == 6:
            raise KeyboardInterrupt

    config = _config(tmp_path, method=method, out=str(tmp_path / "b"))
    with pytest.raises(KeyboardInterrupt):
        loop.fit(Coins(config, P), stop)
    resumed = loop.fit(Coins(config, P))
    pd.testing.assert_frame_equal(resumed.metrics, whole.metrics)
    pd.testing.assert_frame_equal(resumed.allocations, whole.allocations)


def _sampled(study, step):
    """Rollouts per prompt that the study sampled in one step."""
    total = {}
    for s, ids, counts in study.calls:
        if s == step:
            for q, n in zip(ids.tolist(), counts.tolist(), strict=True):
                total[q] = total.get(q, 0) + n
    return total


def test_dynamic_sampling_keeps_mixed_groups_and_counts_every_rollout(tmp_path):
    p = np.r_[np.zeros(20), np.full(20, 0.5), np.ones(20)]
    study = Coins(_config(tmp_path, method="dapo", steps=3, batch_size=4), p)
    results = loop.fit(study)
    rollouts = results.metrics[results.metrics["metric"] == "rollouts"]["value"].tolist()
    for step, ids, counts in study.updates:
        assert (counts == 4).all() and ids.size == 4
        assert all(0.0 < p[q] < 1.0 for q in ids)  # all-0 and all-1 groups were dropped
        assert rollouts[step] == sum(_sampled(study, step).values()) >= 12 * 4
    assert set(results.metrics["metric"]) >= {"generation_rounds", "prompts"}


def test_dynamic_sampling_stops_the_run_where_dapos_recipe_raises(tmp_path):
    import json

    # every prompt solved: no generation batch yields a mixed group, so after 10 batches the
    # recipe raises; the run ends at that step with its final evaluation, and stays ended
    p = np.r_[np.full(40, 0.5), np.ones(40)]
    config = _config(tmp_path, method="dapo", steps=50, batch_size=4)
    study = Coins(config, np.ones(440))
    results = loop.fit(study)
    assert study.updates == []
    stopped = results.metrics[results.metrics["metric"] == "stopped"]
    assert stopped["step"].tolist() == [0]
    records = [json.loads(line) for line in
               (tmp_path / "run" / "provenance.jsonl").read_text().splitlines()]
    assert "max_num_gen_batches = 10" in records[-1]["stopped"]
    again = loop.fit(Coins(config, np.ones(440)))  # resumed: read back, not restarted
    assert again.metrics.equals(results.metrics)
    # mixed groups somewhere in the data: the batches keep coming until the step is full
    study = Coins(_config(tmp_path / "mixed", method="dapo", steps=2, batch_size=4), p)
    loop.fit(study)
    assert len(study.updates) == 2


def test_two_stage_tops_up_hard_prompts_from_the_pilot(tmp_path):
    p = np.r_[np.full(8, 0.05), np.full(8, 0.9)]
    study = Coins(_config(tmp_path, method="dars-hw-2stage", steps=2, batch_size=16, n0=8),
                  p)
    loop.fit(study)
    step, ids, counts = study.updates[0]
    sampled = _sampled(study, step)
    for q, n in zip(ids.tolist(), counts.tolist(), strict=True):
        assert sampled[q] == n  # pilot and top-up form one group
        if p[q] > 0.5:
            assert n == 8
    assert max(counts) > 8  # a hard prompt got a top-up


def test_probe_commit_spends_the_budget_on_committed_prompts(tmp_path):
    p = np.r_[np.full(10, 0.01), np.full(10, 0.5), np.full(10, 0.99)]
    study = Coins(_config(tmp_path, method="sara-reconstruction", steps=4, batch_size=6, n0=6), p)
    results = loop.fit(study)
    rollouts = results.metrics[results.metrics["metric"] == "rollouts"]["value"]
    assert (rollouts <= 36).all()  # never over the budget B * n0
    for step, ids, counts in study.updates:
        sampled = _sampled(study, step)
        assert all(sampled[q] == n for q, n in zip(ids.tolist(), counts.tolist(), strict=True))
        assert (counts <= 6).all()


def test_each_start_records_threads_and_the_cpus_instruction_set(tmp_path):
    import json

    config = _config(tmp_path, steps=4)
    loop.fit(Coins(config, P))
    loop.fit(Coins(dataclasses.replace(config, steps=6), P))  # resumed for two more steps
    lines = (tmp_path / "run" / "provenance.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    starts = [r for r in records if not r.get("finished")]
    assert [r["step"] for r in starts] == [0, 4]
    for record in starts:
        assert record["torch_threads"] >= 1 and record["cpu_capability"]
        assert {"torch", "numpy", "machine", "commit", "command", "time"} <= set(record)
    # the first start ran 4 steps and finished; the resumed one ran 2 more and finished again
    ends = [r for r in records if r.get("finished")]
    assert [(r["step"], r["steps_run"]) for r in ends] == [(4, 4), (6, 2)]
    assert all(r["wall_s"] >= 0 for r in ends)


def test_dars_updates_on_mixed_groups_only_and_the_history_sees_every_group(tmp_path):
    p = np.array([0.0, 1.0, 0.5, 0.5, 0.0, 1.0, 0.5, 0.5, 0.4, 0.6])
    study = Coins(_config(tmp_path, method="dars-hw", steps=6), p)
    runs = []
    loop.fit(study, callback=runs.append)
    for step, ids, _ in study.updates:
        assert not set(ids.tolist()) & {0, 1, 4, 5}, step  # all-0 or all-1: dropped
    # every sampled group reached the history, the dropped ones included
    rate, available = runs[-1].history.last_rates([0, 1, 4, 5])
    assert available.all()
    np.testing.assert_array_equal(rate, [0, 1, 0, 1])


def test_a_grid_reads_back_what_another_grid_finished_with_the_same_settings(tmp_path):
    built = []

    def build(config):
        built.append(config.out)
        return Coins(config, P)

    configs = [_config(tmp_path, seed=s) for s in (0, 1)]
    first = grid.run_grid(configs, build, runs_dir=tmp_path / "a", progress=False,
                          shared=tmp_path / "index")
    studies = []

    def spy(config):
        studies.append(Coins(config, P))
        return studies[-1]

    other = [*configs, _config(tmp_path, seed=2), _config(tmp_path, seed=0, steps=5)]
    second = grid.run_grid(other, spy, runs_dir=tmp_path / "b", progress=False,
                           shared=tmp_path / "index")
    # the two finished runs are read from a/, nothing sampled; new settings train in b/
    assert [s.calls == [] for s in studies] == [True, True, False, False]
    assert [Path(s.config.out).parent.name for s in studies] == ["a", "a", "b", "b"]
    pd.testing.assert_frame_equal(second.final.iloc[:2 * P.size], first.final)
    # b/'s folder name leads to the finished run, for code that opens it by path
    linked = tmp_path / "b" / grid.run_label(configs[1])
    assert linked.is_symlink() and (linked / "final.csv").exists()
    # rerun retrains in b/ itself and leaves a/'s run alone
    original = (tmp_path / "a" / grid.run_label(configs[1]) / "final.csv").read_text()
    grid.run_grid([configs[1]], build, runs_dir=tmp_path / "b", rerun=True, progress=False,
                  shared=tmp_path / "index")
    assert not linked.is_symlink() and (linked / "final.csv").exists()
    assert (tmp_path / "a" / grid.run_label(configs[1]) / "final.csv").read_text() == original


def test_a_run_another_grid_is_training_is_put_off_and_then_read_back(tmp_path):
    """Grid b finds grid a training seed 0 (its settings lock in the shared index): b trains
    seeds 1 and 2 first, then reads seed 0 back from a, instead of training it twice."""
    from filelock import FileLock

    shared = tmp_path / "index"
    configs = [_config(tmp_path, seed=s) for s in (0, 1, 2)]
    held = FileLock(shared / f"{grid._settings_key(configs[0])}.lock")
    shared.mkdir()
    held.acquire()
    studies = []

    def build(config):
        studies.append(Coins(config, P))
        if config.seed == 2:  # meanwhile grid a finishes seed 0 and lets go of it
            folder = tmp_path / "a" / grid.run_label(configs[0])
            loop.fit(Coins(dataclasses.replace(configs[0], out=str(folder)), P))
            runstore.index(shared, grid._settings_key(configs[0]), folder)
            held.release()
        return studies[-1]

    results = grid.run_grid(configs, build, runs_dir=tmp_path / "b", progress=False,
                            shared=shared)
    assert [(s.config.seed, Path(s.config.out).parent.name, s.calls == []) for s in studies] == [
        (1, "b", False), (2, "b", False), (0, "a", True)]
    assert list(results.final.drop_duplicates("seed")["seed"]) == [0, 1, 2]  # the grid's order
    assert (tmp_path / "b" / grid.run_label(configs[0])).is_symlink()


def test_the_loops_mean_is_numpys_to_the_last_bit():
    rng = np.random.default_rng(7)
    for size in (1, 2, 7, 8, 9, 16, 17, 64, 1000, 100_001):
        signed = rng.lognormal(0, 3, size) * rng.choice([-1, 1], size)
        for values in (signed, rng.random(size), rng.random(size) < 0.3):
            assert loop.mean(values) == values.mean() and np.isfinite(loop.mean(values))
