"""Allocation time for 10^6 prompts against numpy.argsort and numpy.sort of the same 10^6 floats.

Usage: python benchmarks/allocation_speed.py [--prompts 1000000] [--repeats 9]

Part 1: waterline and both roundings, for two p distributions (Beta(0.6, 1.2), and a
wide-range mix of confident and hopeless prompts) and two n_max values, as ratios to
numpy.argsort of the same p (limits: paper rounding 2x, exact 5x) and to numpy.sort (printed
only: with AVX-512 a float sort is about three times faster than argsort, so sort ratios move with
the machine). Part 2: the observability safeguard (u_min = 0.5) against the same call without
it, for 10^5 and 10^6 prompts (limit 25x at 10^5). Part 3: the allocators SERA is compared with,
at 10^5 prompts, beside SERA's (aim: well under a second). Best-of-repeats times, the calls
interleaved so that machine drift hits them alike. Each line ends with "ok" or "OVER LIMIT".
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


def distributions(size, rng):
    wide = rng.beta(0.6, 1.2, size)
    pick = rng.random(size)
    wide[pick < 0.3] = 1 - 10.0 ** -rng.uniform(1, 16, int((pick < 0.3).sum()))
    wide[pick > 0.9] = 10.0 ** -rng.uniform(1, 300, int((pick > 0.9).sum()))
    return {"beta(0.6,1.2)": rng.beta(0.6, 1.2, size), "wide-range": wide}


LIMITS = {"paper": 2.0, "exact": 5.0}  # times numpy.argsort of the same p


def roundings(size, n0, repeats, rng):
    print(f"prompts={size:,} budget={n0 * size:,} n_min=2, best of {repeats}; each time with its "
          f"ratio to numpy.argsort / numpy.sort of the same p")
    print(f"  {'p':14s} {'n_max':>5s} {'argsort':>8s} {'sort':>7s}  " + "  ".join(
        f"{name:>22s}" for name in ("waterline", *LIMITS)) + "  limits (argsort)")
    for label, p in distributions(size, rng).items():
        for n_max in (64, 256):
            calls = {"numpy.argsort": lambda p=p: np.argsort(p),
                     "numpy.sort": lambda p=p: np.sort(p),
                     "waterline": lambda p=p, n=n_max: sera.waterline(p, n0 * size, 2, n)}
            for method in LIMITS:
                calls[method] = lambda p=p, n=n_max, m=method: sera.allocate(
                    p, n0 * size, 2, n, method=m)
            best = best_times(calls, repeats)
            argsort, sort = best["numpy.argsort"], best["numpy.sort"]
            cells = [f"{best[name] * 1e3:6.1f} ms {best[name] / argsort:4.2f}x "
                     f"{best[name] / sort:4.2f}x" for name in ("waterline", *LIMITS)]
            within = all(best[name] <= limit * argsort for name, limit in LIMITS.items())
            print(f"  {label:14s} {n_max:5d} {argsort * 1e3:5.1f} ms {sort * 1e3:4.1f} ms  "
                  + "  ".join(f"{c:>22s}" for c in cells)
                  + f"  {'ok' if within else 'OVER LIMIT'}")


def safeguard(sizes, n0, repeats, rng):
    print(f"observability safeguard (u_min=0.5, p ~ Beta(0.3, 0.8), budget {n0}B, n_max 64); "
          f"limit 25x the call without it")
    for size in sizes:
        p, budget = rng.beta(0.3, 0.8, size), n0 * size
        for method in ("paper", "exact"):
            calls = {"without": lambda p=p, b=budget, m=method: sera.allocate(p, b, 2, 64, m),
                     "with": lambda p=p, b=budget, m=method: sera.allocate(p, b, 2, 64, m,
                                                                           u_min=0.5)}
            best = best_times(calls, repeats)
            kept = sera.allocate(p, budget, 2, 64, method, u_min=0.5).retained.mean()
            ratio = best["with"] / best["without"]
            verdict = ("ok" if ratio <= 25 else "OVER LIMIT") if size <= 100_000 else "no limit"
            print(f"  B={size:>9,} {method:5s}  without {best['without'] * 1e3:7.1f} ms  with "
                  f"{best['with'] * 1e3:8.1f} ms  ratio {ratio:5.1f}x  (retained {kept:.1%})  "
                  f"{verdict}")


def baselines(size, n0, repeats, rng):
    p, budget = rng.beta(0.6, 1.2, size), n0 * size
    methods = ("paper", "exact", "knapsack", "gvm", "dars-hw", "dars-et")
    calls = {m: lambda m=m: sera.allocate(p, budget, 2, 64, method=m) for m in methods}
    best = best_times(calls, repeats)
    print(f"one-shot allocators, B={size:,}, budget {n0}B, n_max 64, best of {repeats}: " +
          "  ".join(f"{m} {t * 1e3:.1f} ms" for m, t in best.items()))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--n0", type=int, default=16)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    roundings(args.prompts, args.n0, args.repeats, rng)
    safeguard((args.prompts // 10, args.prompts), 8, max(3, args.repeats // 3), rng)
    baselines(args.prompts // 10, args.n0, max(3, args.repeats // 3), rng)


if __name__ == "__main__":
    main()
