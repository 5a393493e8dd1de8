"""The regime map's digits profile, checked on real runs.

Notebook 08's map predicts SERA - MaxRL from each study's difficulty profile. On digits the
untrained classifier gives every training image about the same p (about 0.1), so the allocator
has no spread to act on. The simulator's prediction for the digits preset (N0 = 16, batch 64,
300 steps) is written first to data/study/digits-n0-16/prediction.csv; MaxRL, the paper's `sera`
and the package's `sera-rate` then train on digits with 6 seeds each (seconds a run: the exact
likelihood needs no sampling at evaluation), and the finished runs' tables are stored beside it:

    python -m sera.studies.digits predict   # the simulator's prediction (a minute)
    python -m sera.studies.digits run       # trains or resumes every run, then stores them
    python -m sera.studies.digits show      # gains over MaxRL against the prediction

Held-out Pass@K is exact here: each held-out image's p is the model's probability of its label.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import pandas as pd

from sera import runstore
from sera.results import paired_gain, verdict

NAME = "digits-n0-16"
FOLDER = runstore.STUDY_DIR / NAME
RUNS_DIR = runstore.RUNS_ROOT / NAME
REGISTRATION = runstore.read_registration(FOLDER / runstore.REGISTRATION)
"""The check's registration (data/study/digits-n0-16/point.toml): preset, seeds and arms."""
ARMS = tuple(arm["method"] for arm in REGISTRATION["arms"] if arm["method"] != "maxrl")
"""The SERA arms, each compared with MaxRL on the same seeds."""
KS = (1, 8, 32, 128)
SEEDS = REGISTRATION["seeds"]
KEPT_METRICS = ("val_pass", "pass", "rollouts", "stopped")


def base():
    """The digits preset the registration names (fast: N0 = 16, batch 64, 300 steps) without
    progress bars."""
    from sera.trainers import classification

    return dataclasses.replace(classification.PRESETS[REGISTRATION["preset"]], progress=False)


def predict(repetitions: int = 24, processes: int = 2) -> pd.DataFrame:
    """The simulator's SERA - MaxRL at the run's last step from the digits profile, at the
    preset's N0, batch size and step count: one row per (arm, k) with gain, low, high."""
    from sera.studies import simulate
    from sera.trainers.profiles import load_profiles

    config = base()
    sim = simulate.SimulationConfig(batch_size=config.batch_size, eval_every=config.steps,
                                    lr=1.0, seed=0, ks=KS)
    table = simulate.regime_map(load_profiles()["digits"], [config.n0], config.steps,
                                ("maxrl", *ARMS), repetitions=repetitions, base=sim,
                                processes=processes)
    parts = [simulate.predicted_gain(table, arm).assign(arm=arm) for arm in ARMS]
    out = pd.concat(parts, ignore_index=True)
    out = out[out["step"] == config.steps]
    return out[["arm", "n0", "step", "k", "gain", "low", "high", "runs"]].reset_index(drop=True)


def run(seeds: int = SEEDS, progress: bool = True) -> int:
    """Train (or resume, or read back) every run, then store the finished ones; returns how
    many were stored. Refuses to train before the prediction is stored."""
    from sera.trainers import classification

    if not (FOLDER / runstore.PREDICTION).exists():
        raise RuntimeError(f"no {FOLDER / runstore.PREDICTION}: write the prediction first "
                           "(python -m sera.studies.digits predict)")
    config = base()
    classification.run_grid(config, ["maxrl", *ARMS], [config.n0], list(range(seeds)), RUNS_DIR,
                            progress=progress)
    done = sorted(f for f in RUNS_DIR.iterdir() if f.is_dir() and runstore.finished(f))
    return runstore.store_runs(
        done, FOLDER, {"point": NAME, "task": "digits", "methods": ["maxrl", *ARMS],
                       "seeds": seeds, "rerun": "python -m sera.studies.digits run"},
        tables=("metrics", "final"), metrics=KEPT_METRICS)


def compare() -> pd.DataFrame:
    """Each arm's gain over MaxRL in points of held-out Pass@K (mean of per-seed paired
    differences, Student-t interval over seeds) beside the stored prediction, and the results
    page's verdict (sera.results.verdict)."""
    final = pd.read_csv(FOLDER / runstore.stored_file("final"))
    prediction = pd.read_csv(FOLDER / runstore.PREDICTION).set_index(["arm", "k"])
    rows = []
    for arm in ARMS:
        gains = paired_gain(final, arm, "maxrl", ks=KS)
        for _, g in gains.iterrows():
            predicted = prediction.loc[(arm, int(g["k"]))]
            rows.append({"arm": arm, "k": int(g["k"]), "seeds": int(g["seeds"]),
                         "gain": 100 * g["gain"], "low": 100 * g["low"],
                         "high": 100 * g["high"], "predicted": 100 * predicted["gain"],
                         "predicted low": 100 * predicted["low"],
                         "predicted high": 100 * predicted["high"],
                         "verdict": verdict(g["gain"], g["low"], g["high"],
                                            predicted["gain"])})
    return pd.DataFrame(rows)


def machines() -> dict[str, str]:
    """Per method, the instruction sets (torch's cpu_capability) its stored runs trained on."""
    found: dict[str, set] = {}
    for run in runstore.stored_summary(FOLDER).get("runs", []):
        kinds = {r["cpu_capability"] for r in run["provenance"] if "cpu_capability" in r}
        found.setdefault(run["config"]["method"], set()).update(kinds or {"unknown"})
    return {method: "+".join(sorted(kinds)) for method, kinds in found.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sera.studies.digits", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("predict", "run", "show"))
    parser.add_argument("--seeds", type=int, default=SEEDS)
    args = parser.parse_args(argv)
    if args.action == "predict":
        if (FOLDER / runstore.PREDICTION).exists():
            print(f"{FOLDER / runstore.PREDICTION} exists: a prediction is written once, before "
                  "the runs", file=sys.stderr)
            return 1
        runstore.write_csv(predict(), FOLDER / runstore.PREDICTION)
        print(f"wrote {FOLDER / runstore.PREDICTION}")
    elif args.action == "run":
        print(f"stored {run(args.seeds)} runs in {FOLDER}")
    else:
        print(compare().round(1).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
