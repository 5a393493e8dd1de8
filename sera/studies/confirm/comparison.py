"""Predicted beside measured: each point's gains over its control, the verdicts, and reruns of
them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sera import runstore
from sera.results import MIN_SEEDS, paired_gain, reproduction, verdict
from sera.studies.confirm import points
from sera.studies.confirm.points import Point, builder, read_prediction
from sera.studies.confirm.storage import load, stored, stored_table
from sera.tables import with_arm
from sera.trainers import grid
from sera.trainers.presets import warmup_fingerprint


def default_verify_dir() -> Path:
    """Where `verify` trains: its own warm-up and runs, apart from the stored point's."""
    return runstore.RUNS_ROOT / "verify"


def compare(name: str, ks=(1, 8, 32, 128), store_dir=None) -> pd.DataFrame:
    """Predicted beside measured gain over the point's control (MaxRL unless its point.toml
    names another) per arm and K: the prediction written before the runs, and the stored runs'
    paired gain with its Student-t interval over seeds. A K above the answers the point drew
    per held-out prompt is left out."""
    control = points.point(name).control
    final = stored_table(name, "final", store_dir).assign(method=lambda t: t["arm"])
    ks = tuple(k for k in ks if k <= final["n"].min())
    if (Path(store_dir or runstore.STUDY_DIR) / name / runstore.PREDICTION).exists():
        prediction = read_prediction(name, store_dir)
    else:
        prediction = pd.DataFrame(columns=["arm", "k", "gain", "low", "high", "seeds_needed"])
    rows = []
    for treatment in sorted(set(final["method"]) - {control}):
        measured = paired_gain(final, treatment, control, by=(), ks=ks)
        for _, m in measured.iterrows():
            match = prediction[(prediction["arm"] == treatment) & (prediction["k"] == m["k"])]
            predicted = match.iloc[0] if len(match) else None
            rows.append({"arm": treatment, "k": int(m["k"]),
                         "predicted": np.nan if predicted is None else predicted["gain"],
                         "predicted_low": np.nan if predicted is None else predicted["low"],
                         "predicted_high": np.nan if predicted is None else predicted["high"],
                         "measured": m["gain"], "low": m["low"], "high": m["high"],
                         "seeds": int(m["seeds"]), "per_seed": m["per_seed"]})
    return pd.DataFrame(rows, columns=["arm", "k", "predicted", "predicted_low", "predicted_high",
                                       "measured", "low", "high", "seeds", "per_seed"])


def compare_points(names, ks=(1, 8, 32, 128), store_dir=None) -> pd.DataFrame:
    """`compare` for every confirmation point of `names` that has stored runs, with a point
    column (a frontier point, which adds cells to a sweep, is read by sera.studies.frontier)."""
    folder = Path(store_dir or runstore.STUDY_DIR)
    parts = [compare(name, ks, store_dir).assign(point=name) for name in names
             if (folder / name / runstore.stored_file("final")).exists()
             and getattr(points.POINTS.get(name), "kind", "point") == "point"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["point", "arm", "k"])


def status(names=None, store_dir=None) -> pd.DataFrame:
    """One row per point: runs stored of runs planned, their wall time in hours, and the command
    that runs (or resumes) the rest."""
    rows = []
    for name in names or list(points.POINTS):
        folder = Path(store_dir or runstore.STUDY_DIR) / name
        summary = stored(name, store_dir) if (folder / runstore.SUMMARY).exists() else {}
        point = points.point(name)
        planned = summary.get("runs_planned")
        if planned is None:
            planned = (len(point.configs())
                       if point.seeds is not None or (folder / runstore.PREDICTION).exists()
                       else None)
        rows.append({"point": name, "task": point.task, "n0": point.config.n0,
                     "steps": point.config.steps, "runs stored": summary.get("runs_stored", 0),
                     "runs planned": planned,
                     "wall hours": round(summary.get("wall_s", 0.0) / 3600, 2),
                     "predicted": (folder / runstore.PREDICTION).exists(),
                     "command": f"python -m sera.confirm run {name}"})
    return pd.DataFrame(rows)


