"""The simulator in memory against the same runs through a run folder, as simulate() ran before.

Usage: python benchmarks/simulator_speed.py [--repetitions 8] [--steps 160]

One workload of notebook 08's regime map: MaxRL and the paper's SERA at N0 = 4, 8 and 16 on the
stored math profile, `repetitions` seeds each. "folder" fits every run with `loop.fit` in a
temporary folder (config.json, provenance, the final checkpoint and the tables written, torch
imported for the checkpoint); "memory" is `sera.studies.simulate.simulate`, which keeps the run
in memory.
Prints both times, their ratio, and whether the two give the same Pass@K to the last bit (they
must: the same steps, only the writing differs).
"""

import argparse
import dataclasses
import tempfile
import time

import numpy as np
import pandas as pd

from sera.studies import simulate
from sera.tables import Results
from sera.trainers import loop
from sera.trainers.profiles import load_profiles


def through_folders(p0, config, repetitions):
    parts = []
    with tempfile.TemporaryDirectory() as folder:
        for r in range(repetitions):
            run = dataclasses.replace(config, seed=config.seed + r, out=f"{folder}/{r}",
                                      checkpoint_every=config.steps + 1)
            parts.append(loop.fit(simulate.SimulatedStudy(run, p0)))
    return Results.concat(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=8)
    parser.add_argument("--steps", type=int, default=160)
    args = parser.parse_args()
    p0 = load_profiles()["math"]
    configs = [simulate.SimulationConfig(method=m, n0=n0, steps=args.steps, eval_every=40)
               for n0 in (4, 8, 16) for m in ("maxrl", "sera")]
    through_folders(p0, configs[0], 1)  # imports and first-call costs out of the timing
    times, passes = {}, {}
    for name, run in (("folder", through_folders), ("memory", simulate.simulate)):
        start = time.perf_counter()
        metrics = pd.concat([run(p0, c, args.repetitions).metrics for c in configs])
        times[name] = time.perf_counter() - start
        passes[name] = metrics[metrics["metric"] == "val_pass"]["value"].to_numpy()
    runs = len(configs) * args.repetitions
    for name, seconds in times.items():
        print(f"{name:>6}: {seconds:6.2f} s for {runs} runs of {args.steps} steps "
              f"({1000 * seconds / runs:.1f} ms a run)")
    print(f"speed-up in memory: {times['folder'] / times['memory']:.2f}x; same Pass@K: "
          f"{np.array_equal(passes['folder'], passes['memory'])}")


if __name__ == "__main__":
    main()
