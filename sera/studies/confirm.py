"""Confirmation runs of notebook 08's regime map, stored so that readers need not rerun them.

A point is one sequence-study configuration (task, N0, steps, prompts), the methods and the seeds,
registered in data/study/<point>/point.toml (`load_point`) before its runs, with what each arm is
expected to do: a new point is a new folder, no code.
Its prediction, SERA - MaxRL Pass@K from `sera.studies.simulate` started from the point's own
difficulty profile, is written before any run, with the number of seeds a power calculation asks
for. The runs then train (or resume) one after another, and after each finished run the tables of
every finished run are stored compressed under data/study/<point>/ with their provenance (commit,
command, torch and thread settings, instruction set, wall time):

    python -m sera.confirm list
    python -m sera.confirm predict math-n0-4   # data/study/math-n0-4/prediction.csv, once
    python -m sera.confirm run math-n0-4       # trains in build/runs/confirm/, stores each run
    python -m sera.confirm show math-n0-4      # predicted beside measured

Two processes may run the same point or sweep side by side, one per core: each trains only the
runs the other holds (`sera.runstore.claim`), and the stored tables are replaced whole, never half
written. `make figures PROFILE=study` runs every point this way (hours on two cores);
notebooks 05, 07 and 08 read the stored tables with `load` and `compare`.
"""

from __future__ import annotations

import dataclasses
import importlib
import math as pymath
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sera import runstore
from sera.methods import METHODS
from sera.results import paired_gain, reproduction
from sera.studies.simulate import (
    SimulationConfig,
    calibrate_lr,
    in_processes,
    posterior_draws,
    predicted_gain,
    regime_map_over,
    simulate,
)
from sera.tables import TABLES, Results, arm, with_arm
from sera.trainers import grid
from sera.trainers.presets import PRESETS, SequenceConfig, warmup_fingerprint

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

STUDY_DIR = runstore.STUDY_DIR
RUNS_DIR = runstore.RUNS_ROOT / "confirm"
VERIFY_DIR = runstore.RUNS_ROOT / "verify"
"""Where `verify` trains: its own warm-up and runs, apart from the stored point's."""
SEED_SD = 0.05
"""Seed-to-seed standard deviation of a SERA - MaxRL Pass@1 difference, measured on six seeds
of the math `fast` preset; the power calculation's only measured input."""
POWER = 2.5
"""A predicted gain counts as resolvable when it is POWER standard errors over the seeds."""
MIN_SEEDS = 6
PROFILE_SAMPLES = 32
"""Rollouts per prompt behind each stored profile.csv."""


def builder(task: str):
    """The `build` of a point's task (a key of sera.trainers.presets.PRESETS): its trainer
    sera.trainers.<task>, and torch with it, loads only when a run is built, so that reading and
    comparing stored runs never loads a model."""
    if task not in PRESETS:
        raise ValueError(f"task must be one of {tuple(PRESETS)}, got {task!r}")
    return importlib.import_module(f"sera.trainers.{task}").build


@dataclass(frozen=True)
class Arm:
    """One arm of a point: a method, its u_min (None: the method's own) and, for an arm that
    tests a mechanism, the settings it changes, e.g. (("allocator.n_min", 3),) or
    (("agg", "seqnorm"),). An arm with changes carries a tag that names it in the tables
    (`name`: "sera-rate nmin-3") and in its run folders."""

    method: str
    u_min: float | None = None
    changes: tuple[tuple[str, object], ...] = ()
    tag: str = ""
    expect: str = ""
    """What the arm is expected to do, written down before its runs."""
    every_seed: bool = False
    """Run at every seed of the point, as the treatment is, not only at its side_seeds: an arm
    confirmed with the seeds the power calculation sets."""

    @property
    def name(self) -> str:
        base = self.method if self.u_min is None else f"{self.method} (u_min {self.u_min:g})"
        return f"{base} {self.tag}" if self.tag else base

    def config(self, base: SequenceConfig, seed: int) -> SequenceConfig:
        """The run of this arm at seed, from the point's configuration."""
        nested = {k.split(".", 1)[1]: v for k, v in self.changes if k.startswith("allocator.")}
        fields = {k: v for k, v in self.changes if not k.startswith("allocator.")}
        allocator = dataclasses.replace(base.allocator, u_min=self.u_min, **nested)
        return dataclasses.replace(base, method=self.method, seed=seed, allocator=allocator,
                                   **fields)


