"""Allocation time for 10^6 prompts against numpy.sort of the same 10^6 floats, in one run.

Usage: python benchmarks/allocation_speed.py [--prompts 1000000] [--repeats 5]
Prints the best-of-repeats absolute times and the ratios to the sort.
"""

import argparse
import time

import numpy as np

import sera


def best_times(calls, repeats):
    """Best-of-repeats time of each call, the calls interleaved so drift hits them alike."""
    best = {name: float("inf") for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--n0", type=int, default=16)
    parser.add_argument("--n-max", type=int, default=64)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    p = rng.beta(0.6, 1.2, args.prompts)
    budget = args.n0 * args.prompts
    calls = {
        "numpy.sort": lambda: np.sort(p),
        "waterline (float)": lambda: sera.waterline(p, budget, 2, args.n_max),
        "allocate paper": lambda: sera.allocate(p, budget, 2, args.n_max, method="paper"),
        "allocate exact": lambda: sera.allocate(p, budget, 2, args.n_max, method="exact"),
    }
    best = best_times(calls, args.repeats)
    print(f"prompts={args.prompts:,} budget={budget:,} n_min=2 n_max={args.n_max} "
          f"best of {args.repeats}")
    limits = {"allocate paper": 4.0, "allocate exact": 10.0}
    for name, t in best.items():
        ratio = t / best["numpy.sort"]
        limit = f"  (limit {limits[name]:.0f}x)" if name in limits else ""
        print(f"{name:20s}  {t * 1e3:8.1f} ms   ratio {ratio:5.2f}{limit}")


if __name__ == "__main__":
    main()
