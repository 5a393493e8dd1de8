"""The learning-rate sweep: a tuning split apart from training and validation, the choice made
on it alone, and the stored tables read back."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from sera.studies import confirm, tuning
from sera.tasks.classification import hold_out, load_data
from sera.trainers import classification, maze


def test_the_tuning_split_is_apart_from_training_and_validation():
    data = load_data("digits")
    trained, tune = hold_out(data, 0.2)
    assert len(tune) == round(0.2 * len(data.train))
    assert len(trained.train) + len(tune) == len(data.train)
    assert not set(trained.train.indices) & set(tune.indices)
    assert trained.val is data.val  # the held-out images are untouched
    again, _ = hold_out(data, 0.2)
    assert list(again.train.indices) == list(trained.train.indices)  # one split per sweep
    with pytest.raises(ValueError, match="fraction"):
        hold_out(data, 1.0)


def test_lrs_span_ten_times_around_the_preset():
    for name in ("digits-lr", "maze-lr"):
        s = tuning.sweep(name)
        lrs = s.lrs()
        middle = lrs.index(s.base.lr)
        assert lrs[middle + 1] / lrs[middle - 1] == pytest.approx(10, rel=1e-3)
        assert len(s.configs()) == s.seeds * len(s.methods) * len(lrs) and s.seeds >= 6
    # digits go one step further each way: three rates left methods at an edge
    assert tuning.sweep("digits-lr").lrs() == pytest.approx([0.005, 0.01581, 0.05, 0.1581, 0.5])
    with pytest.raises(KeyError, match="known"):
        tuning.sweep("nope")


def test_best_reads_the_tuning_split_only():
    rows = []
    for method, values in {"a": (0.2, 0.5, 0.4), "b": (0.6, 0.3, 0.1)}.items():
        for lr, value in zip((0.1, 0.3, 1.0), values, strict=True):
            for seed in range(2):
                rows.append({"method": method, "lr": lr, "seed": seed, "metric": "tune_pass",
                             "k": 1, "value": value + 0.01 * seed})
                # the held-out score would choose otherwise: it must not be read
                rows.append({"method": method, "lr": lr, "seed": seed, "metric": "pass",
                             "k": 1, "value": 1 - value})
    chosen = tuning.best(pd.DataFrame(rows))
    assert dict(zip(chosen["method"], chosen["best lr"], strict=True)) == {"a": 0.3, "b": 0.1}
    assert (chosen["seeds"] == 2).all()


def test_a_tiny_sweep_stores_and_picks(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "STUDY_DIR", tmp_path / "study")
    base = dataclasses.replace(classification.PRESETS["fast"], steps=4, eval_every=2,
                               checkpoint_every=2, tune_fraction=0.2, device="cpu",
                               min_allocated_share=0.0)
    s = tuning.Sweep("tiny", "digits", base, ("maxrl", "sera"), seeds=2, factors=(0.5, 2.0))
    results = tuning.run(s, tmp_path / "runs", progress=False)
    assert set(results.final["lr"]) == {0.025, 0.1}
    tune = results.metrics[results.metrics["metric"] == "tune_pass"]
    assert len(tune.groupby(["method", "lr", "seed"])) == 8
    chosen = tuning.best(results.metrics)
    picked = tuning.at_best(results, chosen)
    for method, lr in zip(chosen["method"], chosen["best lr"], strict=True):
        assert set(picked.final[picked.final["method"] == method]["lr"]) == {lr}
        means = tune[(tune["k"] == 1) & (tune["method"] == method)].groupby("lr")["value"].mean()
        assert means.idxmax() == lr
    assert set(tuning.at_lr(results, 0.1).final["lr"]) == {0.1}
    summary = confirm.stored("tiny", tmp_path / "study")
    assert summary["runs_stored"] == summary["runs_planned"] == 8
    assert np.all([r["wall_s"] > 0 for r in summary["runs"]])


def test_a_tiny_maze_sweep_chooses_on_the_tuning_mazes(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "STUDY_DIR", tmp_path / "study")
    base = maze.MazeConfig(
        size=7, n_train=16, n_val=8, n_tune=6, width=16, layers=1, heads=2, kv_heads=1,
        warmup_steps=3, warmup_batch=8, steps=3, batch_size=4, n0=4, eval_every=3,
        eval_samples=4, val_k=(1, 4), final_samples=8, max_new_tokens=12, checkpoint_every=3,
        min_allocated_share=0.0, device="cpu")
    s = tuning.Sweep("tiny-maze", "maze", base, ("maxrl", "sera"), seeds=1, factors=(0.5, 2.0))
    configs = s.configs(tmp_path / "runs")
    assert {c.warmup_dir for c in configs} == {str(tmp_path / "runs" / "tiny-maze" / "warmup")}
    results = tuning.run(s, tmp_path / "runs", progress=False)
    tune = results.metrics[results.metrics["metric"] == "tune_pass"]
    assert len(tune.groupby(["method", "lr", "seed"])) == 4
    assert set(tune["k"]) == {1, 2, 4, 8} and tune["value"].between(0, 1).all()
    assert set(tuning.best(results.metrics)["method"]) == {"maxrl", "sera"}
    summary = confirm.stored("tiny-maze", tmp_path / "study")
    assert summary["task"] == "maze" and summary["runs_stored"] == 4