@dataclass(frozen=True)
class Point:
    """One confirmation point: a task's configuration, the arms and the seeds."""

    name: str
    task: str
    config: SequenceConfig
    seeds: int | None
    """None: as many as the power calculation on the prediction asks for (at least MIN_SEEDS)."""
    arms: tuple[Arm | tuple[str, float | None], ...] = (
        Arm("maxrl"), Arm("sera-rate"), Arm("sera-rate-safeguard"), Arm("grpo"))
    """The arms; a (method, u_min) pair stands for Arm(method, u_min)."""
    treatment: str = "sera-rate"
    """The arm compared with MaxRL for the seeds: the power calculation sizes it, and it runs
    every seed (the other arms side_seeds)."""
    why: str = ""
    side_seeds: int | None = None
    """Seeds of the arms other than maxrl and the treatment (None: the point's seeds), so that a
    power-calculated seed count for the main comparison does not multiply every arm."""
    k: int = 1
    """The K whose predicted gain the power calculation sizes the seeds for."""
    calibrate_on: str | None = None
    """A point with stored MaxRL runs on the same task and learning rate. Set, the prediction
    takes the simulator's step size from those runs' Pass@1 rise, the seed-to-seed SD at K
    from their per-seed gains, and reads the profile as counts (`calibrated_prediction`).
    None: step size 1 and the profile as measured, as the first points were predicted."""

    def __post_init__(self):
        arms = tuple(a if isinstance(a, Arm) else Arm(*a) for a in self.arms)
        object.__setattr__(self, "arms", arms)
        names = [a.name for a in arms]
        if len(set(names)) != len(names):
            raise ValueError(f"point {self.name!r} names an arm twice: {names}")

    def configs(self, runs_dir=RUNS_DIR) -> list[SequenceConfig]:
        """Every run's configuration, all from one warm-up in runs_dir/<point>/warmup."""
        return [config for config, _ in self.runs(runs_dir)]

    def runs(self, runs_dir=RUNS_DIR) -> list[tuple[SequenceConfig, Arm]]:
        """(configuration, arm) of every run, seeds outermost."""
        folder = Path(runs_dir) / self.name
        base = dataclasses.replace(self.config, warmup_dir=str(folder / "warmup"), progress=False)
        out = []
        for seed in range(n_seeds(self)):
            for a in self.arms:
                side = not a.every_seed and (
                    a.u_min is not None or a.changes or a.method not in ("maxrl", self.treatment))
                if side and self.side_seeds is not None and seed >= self.side_seeds:
                    continue
                config = a.config(base, seed)
                label = grid.run_label(config)
                label = f"{a.tag}_{label}" if a.tag else label
                out.append((dataclasses.replace(config, out=str(folder / label)), a))
        return out


def load_point(path) -> Point:
    """A point from its registration, data/study/<point>/point.toml: the task and the preset its
    configuration starts from, the changes to it, the seeds (a number, or "power" for the power
    calculation's), the arms with what each was expected to do, and why the point exists."""
    path = Path(path)
    with open(path, "rb") as handle:
        entry = tomllib.load(handle)
    task = entry["task"]
    if task not in PRESETS:
        raise ValueError(f"{path}: task must be one of {tuple(PRESETS)}, got {task!r}")
    config = dataclasses.replace(PRESETS[task][entry["preset"]], **entry.get("config", {}))
    arms = tuple(Arm(arm["method"], arm.get("u_min"), tuple(arm.get("changes", {}).items()),
                     arm.get("tag", ""), arm.get("expect", ""), arm.get("every_seed", False))
                 for arm in entry["arms"])
    seeds = entry["seeds"]
    return Point(path.parent.name, task, config, seeds=None if seeds == "power" else seeds,
                 arms=arms, treatment=entry.get("treatment", "sera-rate"),
                 why=entry.get("why", ""), side_seeds=entry.get("side_seeds"),
                 k=entry.get("k", 1), calibrate_on=entry.get("calibrate_on"))


