"""The classification study: collapsed loss, every method's smoke run, resume, data sources."""

import dataclasses
import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from sera.methods import METHODS
from sera.models import SmallCNN
from sera.tables import RUN_KEYS
from sera.tasks.classification import check_image_folder, fetch, load_data
from sera.trainers import classification as trainer
from sera.trainers import label_rollouts


def _tiny(tmp_path, **changes):
    base = trainer.ClassificationConfig(steps=4, batch_size=16, n0=4, eval_every=2,
                                        cosine_every=1, checkpoint_every=2, progress=False,
                                        min_allocated_share=0.0, out=str(tmp_path / "run"))
    return dataclasses.replace(base, **changes)


class BatchNormCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)


def _collapsed_and_replicated(model, method):
    data = load_data("digits")
    images, targets = fetch(data.train, np.arange(12))
    images = images.double()
    counts = np.array([2, 3, 5, 8, 2, 13, 4, 6, 2, 9, 3, 7])
    generator = torch.Generator().manual_seed(3)
    log_probs = torch.log_softmax(model(images), -1)
    rows, labels = label_rollouts.sample_labels(log_probs.exp().detach(), counts, generator)
    _, values = label_rollouts.advantages(METHODS[method].advantages, rows, labels, targets, counts)
    assert values.abs().sum() > 0  # some groups are mixed, so the check is not vacuous
    weights = torch.tensor(4.0 / counts, dtype=torch.float64)
    per_class = label_rollouts.class_weights(rows, labels, values, 12, 10)
    budget = int(counts.sum())
    collapsed = label_rollouts.collapsed_loss(log_probs, per_class, weights, budget)
    grad_collapsed = torch.autograd.grad(collapsed, list(model.parameters()))
    naive = label_rollouts.replicated_loss(model, images, rows, labels, values, weights, budget)
    grad_naive = torch.autograd.grad(naive, list(model.parameters()))
    return (collapsed.item(), grad_collapsed), (naive.item(), grad_naive)


def _assert_same(first, second):
    assert first[0] == pytest.approx(second[0], rel=1e-6)
    for a, b in zip(first[1], second[1], strict=True):
        assert torch.linalg.norm(a - b) <= 1e-6 * torch.linalg.norm(b) + 1e-15


@pytest.mark.parametrize("method", ["maxrl", "sera", "grpo", "rloo"])
def test_collapsed_loss_equals_replicated_computation(method):
    torch.manual_seed(0)
    model = SmallCNN(10, 1).double()  # float64: the two computations differ only by rounding
    _assert_same(*_collapsed_and_replicated(model, method))


def test_collapsed_loss_with_batch_norm_holds_in_eval_mode_only():
    torch.manual_seed(0)
    model = BatchNormCNN().double()
    model.train()
    for _ in range(3):  # running statistics away from their initial values
        model(torch.randn(16, 1, 8, 8, dtype=torch.float64))
    model.eval()
    _assert_same(*_collapsed_and_replicated(model, "maxrl"))
    model.train()  # batch statistics: the replicated batch normalises differently
    collapsed, replicated = _collapsed_and_replicated(model, "maxrl")
    assert abs(collapsed[0] - replicated[0]) > 1e-6 * abs(replicated[0])


def test_sampled_labels_follow_the_counts_and_the_probabilities():
    probs = torch.tensor([[0.7, 0.2, 0.1, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 0.0, 1.0]])
    counts = [20_000, 0, 3]
    rows, labels = label_rollouts.sample_labels(probs, counts, torch.Generator().manual_seed(0))
    assert torch.bincount(rows).tolist() == [20_000, 0, 3]
    assert labels[rows == 2].tolist() == [3, 3, 3]
    freq = torch.bincount(labels[rows == 0], minlength=4).double() / 20_000
    se = (probs[0].double() * (1 - probs[0].double()) / 20_000).sqrt()
    assert torch.all((freq - probs[0]).abs() <= 5 * se + 1e-12)


KEYS = list(RUN_KEYS)


@pytest.mark.parametrize("method", trainer.supported(exact=True))
def test_every_method_runs_on_a_tiny_budget(method, tmp_path):
    results = trainer.train(_tiny(tmp_path, method=method))
    table = results.metrics
    saved = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert list(saved.columns) == KEYS + ["step", "metric", "k", "value"]
    assert len(saved) == len(table) and set(saved["method"]) == {method}
    metrics = set(table["metric"])
    assert {"cosine", "val_pass", "pass"} <= metrics
    assert set(table.loc[table["metric"] == "pass", "k"]) == set(trainer.PROFILE_K)
    if method in ("maxrl", "sera", "sera-oracle"):
        assert "expected_cosine" in metrics
    if method == "ce":
        assert table.loc[table["metric"] == "cosine", "value"].min() > 1 - 1e-9
    else:
        assert {"train_reward", "mixed_groups", "allocation_spread"} <= metrics
    assert np.isfinite(table["value"]).all()
    final = pd.read_csv(tmp_path / "run" / "final.csv")
    assert list(final.columns) == KEYS + ["prompt", "p"] and len(final) == 359
    assert (tmp_path / "run" / "config.json").exists()


def test_history_estimates_are_measured_against_the_ideal_estimator(tmp_path):
    # 1,438 training images in batches of 719: epoch 0 sees every image, epoch 1 starts at
    # step 2 with every estimate available.
    table = trainer.train(_tiny(tmp_path, method="sera", steps=4, batch_size=719)).metrics
    allocated = table.loc[table["metric"] == "allocated", "value"].tolist()
    assert allocated == [0.0, 0.0, 1.0, 1.0]
    assert table.loc[table["metric"] == "allocated_share", "value"].item() == 0.5
    assert set(table.loc[table["metric"] == "history_mae", "step"]) == {2, 3}
    assert set(table.loc[table["metric"] == "ideal_mae", "step"]) == {2, 3}


