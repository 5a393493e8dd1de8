"""Each method at its best step size: a learning-rate sweep chosen on a tuning split.

Every method of notebook 06 shares one learning rate there, tuned for MaxRL; estimators with
other gradient scales (GRPO's 1/std, r - mean, RAFT) may simply want another. A sweep trains
each method at three learning rates spanning 10x around the preset's (digits add one above and
one below, mazes one below, where three left methods at an edge), with several seeds, and keeps
a tuning split out of training: digits hold out a fifth of the training images
(ClassificationConfig.tune_fraction), mazes draw 64 extra mazes that neither the warm-up nor RL
sees (MazeConfig.n_tune). Each run's final Pass@1 on the tuning split (metric `tune_pass`)
chooses the method's learning rate; the held-out prompts, never used for that choice, give the
final table. Each sweep takes about an hour or more on one core (each stored run's provenance
records its wall time), so their tables are stored in data/study/<sweep>/ with their provenance:

    python -m sera.tuning run digits-lr     # trains (or resumes) every run, stores as they land
    python -m sera.tuning run maze-lr

Notebook 06 reads the stored tables (`load`, `best`, `at_best`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sera import runstore
from sera._checks import registry
from sera.tables import Results
from sera.trainers import classification, grid, maze
from sera.trainers.presets import builder

FACTORS = (10**-0.5, 1.0, 10**0.5)
"""Learning rates as factors of the preset's: three values spanning 10x."""
STUDY_DIR = runstore.STUDY_DIR
RUNS_DIR = runstore.RUNS_ROOT / "tuning"
KEPT_METRICS = ("val_pass", "pass", "tune_pass", "rollouts", "stopped", "cosine")


@dataclass(frozen=True)
class Sweep:
    """A learning-rate sweep: the task, base configuration, methods, seeds and factors. A
    sequence task's runs share one warm-up, trained on the training prompts only."""

    name: str
    task: str
    base: classification.ClassificationConfig | maze.MazeConfig
    methods: tuple[str, ...]
    seeds: int = 6
    factors: tuple[float, ...] = FACTORS

    def lrs(self) -> list[float]:
        return [float(f"{self.base.lr * f:.4g}") for f in self.factors]

    def configs(self, runs_dir=RUNS_DIR) -> list[classification.ClassificationConfig]:
        """Every (seed, method, learning rate), seeds outermost so that finished seeds pair."""
        base = self.base
        if isinstance(base, maze.MazeConfig):
            base = dataclasses.replace(
                base, warmup_dir=str(runstore.warmup_dir(Path(runs_dir) / self.name)))
        out = []
        for seed in range(self.seeds):
            for method in self.methods:
                for lr in self.lrs():
                    config = dataclasses.replace(base, method=method, seed=seed, lr=lr,
                                                 progress=False)
                    folder = Path(runs_dir) / self.name / f"lr-{lr:g}" / grid.run_label(config)
                    out.append(dataclasses.replace(config, out=str(folder)))
        return out


SWEEPS = registry(((sweep.name, sweep) for sweep in (
    # Both sweeps ran the package's rate-rule SERA (sera-rate), stored before the paper's `sera`
    # was separated from it. Three rates spanning 10x chose the top one for 9 of the 16 methods,
    # so the grid went one factor of sqrt(10) further up; there DAPO chose the bottom one, so it
    # goes one further down too: no method's best may sit at an edge it could cross.
    Sweep("digits-lr", "digits",
          dataclasses.replace(classification.PRESETS["fast"], tune_fraction=0.2),
          ("maxrl", "sera-rate", "reweight", "grpo", "knapsack", "knapsack-maxrl", "gvm",
           "gvm-maxrl", "dars-hw", "dars-hw-maxrl", "cero-reconstruction", "dapo", "dapo-maxrl",
           "dars-hw-2stage", "sara-reconstruction", "rl2ml-0.5-reconstruction"),
          factors=(0.1,) + FACTORS + (10.0,)),
    # notebook 06's maze testbed (60 steps, N0 = 8, token-mean) with 64 tuning mazes; after four
    # seeds SERA and Knapsack RL sat at the bottom rate, so the grid goes one step further down
    Sweep("maze-lr", "maze", dataclasses.replace(maze.PRESETS["fast"], steps=60, n_tune=64),
          ("maxrl", "sera-rate", "knapsack", "dapo"), factors=(0.1,) + FACTORS),
)), "sweep")