def registered(study_dir=None) -> dict[str, Point]:
    """Every point registered under the study folder (a point.toml each), by name."""
    folder = Path(study_dir or runstore.STUDY_DIR)
    return {path.parent.name: load_point(path) for path in sorted(folder.glob("*/point.toml"))}


POINTS = registered()
"""The registered points: adding a folder with a point.toml adds a point."""


def n_seeds(p: Point) -> int:
    """The point's seeds: fixed, or the power calculation's for SERA's predicted Pass@1 gain."""
    if p.seeds is not None:
        return p.seeds
    path = STUDY_DIR / p.name / "prediction.csv"
    if not path.exists():
        raise FileNotFoundError(f"{p.name} takes its seeds from its prediction: run "
                                f"`python -m sera.confirm predict {p.name}` first")
    table = read_prediction(p.name)
    rows = table[(table["arm"] == p.treatment) & (table["k"] == p.k)]
    return int(rows["seeds_needed"].iloc[0])


def point(name: str) -> Point:
    if name not in POINTS:
        raise KeyError(f"no confirmation point {name!r}; known: {', '.join(POINTS)}")
    return POINTS[name]


# ----------------------------------------------------------------------------- prediction

def seeds_needed(gain: float, sd: float = SEED_SD, power: float = POWER) -> int:
    """Seeds for a predicted gain to sit `power` standard errors above zero over the seeds, given
    the seed-to-seed sd of a difference; MIN_SEEDS where no gain is predicted."""
    if not gain > 0:
        return MIN_SEEDS
    return max(MIN_SEEDS, pymath.ceil((power * sd / gain) ** 2))


def profile(p: Point, runs_dir=RUNS_DIR, samples: int = PROFILE_SAMPLES) -> np.ndarray:
    """The point's difficulty profile: each training prompt's success probability under its
    warm-up, measured once (warming up first if needed) and stored beside its tables."""
    from sera.trainers.profiles import measure_profile

    path = STUDY_DIR / p.name / "profile.csv"
    if path.exists():
        return pd.read_csv(path, comment="#")["p"].to_numpy()
    config = dataclasses.replace(p.config, warmup_dir=str(Path(runs_dir) / p.name / "warmup"),
                                 out=str(Path(runs_dir) / p.name / "profile"), device="cpu")
    started = time.perf_counter()
    values = measure_profile(config, builder(p.task), samples)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# {p.name}: each training prompt's success probability under the warm-up, "
              f"{samples} samples each; {time.perf_counter() - started:.0f} s\n")
    table = pd.DataFrame({"prompt": np.arange(values.size), "p": values, "samples": samples})
    runstore.write_text(path, header + table.to_csv(index=False))
    return values


def predict(p: Point, repetitions: int = 24, lr: float = 1.0, runs_dir=RUNS_DIR,
            overwrite: bool = False) -> pd.DataFrame:
    """The simulator's SERA - MaxRL (and safeguarded SERA - MaxRL) Pass@K at the point's final
    step, from its own difficulty profile, with the seeds the power calculation asks for;
    written to data/study/<point>/prediction.csv once (a prediction is made before the runs and
    not rewritten unless overwrite)."""
    path = STUDY_DIR / p.name / "prediction.csv"
    if path.exists() and not overwrite:
        return read_prediction(p.name)
    if p.calibrate_on is not None:
        out = calibrated_prediction(p, repetitions, runs_dir)
    else:
        # one repetition per row, seeds 0, 1, ...: the same runs as regime_map's repetitions
        out = _arm_gains(p, np.tile(profile(p, runs_dir), (repetitions, 1)), lr)
        out["seeds_needed"] = [seeds_needed(g) for g in out["gain"]]
        out.attrs["how"] = f"{repetitions} repetitions, lr {lr}, from profile.csv"
    header = (f"# {p.name}: predicted gain over MaxRL (sera.studies.simulate, {out.attrs['how']}"
              f"), written {time.strftime('%Y-%m-%d %H:%M')} before the runs\n")
    runstore.write_text(path, header + out.round(4).to_csv(index=False))
    return out