def test_oracle_allocates_from_the_first_step(tmp_path):
    table = trainer.train(_tiny(tmp_path, method="sera-oracle")).metrics
    assert (table.loc[table["metric"] == "allocated", "value"] == 1.0).all()
    assert "history_mae" not in set(table["metric"])


def test_same_seed_same_table(tmp_path):
    first = trainer.train(_tiny(tmp_path, out=str(tmp_path / "a"))).metrics
    second = trainer.train(_tiny(tmp_path, out=str(tmp_path / "b"))).metrics
    pd.testing.assert_frame_equal(first, second)
    other = trainer.train(_tiny(tmp_path, out=str(tmp_path / "c"), seed=1)).metrics
    assert not first["value"].equals(other["value"])


def test_killed_run_resumes_to_the_same_table(tmp_path):
    config = _tiny(tmp_path, method="sera", steps=8, batch_size=256, checkpoint_every=3)
    whole = trainer.train(dataclasses.replace(config, out=str(tmp_path / "whole")))

    def kill_at_five(run):
        if run.step == 5:
            raise KeyboardInterrupt

    killed = dataclasses.replace(config, out=str(tmp_path / "killed"))
    with pytest.raises(KeyboardInterrupt):
        trainer.train(killed, callback=kill_at_five)
    partial = pd.read_csv(tmp_path / "killed" / "metrics.csv")
    assert partial["step"].max() == 2  # the checkpoint after 3 steps (0, 1, 2) survived
    resumed = trainer.train(killed)
    pd.testing.assert_frame_equal(resumed.metrics, whole.metrics)
    pd.testing.assert_frame_equal(resumed.allocations, whole.allocations)
    again = trainer.train(killed)  # finished: read back, nothing retrained
    pd.testing.assert_frame_equal(again.metrics, whole.metrics)


def test_resume_refuses_a_different_configuration(tmp_path):
    trainer.train(_tiny(tmp_path))
    with pytest.raises(ValueError, match="different configuration.*n0"):
        trainer.train(_tiny(tmp_path, n0=8))
    with pytest.raises(ValueError, match="different configuration.*allocator.u_min"):
        trainer.train(_tiny(tmp_path, allocator=trainer.AllocatorConfig(u_min=0.3)))


def test_command_line(tmp_path, capsys):
    out = tmp_path / "cli"
    code = trainer.main(["--method", "maxrl", "--n0", "2", "--steps", "2", "--seed", "3",
                         "--out", str(out), "--batch-size", "8", "--no-progress",
                         "--allocator.n-max", "None", "--val-k", "1", "4"])
    assert code == 0
    table = pd.read_csv(out / "metrics.csv")
    assert set(table["method"]) == {"maxrl"} and set(table["seed"]) == {3}
    assert {4} <= set(table.loc[table["metric"] == "val_pass", "k"])
    assert {64} <= set(table.loc[table["metric"] == "pass", "k"])


def test_help_shows_every_field_with_its_meaning_and_choices(capsys):
    with pytest.raises(SystemExit):
        trainer.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--method {ce,maxrl,grpo,rloo,sera,sera-oracle,", "--allocator.rounding",
                 "--preset {fast,long,paper}", "--data {digits,cifar,imagefolder}",
                 "SGD learning rate", "Observability-guided selection"):
        assert flag in text, flag
    with pytest.raises(SystemExit):
        trainer.main(["--method", "ppo"])
    assert "ppo" in capsys.readouterr().err


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="method must be one of"):
        trainer.ClassificationConfig(method="ppo")
    with pytest.raises(ValueError, match="n0 must be >= 1, got 0"):
        trainer.ClassificationConfig(n0=0)
    with pytest.raises(ValueError, match="n_min must be >= 2"):
        trainer.AllocatorConfig(n_min=1)


def test_data_sources_report_bad_paths(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_data("cifar", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="not a CIFAR folder"):
        load_data("cifar", str(tmp_path))
    with pytest.raises(ValueError, match="needs a path"):
        load_data("imagefolder")
    with pytest.raises(ValueError, match="missing train/"):
        check_image_folder(tmp_path)
    (tmp_path / "train" / "cat").mkdir(parents=True)
    (tmp_path / "train" / "dog").mkdir(parents=True)
    (tmp_path / "train" / "cat" / "a.png").write_bytes(b"")
    (tmp_path / "val").mkdir()
    with pytest.raises(ValueError, match=r"class folders without images.*\['dog'\]"):
        check_image_folder(tmp_path)
    with pytest.raises(ValueError, match="source must be one of"):
        load_data("mnist", str(tmp_path))


def test_cifar_folder_in_python_format(tmp_path):
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8),
                 b"labels": list(rng.integers(0, 10, 4))}
        (tmp_path / name).write_bytes(pickle.dumps(batch))
    data = load_data("cifar", str(tmp_path))
    assert len(data.train) == 20 and len(data.val) == 4 and data.n_classes == 10
    x, y = fetch(data.train, [0, 5])
    assert x.shape == (2, 3, 32, 32) and y.dtype == torch.long


def test_the_safeguard_leaves_images_out_and_the_run_goes_on(tmp_path):
    config = _tiny(tmp_path, method="sera-oracle",
                   allocator=trainer.AllocatorConfig(n_max=8, u_min=0.5))
    results = trainer.train(config)
    allocations = results.allocations
    assert (allocations["rollouts"] == 0).any()  # an untrained model: many images fail U
    assert (allocations.groupby("step")["rollouts"].sum() == 16 * 4).all()
    assert np.isfinite(results.metrics["value"]).all()
