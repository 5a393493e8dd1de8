"""Classification study speed on the CPU default (digits, small CNN, batch 64), in one run.

1. Training step time at N0 = 128 against N0 = 4 (the collapsed loss makes cost independent
   of N): limit 1.2x.
2. The collapsed loss against the naive replicated computation (every response's image through
   the model) at N0 = 128, forward and backward: limit 1/20 of the time.

Usage: python benchmarks/classification_speed.py [--steps 40] [--method sera]
"""

import argparse
import time

import numpy as np
import torch

from sera.trainers import classification as trainer
from sera.trainers import rollouts


def step_time(method: str, n0: int, steps: int) -> float:
    config = trainer.ClassificationConfig(method=method, n0=n0, steps=steps, progress=False,
                                          cosine_every=10**9, out="/tmp/unused")
    run = trainer._Run(config)
    run.step = 1  # skip the gradient-cosine measurement at step 0; time training alone
    for _ in range(3):  # warm up
        trainer.train_step(run)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        trainer.train_step(run)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def loss_times(n0: int, repeats: int) -> tuple[float, float]:
    config = trainer.ClassificationConfig(method="maxrl", n0=n0, progress=False, out="/tmp/x")
    run = trainer._Run(config)
    ids = np.arange(config.batch_size)
    images, targets = trainer.fetch(run.data.train, ids)
    counts = np.full(ids.size, n0)
    weights = torch.ones(ids.size, dtype=torch.float64)
    params = list(run.model.parameters())

    def collapsed():
        log_probs = torch.log_softmax(run.model(images), -1)
        rows, labels = rollouts.sample_labels(log_probs.detach().exp(), counts, run.generator)
        _, values = rollouts.advantages("maxrl", rows, labels, targets, counts)
        per_class = rollouts.class_weights(rows, labels, values, ids.size, 10)
        loss = rollouts.collapsed_loss(log_probs, per_class, weights, config.budget)
        torch.autograd.grad(loss, params)

    def naive():
        with torch.no_grad():
            probs = torch.softmax(run.model(images), -1)
        rows, labels = rollouts.sample_labels(probs, counts, run.generator)
        _, values = rollouts.advantages("maxrl", rows, labels, targets, counts)
        loss = rollouts.replicated_loss(run.model, images, rows, labels, values, weights,
                                        config.budget)
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
    parser.add_argument("--method", default="sera")
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