def verdicts(names=None, arms=("sera", "sera-rate", "sera-rate-safeguard"), store_dir=None
             ) -> pd.DataFrame:
    """One row per stored point, arm and K (Pass@1 and the K the point was sized for): the
    point's task, N0, steps and seeds, the predicted and measured gain over the point's control
    in points with the measured 95% interval over seeds, and `sera.results.verdict`. An arm
    with fewer than MIN_SEEDS paired seeds stored (a point whose runs are still landing) gets no
    row."""
    names = list(points.POINTS) if names is None else list(names)
    table = compare_points(names, store_dir=store_dir)
    rows = []
    for row in table.itertuples():
        point = points.point(row.point)
        if row.arm not in arms or row.k not in (1, point.k) or row.seeds < MIN_SEEDS:
            continue
        rows.append({"point": row.point, "task": point.task, "n0": point.config.n0,
                     "steps": point.config.steps, "arm": row.arm, "against": point.control,
                     "seeds": row.seeds, "k": row.k, "predicted": round(100 * row.predicted, 1),
                     "measured": f"{100 * row.measured:+.1f} [{100 * row.low:+.1f}, "
                                 f"{100 * row.high:+.1f}]",
                     "verdict": verdict(row.measured, row.low, row.high, row.predicted)})
    return pd.DataFrame(rows)


def verify(point: Point, seeds: int = 2, runs_dir=None, ks=(1, 8, 32, 128),
           progress: bool = True) -> pd.DataFrame:
    """Rerun the first `seeds` seeds of every arm of a stored point on this machine, from a
    warm-up trained here, and say whether the stored conclusions hold (`results.reproduction`
    per arm against MaxRL and K). Nothing is stored: the runs stay in runs_dir/<point>/
    (runs_dir: default_verify_dir())."""
    if not (runstore.STUDY_DIR / point.name / runstore.stored_file("final")).exists():
        raise FileNotFoundError(f"{point.name!r} has no stored runs to verify")
    seeds = int(seeds)
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    configs = [c for c in point.configs(runs_dir or default_verify_dir()) if c.seed < seeds]
    grid.work_through(configs, builder(point.task), progress=progress,
                      desc=f"verify {point.name}")
    new = with_arm(pd.concat([pd.read_csv(Path(c.out) / runstore.FINAL) for c in configs],
                             ignore_index=True))
    old = load(point.name).final
    parts = [reproduction(old.assign(method=old["arm"]), new.assign(method=new["arm"]),
                          treatment, point.control, ks=ks).assign(arm=treatment)
             for treatment in sorted(set(new["arm"]) - {point.control})]
    table = pd.concat(parts, ignore_index=True)
    table["warmup"] = warmup_fingerprint(configs[0])
    table["stored_warmup"] = stored(point.name).get(runstore.WARMUP_FINGERPRINT)
    return table


def print_verification(name: str, table: pd.DataFrame) -> None:
    """The verdicts of `verify`, one line per arm and K, then the summary."""
    print(f"{name}: {table['seeds'].iloc[0]} new seeds per arm against the stored runs "
          f"(warm-up {table['warmup'].iloc[0]}, stored {table['stored_warmup'].iloc[0]})")
    shown = table.assign(new_per_seed=table["new_per_seed"].map(
        lambda g: " ".join(f"{x:+.3f}" for x in g)))
    print(shown[["arm", "k", "verdict", "stored_gain", "stored_low", "stored_high",
                 "new_gain", "new_per_seed", "inside", "same_sign", "reproduces",
                 "identical"]].round(3).to_string(index=False))
    held = int(table["reproduces"].sum())
    print(f"{held} of {len(table)} stored conclusions reproduce (same sign of the gain, every "
          f"new seed inside the stored spread); {int(table['identical'].min())} of "
          f"{table['seeds'].iloc[0]} seeds bitwise identical to the stored runs")
