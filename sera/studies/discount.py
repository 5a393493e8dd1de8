"""The history's discount chosen against what the prompts did next, on the stored runs.

A history estimate is only used to plan a prompt's next visit, so each rule and discount is scored
by how well its estimate predicts the outcomes of that visit: the Brier score, the mean over the
visit's rollouts of (r - p_hat)^2. Its expectation is p (1 - p) + (p - p_hat)^2, so on the same
visits two estimators differ in Brier exactly by their mean squared error against the unknown
true p: the stored sequence runs, which have no exact p, rank discounts without one. Every
setting replays the same recorded outcomes (`sera.SuccessHistory`, folded at the recorded epoch
boundaries), and a setting's gain over the package's default is paired by run, with a Student-t
interval over runs:

    python -m sera.studies.discount            # the stored long points: data/discount/
    python -m sera.studies.discount --digits 6 # and digits runs trained here (exact p known)

On digits, where the exact p of every prompt is known, the ranking by Brier score is checked
against the ranking by mean absolute error to the exact p (`sera.results.replay_history`).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from sera import runstore
from sera.results import replay, t_half_width
from sera.tables import keys_of, with_arm

DEFAULT = "counts 0.5"
"""The setting `sera` plans with (sera.methods): the paper's counts rule at gamma 0.5."""
SETTINGS = {
    **{f"counts {g:g}": {"rule": "counts", "gamma": g}
       for g in (0.0, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 1.0)},
    "rate 0.5": {"rule": "rate", "gamma": 0.5},
}
"""Rule and discount of each replayed estimator (keyword arguments of SuccessHistory)."""
POINTS = ("math-n0-4-320-avx2", "maze-n0-8-long-sera", "math-n0-4-long", "maze-n0-8-long")
"""The stored long points whose recorded outcomes are replayed."""
FOLDER = runstore.DATA_DIR / "discount"
"""Where the study is stored."""
BRIER, EXACT = "brier.csv", "digits_exact.csv"
"""The study's tables in FOLDER: per run and setting, and on digits."""
ARMS = ("maxrl", "sera", "sera-rate", "sera lr-half")
"""Arms replayed where a point has them: uniform counts, and the allocations SERA made."""


def brier(allocations: pd.DataFrame, settings=None) -> pd.DataFrame:
    """One row per run and setting: the mean Brier score of the setting's estimates on the next
    visit's rollouts (`brier`), over the visits where the prompt had an estimate, and how many
    rollouts were scored. `allocations` is an allocations table (step, epoch, prompt, rollouts,
    successes and the run keys)."""
    settings = SETTINGS if settings is None else settings
    keys = keys_of(allocations) + (["arm"] if "arm" in allocations.columns else [])
    rows = []
    for values, run in allocations.groupby(keys, dropna=False, sort=False):
        for name, options in settings.items():
            total, scored = 0.0, 0.0
            for part, _, p_hat, available in replay(run, **options):
                s = part["successes"].to_numpy(float)[available]
                n = part["rollouts"].to_numpy(float)[available]
                p = p_hat[available]
                total += float(np.sum(s * (1 - p) ** 2 + (n - s) * p ** 2))
                scored += float(n.sum())
            rows.append({**dict(zip(keys, values, strict=True)), "setting": name,
                         "brier": total / scored if scored else np.nan, "rollouts": scored})
    return pd.DataFrame(rows)


def against_default(table: pd.DataFrame, by=("point", "arm")) -> pd.DataFrame:
    """Each setting's Brier minus the default's, paired by run: mean, 95% Student-t interval
    over runs, and the number of runs (negative: the setting predicts the next visit better)."""
    keys = [c for c in table.columns if c not in ("setting", "brier", "rollouts")]
    wide = table.pivot_table(index=keys, columns="setting", values="brier", dropna=False)
    rows = []
    for group, part in wide.groupby(list(by), sort=False):
        for setting in table["setting"].unique():
            diff = (part[setting] - part[DEFAULT]).dropna().to_numpy()
            half = float(t_half_width(diff.std(ddof=1), diff.size)) if diff.size > 1 else np.nan
            rows.append({**dict(zip(by, group, strict=True)), "setting": setting,
                         "brier": float(part[setting].mean()),
                         "vs_default": float(diff.mean()), "low": float(diff.mean() - half),
                         "high": float(diff.mean() + half), "runs": int(diff.size)})
    return pd.DataFrame(rows)


