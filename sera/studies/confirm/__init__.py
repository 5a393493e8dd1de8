"""Confirmation runs of notebook 08's regime map, stored so that readers need not rerun them.

A point is one sequence-study configuration (task, N0, steps, prompts), the methods and the seeds,
registered in data/study/<point>/point.toml (`points.load_point`) before its runs, with what each
arm is expected to do: a new point is a new folder, no code. Its prediction, SERA - MaxRL Pass@K
from `sera.studies.simulate` started from the point's own difficulty profile, is written before
any run, with the number of seeds a power calculation asks for (`prediction`). The runs then
train (or resume) one after another, and after each finished run the tables of every finished
run are stored compressed under data/study/<point>/ with their provenance (commit, command,
torch and thread settings, instruction set, wall time) (`storage`); `comparison` sets the
measured gains beside the predicted ones and gives the verdicts; `cli` is the command line:

    python -m sera.confirm list
    python -m sera.confirm predict math-n0-4   # data/study/math-n0-4/prediction.csv, once
    python -m sera.confirm run math-n0-4       # trains in build/runs/confirm/, stores each run
    python -m sera.confirm show math-n0-4      # predicted beside measured

Two processes may run the same point or sweep side by side, one per core: each trains only the
runs the other holds (`sera.runstore.claim`), and the stored tables are replaced whole, never half
written. `make figures PROFILE=study` runs every point this way (hours on two cores);
notebooks 05, 07 and 08 read the stored tables with `load` and `compare`.
"""

from sera import runstore
from sera.results import MIN_SEEDS
from sera.studies.confirm.cli import main, show
from sera.studies.confirm.comparison import (
    compare,
    compare_points,
    default_verify_dir,
    print_verification,
    status,
    verdicts,
    verify,
)
from sera.studies.confirm.points import (
    POINTS,
    Arm,
    Point,
    builder,
    default_runs_dir,
    load_point,
    n_seeds,
    point,
    read_prediction,
    registered,
)
from sera.studies.confirm.prediction import (
    POWER,
    PROFILE_SAMPLES,
    SEED_SD,
    arm_gains,
    calibrated_prediction,
    calibration,
    predict,
    profile,
    seed_sd,
    seeds_needed,
    simulated_allocations,
)
from sera.studies.confirm.storage import (
    check_warmup,
    keep_warmup,
    load,
    restore,
    run,
    store,
    stored,
    warmup_of,
)

__all__ = [
    "MIN_SEEDS", "POINTS", "POWER", "PROFILE_SAMPLES", "RUNS_DIR", "SEED_SD", "STUDY_DIR",
    "VERIFY_DIR", "Arm", "Point", "arm_gains", "builder", "calibrated_prediction", "calibration",
    "check_warmup", "compare", "compare_points", "default_runs_dir", "default_verify_dir",
    "keep_warmup", "load", "load_point", "main", "n_seeds", "point", "predict",
    "print_verification", "profile", "read_prediction", "registered", "restore", "run",
    "seed_sd", "seeds_needed", "show", "simulated_allocations", "status", "store", "stored",
    "verdicts", "verify", "warmup_of",
]


def __getattr__(name: str):
    # The folders follow sera.runstore as it stands when read (it may be pointed elsewhere).
    if name == "STUDY_DIR":
        return runstore.STUDY_DIR
    if name == "RUNS_DIR":
        return default_runs_dir()
    if name == "VERIFY_DIR":
        return default_verify_dir()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