def _arm_gains(p: Point, starts, lr: float) -> pd.DataFrame:
    """Simulated SERA - MaxRL and safeguarded SERA - MaxRL at the point's final step, one
    repetition per row of `starts` (profiles), at step size lr."""
    config = p.config
    ks = tuple(sorted({k for k in (1, 8, 32, 128) if k <= config.final_samples}
                      | {config.final_samples, p.k}))
    parts = []
    for a in p.arms:
        if METHODS[a.method].allocator != "waterline" or a.changes:
            continue  # the simulator has no model: an arm that changes the training is not in it
        base = SimulationConfig(batch_size=config.batch_size, eval_every=config.steps, lr=lr,
                                ks=ks, allocator=dataclasses.replace(config.allocator,
                                                                     u_min=a.u_min))
        table = regime_map_over(starts, [config.n0], config.steps, ("maxrl", a.method), base)
        gains = predicted_gain(table, treatment=a.method)
        gains = gains[gains["step"] == config.steps]
        parts.append(gains[["k", "gain", "low", "high"]].assign(arm=a.name))
    return pd.concat(parts, ignore_index=True)


def seed_sd(name: str, k: int, arm_name: str = "sera-rate", store_dir=None) -> float:
    """Seed-to-seed standard deviation of the arm's gain over MaxRL at K in a point's stored
    runs (per-seed paired differences over the held-out prompts)."""
    row = compare(name, ks=(k,), store_dir=store_dir)
    row = row[(row["arm"] == arm_name) & (row["k"] == k)]
    if row.empty:
        raise ValueError(f"{name} has no stored {arm_name} gain at K = {k}")
    return float(np.std(row["per_seed"].iloc[0], ddof=1))


def calibration(p: Point, runs_dir=RUNS_DIR, draws: int = 4) -> dict:
    """The simulator's step size for p's task: the one at which MaxRL's simulated Pass@1 rises,
    from the calibration point's profile and over its steps, by as much as its stored MaxRL
    runs rose on the held-out prompts (mean over seeds, step 0 to the last evaluation)."""
    ref = point(p.calibrate_on)
    metrics = load(ref.name).metrics
    rows = metrics[(metrics["arm"] == "maxrl") & (metrics["metric"] == "val_pass")
                   & (metrics["k"] == 1)]
    last = int(rows["step"].max())
    rise = rows[rows["step"] == last]["value"].mean() - rows[rows["step"] == 0]["value"].mean()
    p0 = posterior_draws(profile(ref, runs_dir), PROFILE_SAMPLES, 1)[0]
    config = SimulationConfig(method="maxrl", n0=ref.config.n0, batch_size=ref.config.batch_size,
                              steps=last, allocator=ref.config.allocator)
    lr = calibrate_lr(p0, config, float(rise), repetitions=draws)
    return {"on": ref.name, "rise": round(float(rise), 4), "steps": last, "lr": round(lr, 4)}


def calibrated_prediction(p: Point, repetitions: int = 24, runs_dir=RUNS_DIR) -> pd.DataFrame:
    """predict() for a point with calibrate_on, computed and not written: the simulator at the
    calibrated step size, each repetition from its own posterior draw of the point's profile, and
    the seeds sized with the seed-to-seed SD measured at each K on the calibration point; how it
    was made in attrs["how"]."""
    cal = calibration(p, runs_dir)
    draws = posterior_draws(profile(p, runs_dir), PROFILE_SAMPLES, repetitions)
    out = _arm_gains(p, draws, cal["lr"])
    # an arm the calibration point did not run takes the SD of that point's treatment
    ran = set(load(cal["on"]).final["arm"])
    out["sd"] = [seed_sd(cal["on"], int(k), a if a in ran else point(cal["on"]).treatment)
                 for k, a in zip(out["k"], out["arm"], strict=True)]
    out["seeds_needed"] = [seeds_needed(g, sd) for g, sd in zip(out["gain"], out["sd"],
                                                                 strict=True)]
    out.attrs["how"] = (f"{repetitions} repetitions, each from its own Jeffreys-posterior draw "
                        f"of profile.csv; step size {cal['lr']} calibrated on {cal['on']}'s "
                        f"MaxRL Pass@1 rise of {cal['rise']} over {cal['steps']} steps; sd: "
                        f"seed-to-seed SD of the gain at K measured on {cal['on']}")
    return out


