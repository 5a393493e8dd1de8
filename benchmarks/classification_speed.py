"""Classification study speed on the CPU default (digits, small CNN, batch 64), in one run.

1. Training step time at N0 = 128 against N0 = 4 (the collapsed loss makes cost independent
   of N): limit 1.2x.
2. The collapsed loss against the naive replicated computation (every response's image through
   the model) at N0 = 128, forward and backward: limit 1/20 of the time.

Usage: python benchmarks/classification_speed.py [--steps 40] [--method sera-oracle]
"""

import argparse
import time

import numpy as np
import torch

from sera.estimators import maxrl_advantages
from sera.tasks.classification import fetch
from sera.trainers import classification as trainer
from sera.trainers import label_rollouts, loop


def step_time(method: str, n0: int, steps: int) -> float:
    config = trainer.ClassificationConfig(method=method, n0=n0, steps=steps, progress=False,
                                          cosine_every=10**9, out="/tmp/unused")
    study = trainer.ClassificationStudy(config)
    run = loop.Run(study)
    run.step = 1  # skip the gradient-cosine measurement at step 0; time training alone
    ids = np.arange(config.batch_size)
    for _ in range(3):  # warm up
        study.step(run, ids, run.planner(ids))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        study.step(run, ids, run.planner(ids))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def loss_times(n0: int, repeats: int) -> tuple[float, float]:
    config = trainer.ClassificationConfig(method="maxrl", n0=n0, progress=False, out="/tmp/x")
    study = trainer.ClassificationStudy(config)
    model, generator = study.model, study.generator
    ids = np.arange(config.batch_size)
    images, targets = fetch(study.data.train, ids)
    counts = np.full(ids.size, n0)
    budget = int(counts.sum())
    weights = torch.ones(ids.size, dtype=torch.float64)
    params = list(model.parameters())

    def collapsed():
        log_probs = torch.log_softmax(model(images), -1)
        rows, labels = label_rollouts.sample_labels(log_probs.detach().exp(), counts, generator)
        _, values = label_rollouts.advantages(maxrl_advantages, rows, labels, targets, counts)
        per_class = label_rollouts.class_weights(rows, labels, values, ids.size, 10)
        loss = label_rollouts.collapsed_loss(log_probs, per_class, weights, budget)
        torch.autograd.grad(loss, params)

    def naive():
        with torch.no_grad():
            probs = torch.softmax(model(images), -1)
        rows, labels = label_rollouts.sample_labels(probs, counts, generator)
        _, values = label_rollouts.advantages(maxrl_advantages, rows, labels, targets, counts)
        loss = label_rollouts.replicated_loss(model, images, rows, labels, values, weights, budget)
        torch.autograd.grad(loss, params)

    best = {}
    for name, fn in (("collapsed", collapsed), ("naive", naive)):
        fn()
        best[name] = min(_timed(fn) for _ in range(repeats))
    return best["collapsed"], best["naive"]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--method", default="sera-oracle")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    small = step_time(args.method, 4, args.steps)
    large = step_time(args.method, 128, args.steps)
    print(f"threads={torch.get_num_threads()} method={args.method} batch=64 digits small-cnn")
    print(f"step time  N0=4: {small * 1e3:7.2f} ms   N0=128: {large * 1e3:7.2f} ms   "
          f"ratio {large / small:5.2f} (limit 1.2)")
    collapsed, naive = loss_times(128, args.repeats)
    print(f"N0=128 loss + backward: collapsed {collapsed * 1e3:7.2f} ms   naive replicated "
          f"{naive * 1e3:8.2f} ms   speed-up {naive / collapsed:6.1f}x (limit 20x)")


if __name__ == "__main__":
    main()
