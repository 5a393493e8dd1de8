"""A point's runs: trained one after another, stored under data/study/<point>/, read back."""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from sera import runstore
from sera.studies.confirm.points import POINTS, Point, builder, n_seeds, point
from sera.tables import TABLES, Results, with_arm
from sera.trainers import grid
from sera.trainers.presets import warmup_fingerprint

POINT_TABLES = (*TABLES, "rollouts")
"""What a point stores of each run: the three tables, and the per-response table of the runs that
record one (sera.tables.ROLLOUT_COLUMNS, with the run keys and arm), so that a sentence about
lengths, rewards or group sizes can be checked from stored data."""


def run(point: Point, runs_dir=None, progress: bool = True, arms=None) -> Results:
    """Train (or resume, or read back) every run of the point, storing the finished runs' tables
    after each one lands, so that a session that ends mid-way loses only the run in progress.
    arms: the names of the arms to train now, in that order, each through all its seeds (a
    sweep's cells nearest each method's best step first); None: every arm, seeds outermost.
    Refuses (FileNotFoundError) a point without a stored prediction: predicting may train the
    warm-up and measure the difficulty profile, which `python -m sera.confirm predict` does
    on its own, before any run."""
    if not (runstore.STUDY_DIR / point.name / runstore.PREDICTION).exists():
        raise FileNotFoundError(
            f"{point.name} has no stored prediction, and a point's prediction is written before "
            f"its runs: run `python -m sera.confirm predict {point.name}` first (it may train "
            f"the warm-up and measure the difficulty profile)")
    restore(point, runs_dir)
    check_warmup(point, runs_dir)
    configs = point.configs(runs_dir)
    if arms is not None:
        runs = point.runs(runs_dir)
        configs = [c for name in _known_arms(point, arms) for c, a in runs if a.name == name]
    grid.work_through(configs, builder(point.task), progress=progress,
                      after_each=lambda: store(point, runs_dir), desc=point.name)
    return load(point.name)


def _known_arms(point: Point, arms) -> list[str]:
    """The arm names asked for, each checked against the point's arms (ValueError naming them)."""
    names = [a.name for a in point.arms]
    unknown = [name for name in arms if name not in names]
    if unknown:
        raise ValueError(f"point {point.name!r} has no arm {unknown}; its arms: {names}")
    return list(arms)


def warmup_of(folders, point: Point) -> str | None:
    """The one warm-up fingerprint the runs (and the point's stored summary) start from, or None
    where none was recorded (runs stored before fingerprints were kept). Raises ValueError when
    two differ: runs from different warm-ups are different experiments and are never pooled."""
    seen: dict[str, str] = {}
    summary = runstore.STUDY_DIR / point.name / runstore.SUMMARY
    kept = stored(point.name).get(runstore.WARMUP_FINGERPRINT) if summary.exists() else None
    if kept:
        seen[kept] = f"the runs stored in {summary.parent}"
    for folder in folders:
        for record in runstore.records(folder):
            value = record.get(runstore.WARMUP_FINGERPRINT)
            if value:
                seen.setdefault(value, f"run {Path(folder).name}")
    if len(seen) > 1:
        (a, first), (b, second) = list(seen.items())[:2]
        raise ValueError(
            f"point {point.name!r} would pool runs from two warm-ups: {first} started from "
            f"warm-up {a}, {second} from {b} (another machine or library version trains another "
            f"warm-up). Keep them apart: register a separate point (a copy of its point.toml in "
            f"a new folder) for the new warm-up's runs, or train them from the warm-up the "
            f"stored runs used")
    return next(iter(seen), None)