def read_prediction(name: str) -> pd.DataFrame:
    return pd.read_csv(STUDY_DIR / name / "prediction.csv", comment="#")


# ----------------------------------------------------------------------------- runs and storage

def run(p: Point, runs_dir=RUNS_DIR, progress: bool = True) -> Results:
    """Train (or resume, or read back) every run of the point, storing the finished runs' tables
    after each one lands, so that a session that ends mid-way loses only the run in progress.
    A point without a stored prediction is predicted first, which says so: it may train the
    warm-up and measure the difficulty profile before any run."""
    if not (STUDY_DIR / p.name / "prediction.csv").exists():
        print(f"{p.name}: no stored prediction; predicting it first (this may train the warm-up "
              f"and measure the difficulty profile)", flush=True)
    predict(p, runs_dir=runs_dir)
    restore(p, runs_dir)
    check_warmup(p, runs_dir)
    grid.run_grid(p.configs(runs_dir), builder(p.task), progress=progress,
                  after_each=lambda: store(p, runs_dir), share=True, desc=p.name)
    return load(p.name)


def warmup_of(folders, p: Point) -> str | None:
    """The one warm-up fingerprint the runs (and the point's stored summary) start from, or None
    where none was recorded (runs stored before fingerprints were kept). Raises ValueError when
    two differ: runs from different warm-ups are different experiments and are never pooled."""
    seen: dict[str, str] = {}
    summary = STUDY_DIR / p.name / "provenance.json"
    kept = stored(p.name).get("warmup") if summary.exists() else None
    if kept:
        seen[kept] = f"the runs stored in {summary.parent}"
    for folder in folders:
        for record in runstore.records(folder):
            value = record.get("warmup")
            if value:
                seen.setdefault(value, f"run {Path(folder).name}")
    if len(seen) > 1:
        (a, first), (b, second) = list(seen.items())[:2]
        raise ValueError(
            f"point {p.name!r} would pool runs from two warm-ups: {first} started from warm-up "
            f"{a}, {second} from {b} (another machine or library version trains another "
            f"warm-up). Keep them apart: register a separate point (a copy of its point.toml in "
            f"a new folder) for the new warm-up's runs, or train them from the warm-up the "
            f"stored runs used")
    return next(iter(seen), None)


def store(p: Point, runs_dir=RUNS_DIR) -> int:
    """Write the point's finished runs to data/study/<point>/; returns how many. Runs stored
    earlier whose folders are gone (a fresh checkout) are restored first, so they are kept.
    Refuses (ValueError) to pool runs whose warm-ups differ (`warmup_of`)."""
    restore(p, runs_dir)
    runs = [(Path(c.out), a) for c, a in p.runs(runs_dir) if runstore.finished(c.out)]
    folders = [folder for folder, _ in runs]
    # an arm that changes the training is told apart by an arm column, not by the run keys
    columns = {folder: {"arm": a.name} for folder, a in runs} \
        if any(a.tag for a in p.arms) else None
    summary = {"point": p.name, "task": p.task, "why": p.why, "seeds": n_seeds(p),
               "arms": [[a.method, a.u_min] if not a.tag else
                        {"name": a.name, "method": a.method, "u_min": a.u_min,
                         "changes": dict(a.changes), "expect": a.expect} for a in p.arms],
               "runs_planned": len(p.configs(runs_dir)),
               "rerun": f"python -m sera.confirm run {p.name}"}
    warmup = warmup_of(folders, p)
    if warmup is not None:
        summary["warmup"] = warmup
        keep_warmup(p, runs_dir)
    return runstore.store_runs(folders, STUDY_DIR / p.name, summary, columns=columns)


def keep_warmup(p: Point, runs_dir=RUNS_DIR) -> bool:
    """Copy the point's warm-up (its weights, tokenizer and warmup.json, about 2 MB) beside its
    stored runs, once: `restore` puts it back on a fresh checkout, so that any machine extends
    the point from the same weights (runs on another CPU then differ from these as another
    seed would, where a warm-up trained there would start another experiment)."""
    source, target = Path(runs_dir) / p.name / "warmup", STUDY_DIR / p.name / "warmup"
    if (target / "warmup.json").exists() or not (source / "warmup.json").exists():
        return False
    runstore.copy_folder(source, target)
    return True