def sweep(name: str) -> Sweep:
    if name not in SWEEPS:
        raise KeyError(f"no sweep {name!r}; known: {', '.join(SWEEPS)}")
    return SWEEPS[name]


def run(s: Sweep, runs_dir=RUNS_DIR, progress: bool = True) -> Results:
    """Train (or resume, or read back) every run, storing the finished ones after each."""
    grid.work_through(s.configs(runs_dir), builder(s.task), progress=progress,
                      after_each=lambda: store(s, runs_dir), desc=s.name)
    return load(s.name)


def store(s: Sweep, runs_dir=RUNS_DIR) -> int:
    """The finished runs' metrics (the kept metrics only) and final tables, with an lr column,
    in data/study/<sweep>/; returns how many runs."""
    configs = s.configs(runs_dir)
    lrs = {Path(c.out): c.lr for c in configs}
    done = [folder for folder in lrs if runstore.finished(folder)]
    return runstore.store_runs(
        done, STUDY_DIR / s.name,
        {"sweep": s.name, "task": s.task, "methods": list(s.methods), "seeds": s.seeds,
         "lrs": s.lrs(),
         "runs_planned": len(configs), "chosen_on": "tune_pass at K = 1",
         "rerun": f"python -m sera.tuning run {s.name}"},
        tables=("metrics", "final"), metrics=KEPT_METRICS,
        columns={folder: {"lr": lrs[folder]} for folder in done})


def load(name: str, store_dir=None) -> Results:
    folder = Path(store_dir or STUDY_DIR) / name
    if not (folder / runstore.stored_file("final")).exists():
        raise FileNotFoundError(f"no stored sweep {name!r} in {folder}; run "
                                f"`python -m sera.tuning run {name}` (45-70 minutes on a core)")
    metrics, final = (pd.read_csv(folder / runstore.stored_file(t)) for t in ("metrics", "final"))
    return Results(metrics, final, pd.DataFrame())


def best(metrics: pd.DataFrame, metric: str = "tune_pass", k: int = 1) -> pd.DataFrame:
    """Each method's learning rate with the highest mean `metric` at K over its seeds (the
    tuning split, never the held-out prompts), beside every rate's mean and seed count."""
    rows = metrics[(metrics["metric"] == metric) & (metrics["k"] == k)]
    means = rows.groupby(["method", "lr"])["value"].agg(["mean", "size"]).reset_index()
    chosen = means.loc[means.groupby("method")["mean"].idxmax()]
    table = means.pivot_table(index="method", columns="lr", values="mean")
    table.columns = [f"{metric}@{k} at lr {lr:g}" for lr in table.columns]
    table["best lr"] = chosen.set_index("method")["lr"]
    table["seeds"] = means.groupby("method")["size"].min()
    return table.reset_index()


def at_best(results: Results, chosen: pd.DataFrame) -> Results:
    """The runs at each method's chosen learning rate (the lr column kept)."""
    pick = dict(zip(chosen["method"], chosen["best lr"], strict=True))

    def keep(table):
        return table[np.isclose(table["lr"], table["method"].map(pick))].reset_index(drop=True)

    return Results(keep(results.metrics), keep(results.final), results.allocations)


def at_lr(results: Results, lr: float) -> Results:
    """Every method's runs at one learning rate: the one-rate table beside the tuned one."""

    def keep(table):
        return table[np.isclose(table["lr"], lr)].reset_index(drop=True)

    return Results(keep(results.metrics), keep(results.final), results.allocations)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["run", "store", "show"])
    parser.add_argument("sweeps", nargs="*", help="sweep names (default: all)")
    parser.add_argument("--runs-dir", default=str(RUNS_DIR))
    args = parser.parse_args(argv)
    for name in args.sweeps or list(SWEEPS):
        s = sweep(name)
        if args.action == "run":
            run(s, args.runs_dir)
        elif args.action == "store":
            print(f"{name}: {store(s, args.runs_dir)} runs stored")
        if args.action in ("run", "show"):
            table = best(load(name).metrics)
            print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