def store(point: Point, runs_dir=None) -> int:
    """Write the point's finished runs to data/study/<point>/; returns how many. Runs stored
    earlier whose folders are gone (a fresh checkout) are restored first, so they are kept.
    Refuses (ValueError) to pool runs whose warm-ups differ (`warmup_of`)."""
    restore(point, runs_dir)
    runs = [(Path(c.out), a) for c, a in point.runs(runs_dir) if runstore.finished(c.out)]
    folders = [folder for folder, _ in runs]
    # an arm that changes the training is told apart by an arm column, not by the run keys
    columns = {folder: {"arm": a.name} for folder, a in runs} \
        if any(a.tag for a in point.arms) else None
    summary = {"point": point.name, "task": point.task, "why": point.why,
               "seeds": n_seeds(point),
               "arms": [[a.method, a.u_min] if not a.tag else
                        {"name": a.name, "method": a.method, "u_min": a.u_min,
                         "changes": dict(a.changes), "expect": a.expect} for a in point.arms],
               "runs_planned": len(point.configs(runs_dir)),
               "rerun": f"python -m sera.confirm run {point.name}"}
    warmup = warmup_of(folders, point)
    if warmup is not None:
        summary[runstore.WARMUP_FINGERPRINT] = warmup
        keep_warmup(point, runs_dir)
    return runstore.store_runs(folders, runstore.STUDY_DIR / point.name, summary,
                               tables=POINT_TABLES, columns=columns)


def keep_warmup(point: Point, runs_dir=None) -> bool:
    """Copy the point's warm-up (its weights, tokenizer and warmup.json, about 2 MB) beside its
    stored runs, once: `restore` puts it back on a fresh checkout, so that any machine extends
    the point from the same weights (runs on another CPU then differ from these as another
    seed would, where a warm-up trained there would start another experiment)."""
    source = runstore.warmup_dir(point.folder(runs_dir))
    if not runstore.has_warmup(source):
        return False
    return runstore.seed_warmup(runstore.warmup_dir(runstore.STUDY_DIR / point.name), source)


def check_warmup(point: Point, runs_dir=None) -> None:
    """Before any run trains: the warm-up the point's runs would start from here (trained now
    if missing) is the one its stored runs started from, or ValueError (`warmup_of`)."""
    stored_fingerprint = stored(point.name).get(runstore.WARMUP_FINGERPRINT)
    if stored_fingerprint is None:
        return
    config = point.configs(runs_dir)[0]
    builder(point.task)(config)  # loads the warm-up, or trains it where there is none
    here = warmup_fingerprint(config)
    if here != stored_fingerprint:
        kept = runstore.has_warmup(runstore.warmup_dir(runstore.STUDY_DIR / point.name))
        way = (f"delete {Path(config.warmup_dir)} to start from the copy stored beside the runs"
               if kept else "no copy of it is stored beside the runs, so runs from here are "
                            "another experiment: register a separate point (a copy of its "
                            "point.toml in a new folder of the study folder) for them")
        raise ValueError(f"point {point.name!r}: the warm-up here ({here}, in "
                         f"{Path(config.warmup_dir)}) is not the one its stored runs started "
                         f"from ({stored_fingerprint}); {way}")


def restore(point: Point, runs_dir=None) -> int:
    """Write the point's stored runs back as finished run folders under runs_dir where they are
    missing (a fresh checkout has the stored tables but no run folders), so that they are
    neither trained again nor dropped by the next store, and the stored warm-up where there is
    one (`keep_warmup`). Returns how many runs were restored."""
    folder = runstore.STUDY_DIR / point.name
    kept = runstore.warmup_dir(folder)
    if runstore.has_warmup(kept):
        runstore.seed_warmup(runstore.warmup_dir(point.folder(runs_dir)), kept)
    # keyed by the run's folder name (older stores name the run without its point)
    records = {record["run"].split("/")[-1]: record
               for record in runstore.stored_summary(folder).get("runs", [])}
    missing = [(c, a) for c, a in point.runs(runs_dir)
               if Path(c.out).name in records and not runstore.finished(c.out)]
    if not missing:
        return 0
    tables = runstore.stored_tables(folder, POINT_TABLES)
    for config, a in missing:
        keys = config.keys()
        rows = {name: table[_of_run(table, {**keys, "arm": a.name} if "arm" in table.columns
                                    else keys)].drop(columns="arm", errors="ignore")
                for name, table in tables.items()}
        record = records[Path(config.out).name]
        runstore.write_finished(config.out, rows, record["config"], record["provenance"])
    return len(missing)