def check_warmup(p: Point, runs_dir=RUNS_DIR) -> None:
    """Before any run trains: the warm-up the point's runs would start from here (trained now
    if missing) is the one its stored runs started from, or ValueError (`warmup_of`)."""
    stored_fingerprint = stored(p.name).get("warmup")
    if stored_fingerprint is None:
        return
    config = p.configs(runs_dir)[0]
    builder(p.task)(config)  # loads the warm-up, or trains it where there is none
    here = warmup_fingerprint(config)
    if here != stored_fingerprint:
        kept = (STUDY_DIR / p.name / "warmup" / "warmup.json").exists()
        way = (f"delete {Path(config.warmup_dir)} to start from the copy stored beside the runs"
               if kept else "no copy of it is stored beside the runs, so runs from here are "
                            "another experiment: register a separate point (a copy of its "
                            "point.toml in a new folder of the study folder) for them")
        raise ValueError(f"point {p.name!r}: the warm-up here ({here}, in "
                         f"{Path(config.warmup_dir)}) is not the one its stored runs started "
                         f"from ({stored_fingerprint}); {way}")


def restore(p: Point, runs_dir=RUNS_DIR) -> int:
    """Write the point's stored runs back as finished run folders under runs_dir where they are
    missing (a fresh checkout has the stored tables but no run folders), so that they are
    neither trained again nor dropped by the next store, and the stored warm-up where there is
    one (`keep_warmup`). Returns how many runs were restored."""
    folder = STUDY_DIR / p.name
    local_warmup = Path(runs_dir) / p.name / "warmup"
    if (folder / "warmup" / "warmup.json").exists() and not (local_warmup / "warmup.json").exists():
        runstore.copy_folder(folder / "warmup", local_warmup)
    # keyed by the run's folder name (older stores name the run without its point)
    records = {record["run"].split("/")[-1]: record
               for record in runstore.stored_summary(folder).get("runs", [])}
    missing = [(c, a) for c, a in p.runs(runs_dir)
               if Path(c.out).name in records and not runstore.finished(c.out)]
    if not missing:
        return 0
    tables = runstore.stored_tables(folder)
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
    return Results(*(_stored_table(name, t, store_dir) for t in TABLES))


def _stored_table(name: str, table: str, store_dir=None) -> pd.DataFrame:
    """One stored table of a point, with its arm column."""
    folder = Path(store_dir or STUDY_DIR) / name
    if not (folder / "final.csv.gz").exists():
        raise FileNotFoundError(f"no stored runs for {name!r} in {folder}; run "
                                f"`python -m sera.confirm run {name}` (hours on two cores)")
    return with_arm(pd.read_csv(folder / f"{table}.csv.gz"))


def stored(name: str, store_dir=None) -> dict:
    """The stored provenance summary of a point (runs, wall time, command to rerun)."""
    return runstore.stored_summary(Path(store_dir or STUDY_DIR) / name)


def compare(name: str, ks=(1, 8, 32, 128), store_dir=None) -> pd.DataFrame:
    """Predicted beside measured gain over MaxRL per arm and K: the prediction written before
    the runs, and the stored runs' paired gain with its Student-t interval over seeds."""
    final = _stored_table(name, "final", store_dir).assign(method=lambda t: t["arm"])
    prediction = read_prediction(name) if (Path(store_dir or STUDY_DIR) / name
                                           / "prediction.csv").exists() \
        else pd.DataFrame(columns=["arm", "k", "gain", "low", "high", "seeds_needed"])
    rows = []
    for treatment in sorted(set(final["method"]) - {"maxrl"}):
        measured = paired_gain(final, treatment, "maxrl", by=(), ks=ks)
        for _, m in measured.iterrows():
            match = prediction[(prediction["arm"] == treatment) & (prediction["k"] == m["k"])]
            predicted = match.iloc[0] if len(match) else None
            rows.append({"arm": treatment, "k": int(m["k"]),
                         "predicted": np.nan if predicted is None else predicted["gain"],
                         "predicted_low": np.nan if predicted is None else predicted["low"],
                         "predicted_high": np.nan if predicted is None else predicted["high"],
                         "measured": m["gain"], "low": m["low"], "high": m["high"],
                         "seeds": int(m["seeds"]), "per_seed": m["per_seed"]})
    return pd.DataFrame(rows)