def regret(table: pd.DataFrame) -> pd.DataFrame:
    """Per counts discount (rows) and point (columns): its mean Brier score over the point's runs
    minus the best discount's at that point, and `worst`, the largest over points. Points count
    equally whatever their number of runs; the rate rule is left out (it is `sera-rate`'s)."""
    counts = table[table["setting"].str.startswith("counts ")]
    mean = counts.groupby(["setting", "point"], sort=False)["brier"].mean().unstack("point")
    gap = mean - mean.min()
    return gap.assign(worst=gap.max(axis=1))


def chosen(table: pd.DataFrame) -> str:
    """The counts discount whose worst regret over the points is smallest: the one no task pays
    much for. The stored study's choice is the one `sera` plans with (tests/test_discount.py)."""
    gap = regret(table)
    return best_on(gap, [c for c in gap.columns if c != "worst"])


def best_on(gap: pd.DataFrame, points) -> str:
    """The discount (a row of `regret`'s table) whose worst regret over `points` is smallest."""
    return str(gap[list(points)].max(axis=1).idxmin())


def study(points=POINTS, arms=ARMS) -> pd.DataFrame:
    """`brier` over the stored long points' runs of the given arms, with a point column."""
    parts = []
    for name in points:
        stored = runstore.STUDY_DIR / name / runstore.stored_file("allocations")
        allocations = with_arm(pd.read_csv(stored))
        allocations = allocations[allocations["arm"].isin(arms)]
        parts.append(brier(allocations).assign(point=name))
    return pd.concat(parts, ignore_index=True)


def digits(seeds: int, runs_dir=None, steps: int = 300) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train MaxRL and sera on digits (N0 = 16, `steps` steps, `seeds` seeds; seconds a run)
    and replay every setting on their outcomes: the Brier table (point "digits") and
    `replay_history`'s MAE against the exact p with the ideal estimator's floor."""
    from sera.results import replay_history
    from sera.trainers import classification

    runs_dir = runstore.RUNS_ROOT / "discount" if runs_dir is None else runs_dir
    base = classification.ClassificationConfig(n0=16, steps=steps, progress=False)
    results = classification.run_grid(base, ["maxrl", "sera"], [16], list(range(seeds)),
                                      runs_dir, progress=False)
    allocations = with_arm(results.allocations)
    exact = replay_history(allocations.drop(columns="arm"), SETTINGS)
    return brier(allocations).assign(point="digits"), exact


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="*", default=list(POINTS))
    parser.add_argument("--digits", type=int, default=0,
                        help="also train this many seeds of MaxRL and sera on digits")
    parser.add_argument("--out", default=str(FOLDER),
                        help="folder of the per-run tables ('' writes nothing)")
    args = parser.parse_args(argv)
    table = study(args.points)
    if args.digits:
        on_digits, exact = digits(args.digits)
        table = pd.concat([table, on_digits], ignore_index=True)
        shown = exact.groupby(["method", "estimator"], sort=False)[
            ["history_mae", "ideal_mae", "history_pearson"]].mean().round(4)
        print("digits: mean absolute error against the exact p, and the ideal estimator's floor")
        print(shown.unstack("method").to_string())
        if args.out:
            runstore.write_text(f"{args.out}/{EXACT}", exact.to_csv(index=False))
    if args.out:
        import json

        from sera.trainers.checkpoint import provenance

        runstore.write_text(f"{args.out}/{BRIER}", table.to_csv(index=False))
        record = {**provenance(), "points": args.points, "digits_seeds": args.digits}
        runstore.write_text(f"{args.out}/{runstore.SUMMARY}", json.dumps(record, indent=1) + "\n")
    summary = against_default(table)
    shown = summary.assign(**{c: (1e4 * summary[c]).round(1)
                              for c in ("vs_default", "low", "high")})
    print("Brier score minus the default's (counts 0.5), in 1e-4, paired by run; negative: "
          "better")
    print(shown.pivot_table(index=["point", "arm"], columns="setting", values="vs_default",
                            sort=False).to_string())
    print(shown.to_string(index=False))
    print("Brier score minus the best discount's at each point, in 1e-4; worst: over points")
    print((1e4 * regret(table)).round(1).to_string())
    print(f"chosen (smallest worst regret): {chosen(table)}; sera plans with {DEFAULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
