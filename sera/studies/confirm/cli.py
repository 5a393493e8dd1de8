"""`python -m sera.confirm`: list, predict, run, store, show, verify a point, or print verdicts."""

from __future__ import annotations

import argparse

import pandas as pd

from sera import runstore
from sera.studies.confirm import points
from sera.studies.confirm.comparison import (
    compare,
    default_verify_dir,
    print_verification,
    status,
    verdicts,
    verify,
)
from sera.studies.confirm.points import read_prediction
from sera.studies.confirm.prediction import predict
from sera.studies.confirm.storage import run, store


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Confirmation runs of notebook 08's regime map, stored so that readers need "
                    "not rerun them.")
    parser.add_argument("action", choices=["list", "predict", "run", "store", "show", "verify",
                                           "verdicts"])
    parser.add_argument("points", nargs="*", help="point names (default: all)")
    parser.add_argument("--runs-dir", default=None,
                        help=f"where runs train (default {points.default_runs_dir()}; verify: "
                             f"{default_verify_dir()})")
    parser.add_argument("--arms", nargs="+", default=None,
                        help="run: only these arms (their names as `show` prints them, e.g. "
                             "'maxrl lr-0.7'), in this order, each through all its seeds")
    parser.add_argument("--seeds", type=int, default=2, help="verify: seeds per arm to rerun")
    args = parser.parse_args(argv)
    if args.runs_dir is None:
        default = default_verify_dir() if args.action == "verify" else points.default_runs_dir()
        args.runs_dir = str(default)
    names = args.points or list(points.POINTS)
    if args.action == "verdicts":
        print(verdicts(names).to_markdown(index=False))
        return 0
    for name in names:
        point = points.point(name)
        if args.action == "list":
            seeds = point.seeds or "power-calculated"
            print(f"{name}: {point.task}, N0 {point.config.n0}, {point.config.steps} steps, "
                  f"{seeds} seeds x {len(point.arms)} arms; {point.why}")
        elif args.action == "predict":
            print(name, "\n",
                  predict(point, runs_dir=args.runs_dir).round(3).to_string(index=False))
        elif args.action == "run":
            run(point, args.runs_dir, arms=args.arms)
            print(compare(name).round(3).to_string(index=False))
        elif args.action == "store":
            print(f"{name}: {store(point, args.runs_dir)} runs stored")
        elif args.action == "verify":
            print_verification(name, verify(point, args.seeds, args.runs_dir))
        else:
            show(name)
    return 0


def show(name: str) -> None:
    """Print the point's status, then predicted beside measured gains, or the prediction alone
    while no seed has both the control and a treatment stored."""
    print(status([name]).drop(columns="command").to_string(index=False))
    folder = runstore.STUDY_DIR / name
    table = compare(name) if (folder / runstore.stored_file("final")).exists() else pd.DataFrame()
    if table.empty:
        print(f"no paired runs stored yet; the prediction (predicted gain over "
              f"{points.point(name).control}):")
        if (folder / runstore.PREDICTION).exists():
            print(read_prediction(name).round(3).to_string(index=False))
        return
    print(table.drop(columns="per_seed").round(3).to_string(index=False))