def simulated_allocations(name: str, repetitions: int = 24, runs_dir=RUNS_DIR,
                          seed: int = 0, lr: float | None = None, processes: int = 1
                          ) -> pd.DataFrame:
    """The simulator's allocations table for every arm of a calibrated point, one repetition per
    Jeffreys-posterior draw of the point's profile, at the step size its prediction used (the
    draws and seeds of `calibrated_prediction`); with an arm column. lr: that step size
    when the caller already has it from `calibration`, which is otherwise rerun. processes > 1
    simulates the repetitions in that many worker processes (the same table)."""
    p = point(name)
    if p.calibrate_on is None:
        raise ValueError(f"{name} was predicted at the map's step size; simulated_allocations "
                         f"reads points calibrated on stored runs")
    lr = calibration(p, runs_dir)["lr"] if lr is None else lr
    draws = posterior_draws(profile(p, runs_dir), PROFILE_SAMPLES, repetitions,
                            seed)
    config = p.config
    tasks = []
    for a in p.arms:
        if a.changes:
            continue  # the simulator has no model: an arm that changes the training is not in it
        base = SimulationConfig(method=a.method, n0=config.n0, batch_size=config.batch_size,
                                steps=config.steps, eval_every=config.steps, lr=lr, ks=(1,),
                                allocator=dataclasses.replace(config.allocator, u_min=a.u_min))
        tasks += [(draw, dataclasses.replace(base, seed=seed + r)) for r, draw in enumerate(draws)]
    table = pd.concat(in_processes(_allocations, tasks, processes), ignore_index=True)
    return table.assign(arm=arm(table))


def _allocations(draw, config: SimulationConfig) -> pd.DataFrame:
    return simulate(draw, config, tables=("allocations",)).allocations


def verify(p: Point, seeds: int = 2, runs_dir=VERIFY_DIR, ks=(1, 8, 32, 128),
           progress: bool = True) -> pd.DataFrame:
    """Rerun the first `seeds` seeds of every arm of a stored point on this machine, from a
    warm-up trained here, and say whether the stored conclusions hold (`results.reproduction`
    per arm against MaxRL and K). Nothing is stored: the runs stay in runs_dir/<point>/."""
    if not (STUDY_DIR / p.name / "final.csv.gz").exists():
        raise FileNotFoundError(f"{p.name!r} has no stored runs to verify")
    seeds = int(seeds)
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    configs = [c for c in p.configs(runs_dir) if c.seed < seeds]
    grid.run_grid(configs, builder(p.task), progress=progress, share=True,
                  desc=f"verify {p.name}")
    new = with_arm(pd.concat([pd.read_csv(Path(c.out) / runstore.FINAL) for c in configs],
                             ignore_index=True))
    old = load(p.name).final
    parts = [reproduction(old.assign(method=old["arm"]), new.assign(method=new["arm"]),
                          treatment, "maxrl", ks=ks).assign(arm=treatment)
             for treatment in sorted(set(new["arm"]) - {"maxrl"})]
    table = pd.concat(parts, ignore_index=True)
    table["warmup"] = warmup_fingerprint(configs[0])
    table["stored_warmup"] = stored(p.name).get("warmup")
    return table


def status(names=None, store_dir=None) -> pd.DataFrame:
    """One row per point: runs stored of runs planned, their wall time in hours, and the command
    that runs (or resumes) the rest."""
    rows = []
    for name in names or list(POINTS):
        folder = Path(store_dir or STUDY_DIR) / name
        summary = stored(name, store_dir) if (folder / "provenance.json").exists() else {}
        p = point(name)
        planned = summary.get("runs_planned")
        if planned is None:
            planned = (len(p.configs())
                       if p.seeds is not None or (folder / "prediction.csv").exists() else None)
        rows.append({"point": name, "task": p.task, "n0": p.config.n0,
                     "steps": p.config.steps, "runs stored": summary.get("runs_stored", 0),
                     "runs planned": planned,
                     "wall hours": round(summary.get("wall_s", 0.0) / 3600, 2),
                     "predicted": (folder / "prediction.csv").exists(),
                     "command": f"python -m sera.confirm run {name}"})
    return pd.DataFrame(rows)


