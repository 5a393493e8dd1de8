"""sera.integrations.planner, the plug-ins' framework-free planning state, against sera.allocate
and a replayed sera.SuccessHistory (main environment: no verl or TRL needed)."""

import json
import os

import numpy as np
import pytest

import sera
from sera.integrations.planner import FORMAT, HISTORY_FILE, Planner, fingerprint
from sera.methods import U_MIN
from sera.trainers.config import AllocatorConfig


def _run(planner: Planner, steps: int, batch: int, rng, p, keyed: bool):
    """Train-loop replay: batches drawn per epoch without their last partial batch (as verl and
    TRL draw them), plans checked against sera.allocate over a replayed history."""
    n = planner.n_prompts
    reference = sera.SuccessHistory(n)
    per_epoch = (n // batch) * batch
    fallbacks = []
    for step in range(steps):
        k = step % (n // batch)
        if k == 0:
            order = rng.permutation(n)
        rows = order[k * batch:(k + 1) * batch]
        keys = [f"s{step}-{r}" for r in rows] if keyed else None
        allocation = planner.plan(rows, keys)
        p_hat, ready = reference.estimate(rows)
        if ready.all():
            expected = sera.allocate(p_hat, batch * planner.n0, n_min=planner.allocator.n_min,
                                     n_max=planner.allocator.n_max_for(planner.n0), n0=planner.n0,
                                     u_min=U_MIN)
            np.testing.assert_array_equal(allocation.counts, expected.counts)
            np.testing.assert_allclose(allocation.weights, expected.weights)
        else:
            np.testing.assert_array_equal(allocation.counts, np.full(batch, planner.n0))
        fallbacks.append(allocation.fallback)
        counts = allocation.counts
        responses = np.repeat(keys if keyed else rows, counts)
        rewards = (rng.random(counts.sum()) < np.repeat(p[rows], counts)).astype(float)
        shuffled = rng.permutation(responses.size)  # responses come back in any order
        assert planner.record(list(responses[shuffled]), rewards[shuffled]) == 0
        reference.record(np.repeat(rows, counts), rewards)
        if (step + 1) * batch % per_epoch == 0:
            reference.end_epoch()
        assert planner.history.epoch == reference.epoch
    np.testing.assert_allclose(planner.history.successes, reference.successes)
    np.testing.assert_allclose(planner.history.failures, reference.failures)
    return fallbacks


@pytest.mark.parametrize("keyed", [False, True])
def test_plans_equal_the_allocator_over_a_replayed_history_folded_per_loader_epoch(keyed):
    rng = np.random.default_rng(1)
    n, batch, n0 = 14, 4, 4  # 3 batches an epoch: 12 prompts, the last 2 dropped
    planner = Planner(n, n0, prompts_per_epoch=(n // batch) * batch)
    fallbacks = _run(planner, 12, batch, rng, rng.random(n), keyed)
    assert planner.history.epoch == 4 and not planner.pending
    # Two prompts per epoch are never drawn in a permutation's first 12: the first epochs can
    # fall back, but the planner never waits for them to fold.
    assert fallbacks[:3] == [True] * 3


@pytest.mark.parametrize("keyed", [False, True])
def test_a_prompt_the_selection_leaves_out_is_planned_again_next_epoch(keyed):
    """Prompts with 0 of 400 and 40 of 40 successes fall below the paper's u_min: they get no
    rollouts and wait for no outcome, the epoch folds on the batch's record, and the next epoch
    plans their rows again, each plan sera.allocate's."""
    n, n0 = 8, 4
    planner = Planner(n, n0, prompts_per_epoch=n)
    planner.history.record_groups(np.arange(n), [0, 0, 10, 20, 30, 40, 40, 40],
                                  [400, 400, 40, 40, 40, 40, 40, 40])
    planner.history.end_epoch()
    rows = np.arange(n)
    for epoch in range(3):
        keys = [f"e{epoch}-{r}" for r in rows] if keyed else None
        p_hat = planner.history.estimate(rows)[0]
        counts = planner.plan(rows, keys).counts
        expected = sera.allocate(p_hat, n * n0, n_min=planner.allocator.n_min,
                                 n_max=planner.allocator.n_max_for(n0), n0=n0, u_min=U_MIN)
        np.testing.assert_array_equal(counts, expected.counts)
        assert epoch > 0 or (counts == 0).sum() == 5  # rows 0, 1 and 5-7
        assert sorted(planner.pending) == sorted(
            k for k, c in zip(keys or rows.tolist(), counts, strict=True) if c)
        responses = np.repeat(keys if keyed else rows, counts)
        planner.record(list(responses), (np.arange(counts.sum()) % 2).astype(float))
        assert not planner.pending and planner.history.epoch == epoch + 2


def test_unplanned_keys_are_ignored_and_unscored_responses_left_out():
    planner = Planner(5, 2, prompts_per_epoch=4)
    counts = planner.plan([3, 1], keys=["a", "b"]).counts
    assert counts.tolist() == [2, 2]
    ignored = planner.record(["a", "pad0f3e", "b", "a", "b", "pad0f3e"],
                             [1.0, 0.0, 0.0, np.nan, 1.0, 1.0])
    assert ignored == 2 and not planner.pending
    pending = planner.history.state_dict()
    np.testing.assert_array_equal(pending["pending_s"], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(pending["pending_f"], [0, 1, 0, 0, 0])
    assert planner.history.epoch == 0
    planner.plan([0, 2], keys=["c", "d"])
    planner.record(["c", "d"], [1.0, 0.0])  # 4 prompts planned and recorded: the epoch folds
    assert planner.history.epoch == 1 and planner.planned == 0


def test_an_unrecorded_prompt_does_not_hold_back_the_fold():
    planner = Planner(4, 2, prompts_per_epoch=4)
    planner.plan([0, 1, 2, 3], keys=list("abcd"))
    planner.record(["a", "b", "c"], [1.0, 0.0, 1.0])  # every rollout of d failed
    assert planner.history.epoch == 0 and list(planner.pending) == ["d"]
    planner.plan([2, 1, 0, 3], keys=list("efgh"))  # the next epoch's first batch folds first
    assert planner.history.epoch == 1 and planner.planned == 4


def test_explicit_epochs_without_prompts_per_epoch():
    planner = Planner(3, 2)
    planner.plan([0, 1, 2])
    planner.record([0, 1, 2], [1.0, 0.0, 1.0])
    assert planner.history.epoch == 0
    planner.end_epoch()
    assert planner.history.epoch == 1 and planner.history.estimate()[1].all()


def test_state_round_trips_through_a_folder_and_refuses_mismatches(tmp_path):
    allocator = AllocatorConfig(n_min=3, history_gamma=0.7)
    planner = Planner(6, 4, allocator, prompts_per_epoch=6)
    planner.plan([0, 1, 2, 3])
    planner.record(np.repeat([0, 1, 2, 3], 4), np.arange(16) % 3 == 0)
    path = planner.save(tmp_path / "global_step_1")
    assert path.endswith(HISTORY_FILE) and json.loads(open(path).read())["planned"] == 4
    again = Planner(6, 4, allocator, prompts_per_epoch=6)
    again.load(tmp_path / "global_step_1")
    assert again.planned == 4 and again.history.epoch == 0
    np.testing.assert_array_equal(again.history.state_dict()["pending_s"],
                                  planner.history.state_dict()["pending_s"])
    again.plan([4, 5])
    again.record([4, 5, 4, 5], [1.0, 1.0, 0.0, 0.0])
    assert again.history.epoch == 1
    with pytest.raises(FileNotFoundError, match="cannot resume"):
        again.load(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="n_prompts = 6"):
        Planner(5, 4, allocator).load(tmp_path / "global_step_1")
    with pytest.raises(ValueError, match=r"history_gamma = 0.7 saved, 0.5 now; pass"):
        Planner(6, 4).load(tmp_path / "global_step_1")  # n_min (planning only) is not named
    with pytest.raises(ValueError, match=r"global_step_1.*n0 = 4, this run has n0 = 8"):
        Planner(6, 8, allocator).load(tmp_path / "global_step_1")
    with pytest.raises(ValueError, match=r"prompts_per_epoch = 6, this run has .* = 3"):
        Planner(6, 4, allocator, prompts_per_epoch=3).load(tmp_path / "global_step_1")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / HISTORY_FILE).write_text('{"history": ')
    with pytest.raises(ValueError, match=r"broken.*is not a SERA history"):
        Planner(6, 4).load(tmp_path / "broken")


def _kept(tmp_path, prompts, batch_size=2, **allocator):
    """A planner over `prompts` that planned and recorded one batch, saved in tmp_path/saved."""
    planner = Planner(len(prompts), 4, AllocatorConfig(**allocator), prompts_per_epoch=4,
                      prompts=fingerprint(prompts), batch_size=batch_size)
    planner.plan([0, 1])
    planner.record(np.repeat([0, 1], 4), np.arange(8) % 2)
    planner.save(tmp_path / "saved")
    return planner


def test_a_history_resumes_only_on_the_prompts_it_was_kept_on(tmp_path):
    prompts = [f"Question {i}" for i in range(4)]
    _kept(tmp_path, prompts)
    state = json.loads((tmp_path / "saved" / HISTORY_FILE).read_text())
    assert state["format"] == FORMAT == 2 and state["prompts"] == fingerprint(prompts)
    for other in (prompts[::-1], [*prompts[:3], "Question 7"],  # reordered, one row replaced
                  [[{"role": "user", "content": p}] for p in prompts]):  # as chat messages
        planner = Planner(4, 4, prompts_per_epoch=4, prompts=fingerprint(other), batch_size=2)
        with pytest.raises(ValueError, match=rf"saved{os.sep}{HISTORY_FILE}: .*fingerprint "
                                             rf"{state['prompts']}, this run's are "
                                             rf"{fingerprint(other)}"):
            planner.load(tmp_path / "saved")
    same = Planner(4, 4, prompts_per_epoch=4, prompts=fingerprint(list(prompts)), batch_size=2)
    same.load(tmp_path / "saved")
    assert same.planned == 2
    # rows cannot run into each other: ["a\nb"] is not ["a", "b"]
    assert fingerprint(["a\nb"]) != fingerprint(["a", "b"]) != fingerprint(["ab"])
    assert fingerprint(np.array(["a", "b"])) == fingerprint(["a", "b"])
    chat = [{"role": "user", "content": "Question 1"}]
    assert fingerprint([np.array(chat, dtype=object)]) == fingerprint([chat])  # pandas' parquet
    with pytest.raises(TypeError, match="training row 1's prompt cannot be fingerprinted"):
        fingerprint(["a", {"content": object()}])  # no address of an object in the hash


def test_a_history_of_a_newer_or_unversioned_format(tmp_path, caplog):
    prompts = [f"Question {i}" for i in range(4)]
    _kept(tmp_path, prompts)
    path = tmp_path / "saved" / HISTORY_FILE
    state = json.loads(path.read_text())
    for version in (3, 0, "2", True):
        path.write_text(json.dumps({**state, "format": version}))
        with pytest.raises(ValueError, match=rf"{HISTORY_FILE}: the saved history has format = "
                                             rf"{version!r}, this sera reads formats 1 to 2"):
            Planner(4, 4, prompts_per_epoch=4, batch_size=2).load(tmp_path / "saved")
    older = {k: v for k, v in state.items() if k not in ("format", "prompts", "batch_size")}
    path.write_text(json.dumps(older))
    planner = Planner(4, 4, prompts_per_epoch=4, prompts=fingerprint(prompts[::-1]), batch_size=2)
    with caplog.at_level("WARNING", logger="sera.integrations.planner"):
        planner.load(tmp_path / "saved")
    assert planner.planned == 2 and "predates format 2" in caplog.text


def test_a_changed_batch_size_is_refused_and_planning_options_are_logged(tmp_path, caplog):
    prompts = [f"Question {i}" for i in range(4)]
    _kept(tmp_path, prompts, n_max=16)
    with pytest.raises(ValueError, match=r"batch_size = 2, this run has batch_size = 1"):
        Planner(4, 4, prompts_per_epoch=4, prompts=fingerprint(prompts),
                batch_size=1).load(tmp_path / "saved")
    planner = Planner(4, 4, AllocatorConfig(n_max=8, u_min=0.0, rounding="exact"),
                      prompts_per_epoch=4, prompts=fingerprint(prompts), batch_size=2)
    with caplog.at_level("WARNING", logger="sera.integrations.planner"):
        assert planner.loads_from(tmp_path / "saved") is None
        assert caplog.text == ""  # the probe stays quiet; the load says it once
        planner.load(tmp_path / "saved")
    assert caplog.text.count("changed planning options") == 1
    assert "n_max = 16 saved, 8 now" in caplog.text and "rounding = 'paper' saved, 'exact' now" \
        in caplog.text and "u_min = 0.05 saved, 0.0 now" in caplog.text
    assert planner.planned == 2 and planner.allocator.n_max == 8
    for bad in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="batch_size must be an integer in"):
            Planner(4, 4, batch_size=bad)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="n0 must be"):
        Planner(4, 0)
    with pytest.raises(ValueError, match="prompts_per_epoch"):
        Planner(4, 2, prompts_per_epoch=5)
    planner = Planner(4, 2)
    with pytest.raises(ValueError, match="rows must lie in"):
        planner.plan([0, 4])
    with pytest.raises(ValueError, match="planned twice"):
        planner.plan([0, 0])
    with pytest.raises(ValueError, match="same length"):
        planner.record([0], [1.0, 0.0])
    planner.plan([0, 1])
    with pytest.raises(ValueError, match=r"rewards must lie in \[0, 1\]"):
        planner.record([0, 1], [1.0, 2.0])


def test_the_planner_imports_no_framework():
    import subprocess
    import sys

    code = ("import sys, sera.integrations.planner; print(sorted({m.split('.')[0] for m in "
            "sys.modules} & {'torch', 'verl', 'trl', 'accelerate', 'transformers', 'ray'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plan_metrics_of_a_hand_worked_batch():
    from sera.integrations.planner import METRICS, plan_metrics

    # 12 prompts: the two with the lowest p-hat (ceil(12 / 10) = 2) hold 10 + 0 of 40 rollouts.
    counts = [10, 0, 2, 2, 3, 3, 4, 4, 3, 3, 3, 3]
    p_hat = [0.01, 0.02, 0.5, 0.6, 0.3, 0.3, 0.2, 0.2, 0.4, 0.4, 0.45, 0.45]
    got = plan_metrics(counts, p_hat, fallback=False, epoch=3)
    assert list(got) == list(METRICS)
    assert got["sera/hardest_decile_budget"] == pytest.approx(10 / 40)
    assert (got["sera/count_min"], got["sera/count_median"], got["sera/count_max"]) == (0, 3, 10)
    assert got["sera/prompts_kept"] == pytest.approx(11 / 12)
    assert got["sera/p_hat_spread"] == pytest.approx(np.std(p_hat))
    assert got["sera/fallback"] == 0.0 and got["sera/epoch"] == 3.0
    planner = Planner(12, 4)
    with pytest.raises(ValueError, match="no batch has been planned"):
        planner.metrics()
    planner.plan(np.arange(12))
    assert planner.metrics()["sera/fallback"] == 1.0 and planner.metrics()["sera/count_max"] == 4


def test_the_planning_share_is_the_planners_time_over_a_step_from_plan_to_plan(monkeypatch):
    from sera.integrations import planner as module

    clock = iter([0.0, 0.25, 10.0, 10.5, 40.0, 40.25])  # plan 0.25 s, record 0.5 s, next plan
    monkeypatch.setattr(module, "perf_counter", lambda: next(clock))
    planner = Planner(4, 2)
    planner.plan([0, 1])
    assert planner.timing_metrics() == {} and set(planner.metrics()) == set(module.METRICS)
    planner.record([0, 0, 1, 1], [1.0, 0.0, 0.0, 1.0])
    planner.plan([2, 3])
    assert planner.timing_metrics() == {"sera/planning_s": 0.75, "sera/planning_share": 0.75 / 40}
    assert set(planner.metrics()) == set(module.METRICS) | set(module.TIMING_METRICS)


@pytest.mark.parametrize("size", [1, 5, 7, 12, 64, 100])
@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_worker_loads_sum_consecutive_slices_of_ceil_b_over_workers(size, workers):
    """Against slices written out one by one (verl's TensorDict.chunk is checked in
    tests/test_integration_verl.py)."""
    from sera.integrations.planner import worker_imbalance, worker_loads

    counts = np.random.default_rng(size * workers).integers(0, 9, size)
    width = -(-size // workers)
    expected = [int(counts[j * width:(j + 1) * width].sum()) for j in range(workers)]
    assert worker_loads(counts, workers).tolist() == expected
    assert worker_imbalance(counts, workers) == pytest.approx(
        max(expected) / np.mean(expected) if sum(expected) else 1.0)
    assert worker_imbalance(np.full(8, 4), 4) == 1.0 and worker_imbalance([8, 0, 0, 0], 2) == 2.0
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        worker_loads(counts, 0)


def test_the_metrics_table_in_the_docs_lists_every_key():
    from pathlib import Path

    from sera.integrations.planner import METRICS, TIMING_METRICS, WORKER_METRICS

    text = (Path(__file__).resolve().parents[1] / "docs" / "scaling.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in text.splitlines()
            if line.startswith("| `sera/")}
    assert rows == set(METRICS) | set(TIMING_METRICS) | set(WORKER_METRICS) | {
        "sera/ignored_responses", "sera/unscored"}


def _saved(tmp_path) -> tuple[dict, Planner]:
    """A history written mid-epoch (a fold behind it, outcomes pending), and the planner that
    resumes it."""
    allocator = AllocatorConfig(history_gamma=0.7)
    planner = Planner(6, 4, allocator, prompts_per_epoch=4)
    for rows in ([0, 1], [2, 3], [4, 5]):
        planner.plan(rows)
        planner.record(np.repeat(rows, 4), np.arange(8) % 3 == 0)
    planner.save(tmp_path)
    return json.loads((tmp_path / HISTORY_FILE).read_text()), Planner(6, 4, allocator,
                                                                       prompts_per_epoch=4)


def _set(state, path, value):
    *parents, last = path
    for key in parents:
        state = state[key]
    if value is _DROP:
        del state[last]
    else:
        state[last] = value


_DROP = object()
CORRUPT = [  # (what is changed, the value, what the refusal names)
    (("history", "successes", 2), float("nan"), r"successes must be finite and >= 0.*prompt 2"),
    (("history", "failures", 1), -3.0, r"failures must be finite and >= 0.*prompt 1 has -3"),
    (("history", "pending_f", 0), float("inf"), r"pending_f must be finite.*prompt 0"),
    (("history", "pending_s"), [0.0] * 5, r"pending_s has 5 entries and its successes 6"),
    (("history", "observed"), [True] * 7, r"observed has 7 entries and its successes 6"),
    (("history", "last_rate", 3), 9.0, r"last_rate must be NaN or lie in \[0, 1\].*prompt 3"),
    (("history", "epoch"), -1, r"history's epoch must be an integer >= 0, got -1"),
    (("history", "gamma"), 0.5, r"history's own gamma = 0.5 differs from its allocator's .0.7"),
    (("history", "rule"), "rate", r"history's own rule = 'rate' differs"),
    (("history", "gamma"), 7.0, r"history's settings: gamma must lie in \[0.0, 1.0\]"),
    (("history", "successes"), [0.0] * 5, r"covers n_prompts = 5 prompts, the training set has 6"),
    (("planned",), -2, r"planned .* must be an integer in \[0, 4\], got -2"),
    (("planned",), 9, r"planned .* must be an integer in \[0, 4\], got 9"),
    (("allocator",), _DROP, r"lacks allocator"),
    (("allocator", "history_gamma"), 0.5, r"history_gamma = 0.5 saved, 0.7 now"),
    (("last_plan", "rows", 0), 17, r"last_plan's rows must lie in \[0, 6\)"),
    (("last_plan", "counts", 1), -4, r"last_plan's rows .* counts be >= 0"),
    (("history", "failures"), "many", r"failures must be a list of numbers"),
]


@pytest.mark.parametrize("path, value, named", CORRUPT, ids=[
    "-".join(map(str, c[0])) + f"={c[1]!r}"[:12] for c in CORRUPT])
def test_a_corrupt_history_is_refused_at_load_naming_the_file_and_the_field(tmp_path, path,
                                                                             value, named):
    state, planner = _saved(tmp_path)
    before = json.dumps(planner.state_dict())
    if path[:2] == ("history", "successes") and isinstance(value, list):
        for name in ("failures", "pending_s", "pending_f", "observed", "last_rate"):
            state["history"][name] = state["history"][name][:5]  # a shorter history, whole
    _set(state, path, value)
    (tmp_path / HISTORY_FILE).write_text(json.dumps(state))
    with pytest.raises(ValueError, match=rf"{tmp_path / HISTORY_FILE}: .*{named}"):
        planner.load(tmp_path)
    assert json.dumps(planner.state_dict()) == before  # nothing was half loaded
    assert planner.loads_from(tmp_path) is not None


def test_a_save_killed_while_writing_is_named_and_saves_are_flushed(tmp_path, monkeypatch):
    import os

    state, planner = _saved(tmp_path)
    (tmp_path / HISTORY_FILE).unlink()
    (tmp_path / f".{HISTORY_FILE}.x1y2.tmp").write_text('{"hist')  # what a kill leaves
    with pytest.raises(FileNotFoundError, match=r"save was killed while writing it"):
        planner.load(tmp_path)
    flushed = []
    monkeypatch.setattr(os, "fsync", lambda fd: flushed.append(os.readlink(f"/proc/self/fd/{fd}")))
    planner.save(tmp_path / "again")
    assert flushed[-1] == str(tmp_path / "again")  # the folder, after the rename
    assert flushed[-2].startswith(str(tmp_path / "again" / f".{HISTORY_FILE}."))  # the file
    assert planner.loads_from(tmp_path / "again") is None


def test_infeasible_budgets_are_refused_at_construction_exactly_when_a_plan_fails():
    """AllocatorConfig.infeasible against the allocator itself: over a grid of n0, n_min and
    n_max, a planner is refused exactly where planning a seen batch would fail."""
    rng = np.random.default_rng(0)
    for n0 in range(1, 7):
        for n_min in range(2, 5):
            for n_max in (None, *range(n_min, 9)):
                allocator = AllocatorConfig(n_min=n_min, n_max=n_max, u_min=0.0)
                why = allocator.infeasible(n0)
                try:
                    counts = sera.allocate(rng.uniform(0.05, 0.95, 6), 6 * n0, n_min,
                                           allocator.n_max_for(n0)).counts
                    uniform_ok = n0 >= n_min
                    planned = uniform_ok and counts.sum() == 6 * n0
                except ValueError:
                    planned = False
                assert (why is None) == planned, (n0, n_min, n_max, why)
                if why is not None:
                    with pytest.raises(ValueError, match=r"n_max = \d+ is below n0|below n_min"):
                        Planner(6, n0, allocator)