def _of_run(table: pd.DataFrame, keys: dict) -> pd.Series:
    """Which rows of a stored table belong to the run with these keys (u_min None is empty)."""
    mask = pd.Series(True, index=table.index)
    for name, value in keys.items():
        column = table[name]
        mask &= column.isna() if value is None else column == value
    return mask


def load(name: str, store_dir=None) -> Results:
    """A point's stored tables (metrics, final, allocations) as the trainers return them."""
    return Results(*(stored_table(name, t, store_dir) for t in TABLES))


def stored_table(name: str, table: str, store_dir=None) -> pd.DataFrame:
    """One stored table of a point, with its arm column."""
    folder = Path(store_dir or runstore.STUDY_DIR) / name
    if not (folder / runstore.stored_file("final")).exists():
        raise FileNotFoundError(f"no stored runs for {name!r} in {folder}; run "
                                f"`python -m sera.confirm run {name}` (hours on two cores)")
    return with_arm(pd.read_csv(folder / runstore.stored_file(table)))


def stored(name: str, store_dir=None) -> dict:
    """The stored provenance summary of a point (runs, wall time, command to rerun)."""
    return runstore.stored_summary(Path(store_dir or runstore.STUDY_DIR) / name)


def stored_points() -> list[str]:
    """The registered confirmation points with stored runs (a final table in
    data/study/<point>/); frontier points, which add cells to a sweep, are read by
    sera.studies.frontier."""
    return [name for name, p in POINTS.items() if p.kind == "point"
            and (runstore.STUDY_DIR / name / runstore.stored_file("final")).exists()]


TRAJECTORY = ("train_reward", "token_entropy", "response_length")
"""The per-step training metrics `continued` matches run against run."""


@functools.cache
def _trajectory(name: str) -> pd.DataFrame:
    """A point's per-step training metrics (TRAJECTORY), one row per (arm, method, seed, step,
    metric), from its stored metrics."""
    metrics = stored_table(name, "metrics")
    return metrics[metrics["metric"].isin(TRAJECTORY)][
        ["arm", "method", "seed", "step", "metric", "value"]]


def continued(name: str) -> dict[str, list[tuple[str, str, int]]]:
    """Per arm of the point, the (point, arm, steps) of the longest other stored points, no longer
    than this one, whose runs it repeats or continues (the longest only: they hold the shorter
    ones): the same warm-up (its fingerprint), the same method,
    and for every seed both have the same training reward, token entropy and response length to
    the last bit at every step the other ran. Through those steps they are the same runs, not a
    second sample."""
    mine = stored(name).get(runstore.WARMUP_FINGERPRINT)
    steps = point(name).config.steps
    found: dict[str, list] = {}
    if mine is None:
        return found
    ours = _trajectory(name)
    key = ["seed", "step", "metric"]
    for other in stored_points():
        shorter = point(other).config.steps
        if other == name or shorter > steps or \
                stored(other).get(runstore.WARMUP_FINGERPRINT) != mine:
            continue
        theirs = _trajectory(other)
        for (arm, method), run in ours[ours["step"] < shorter].groupby(["arm", "method"]):
            run = run.set_index(key)["value"]
            for their_arm, part in theirs[theirs["method"] == method].groupby("arm"):
                if _same_runs(run, part.set_index(key)["value"]):
                    found.setdefault(arm, []).append((other, their_arm, shorter))
    # the longest runs continued only: they hold the shorter ones
    return {arm: [p for p in places if p[2] == max(q[2] for q in places)]
            for arm, places in found.items()}


def _same_runs(run: pd.Series, part: pd.Series) -> bool:
    """Whether every value of `part` (by seed, step and metric) is in `run`, equal to the last
    bit (a missing value equals a missing value)."""
    both = run.index.intersection(part.index)
    return bool(len(both)) and len(both) == len(part) and \
        run[both].fillna(-1.0).equals(part[both].fillna(-1.0))