def compare_points(names, ks=(1, 8, 32, 128), store_dir=None) -> pd.DataFrame:
    """`compare` for every point of `names` that has stored runs, with a point column."""
    parts = [compare(name, ks, store_dir).assign(point=name) for name in names
             if (Path(store_dir or STUDY_DIR) / name / "final.csv.gz").exists()]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["point", "arm", "k"])


def verdicts(names=None, arms=("sera", "sera-rate", "sera-rate-safeguard"), store_dir=None
             ) -> pd.DataFrame:
    """One row per stored point, arm and K (Pass@1 and the K the point was sized for): the
    point's task, N0, steps and seeds, the predicted and measured gain over MaxRL in points with
    the measured 95% interval over seeds, and the verdict: ahead or behind where the interval
    excludes zero, level otherwise, and whether the prediction lies inside the interval. An arm
    with fewer than MIN_SEEDS paired seeds stored (a point whose runs are still landing) gets no
    verdict."""
    names = list(POINTS) if names is None else list(names)
    table = compare_points(names, store_dir=store_dir)
    rows = []
    for row in table.itertuples():
        p = point(row.point)
        if row.arm not in arms or row.k not in (1, p.k) or row.seeds < MIN_SEEDS:
            continue
        side = "ahead" if row.low > 0 else "behind" if row.high < 0 else "level"
        held = row.low <= row.predicted <= row.high
        rows.append({"point": row.point, "task": p.task, "n0": p.config.n0,
                     "steps": p.config.steps, "arm": row.arm, "seeds": row.seeds, "k": row.k,
                     "predicted": round(100 * row.predicted, 1),
                     "measured": f"{100 * row.measured:+.1f} [{100 * row.low:+.1f}, "
                                 f"{100 * row.high:+.1f}]",
                     "verdict": f"{side}, {'as predicted' if held else 'not as predicted'}"})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["list", "predict", "run", "store", "show", "verify",
                                           "verdicts"])
    parser.add_argument("points", nargs="*", help="point names (default: all)")
    parser.add_argument("--runs-dir", default=None,
                        help=f"where runs train (default {RUNS_DIR}; verify: {VERIFY_DIR})")
    parser.add_argument("--seeds", type=int, default=2, help="verify: seeds per arm to rerun")
    args = parser.parse_args(argv)
    if args.runs_dir is None:
        args.runs_dir = str(VERIFY_DIR if args.action == "verify" else RUNS_DIR)
    names = args.points or list(POINTS)
    if args.action == "verdicts":
        print(verdicts(names).to_markdown(index=False))
        return 0
    for name in names:
        p = point(name)
        if args.action == "list":
            seeds = p.seeds or "power-calculated"
            print(f"{name}: {p.task}, N0 {p.config.n0}, {p.config.steps} steps, {seeds} seeds x "
                  f"{len(p.arms)} arms; {p.why}")
        elif args.action == "predict":
            print(name, "\n", predict(p, runs_dir=args.runs_dir).round(3).to_string(index=False))
        elif args.action == "run":
            run(p, args.runs_dir)
            print(compare(name).round(3).to_string(index=False))
        elif args.action == "store":
            print(f"{name}: {store(p, args.runs_dir)} runs stored")
        elif args.action == "verify":
            print_verification(name, verify(p, args.seeds, args.runs_dir))
        else:
            show(name)
    return 0


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


def show(name: str) -> None:
    """Print the point's status, then predicted beside measured gains, or the prediction alone
    while no seed has both MaxRL and a treatment stored."""
    print(status([name]).drop(columns="command").to_string(index=False))
    stored_runs = (STUDY_DIR / name / "final.csv.gz").exists()
    table = compare(name) if stored_runs else pd.DataFrame()
    if table.empty:
        print("no paired runs stored yet; the prediction (predicted gain over MaxRL):")
        if (STUDY_DIR / name / "prediction.csv").exists():
            print(read_prediction(name).round(3).to_string(index=False))
        return
    print(table.drop(columns="per_seed").round(3).to_string(index=False))


if __name__ == "__main__":
    import sys

    sys.exit(main())
