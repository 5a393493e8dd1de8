"""Confirmation points, registered as data: data/study/<point>/point.toml, and the runs of each."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sera import runstore
from sera.trainers import grid, presets
from sera.trainers.presets import SequenceConfig, sequence_tasks


def default_runs_dir() -> Path:
    """Where the points train unless told otherwise: build/runs/confirm."""
    return runstore.RUNS_ROOT / "confirm"


def builder(task: str):
    """The `build` of a point's task (a sequence task of sera.trainers.presets.TASKS): its
    trainer, and torch with it, loads only when a run is built, so that reading and comparing
    stored runs never loads a model."""
    tasks = sequence_tasks()
    if task not in tasks:
        raise ValueError(f"task must be one of {tuple(tasks)}, got {task!r}")
    return presets.builder(task)


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
    against: str = ""
    """Another arm (by name) this one was registered against, besides the point's control."""

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
    """None: as many as the power calculation on the prediction asks for (at least
    sera.results.MIN_SEEDS)."""
    arms: tuple[Arm | tuple[str, float | None], ...] = (
        Arm("maxrl"), Arm("sera-rate"), Arm("sera-rate-safeguard"), Arm("grpo"))
    """The arms; a (method, u_min) pair stands for Arm(method, u_min)."""
    treatment: str = "sera-rate"
    """The arm compared with the control for the seeds: the power calculation sizes it, and it
    runs every seed (the other arms side_seeds)."""
    control: str = "maxrl"
    """The method every other arm is compared with (its arm must be registered): the
    comparator of the tables, the verdicts, the prediction and the page."""
    why: str = ""
    side_seeds: int | None = None
    """Seeds of the arms other than the control and the treatment (None: the point's seeds), so
    that a power-calculated seed count for the main comparison does not multiply every arm."""
    k: int = 1
    """The K whose predicted gain the power calculation sizes the seeds for."""
    kind: str = "point"
    """"point" (a confirmation point), or "frontier": cells added to a stored sweep (`sweep`),
    read by sera.studies.frontier rather than as a sweep of their own."""
    sweep: str | None = None
    """The stored sweep whose warm-up, stack and cells a "frontier" point extends."""
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
        if self.control not in names:
            raise ValueError(f"point {self.name!r}: its control {self.control!r} is not one of "
                             f"its arms {names}")

    def folder(self, runs_dir=None) -> Path:
        """The point's folder of run folders and its warm-up (runs_dir: default_runs_dir())."""
        return Path(runs_dir or default_runs_dir()) / self.name

    def configs(self, runs_dir=None) -> list[SequenceConfig]:
        """Every run's configuration, all from one warm-up in runs_dir/<point>/warmup."""
        return [config for config, _ in self.runs(runs_dir)]

    def runs(self, runs_dir=None) -> list[tuple[SequenceConfig, Arm]]:
        """(configuration, arm) of every run, seeds outermost."""
        folder = self.folder(runs_dir)
        base = dataclasses.replace(self.config, warmup_dir=str(runstore.warmup_dir(folder)),
                                   progress=False)
        out = []
        for seed in range(n_seeds(self)):
            for a in self.arms:
                main = a.name == self.control or a.method == self.treatment
                side = not a.every_seed and (a.u_min is not None or a.changes or not main)
                if side and self.side_seeds is not None and seed >= self.side_seeds:
                    continue
                config = a.config(base, seed)
                label = grid.run_label(config)
                label = f"{a.tag}_{label}" if a.tag else label
                out.append((dataclasses.replace(config, out=str(folder / label)), a))
        return out


def load_point(path, entry: dict | None = None) -> Point:
    """A point from its registration, data/study/<point>/point.toml: the task and the preset its
    configuration starts from, the changes to it, the seeds (a number, or "power" for the power
    calculation's), the arms with what each was expected to do, the control they are compared
    with (MaxRL unless `control` names another arm), and why the point exists. entry: the file
    as already read (runstore.read_registration)."""
    path = Path(path)
    entry = entry if entry is not None else runstore.read_registration(path)
    task, tasks = entry["task"], sequence_tasks()
    if task not in tasks:
        raise ValueError(f"{path}: task must be one of {tuple(tasks)}, got {task!r}")
    config = dataclasses.replace(tasks[task].presets[entry["preset"]], **entry.get("config", {}))
    arms = tuple(Arm(arm["method"], arm.get("u_min"), tuple(arm.get("changes", {}).items()),
                     arm.get("tag", ""), arm.get("expect", ""), arm.get("every_seed", False),
                     arm.get("against", ""))
                 for arm in entry["arms"])
    seeds = entry["seeds"]
    return Point(path.parent.name, task, config, seeds=None if seeds == "power" else seeds,
                 arms=arms, treatment=entry.get("treatment", "sera-rate"),
                 control=entry.get("control", "maxrl"),
                 why=entry.get("why", ""), side_seeds=entry.get("side_seeds"),
                 k=entry.get("k", 1), calibrate_on=entry.get("calibrate_on"),
                 kind=entry.get("kind", "point"), sweep=entry.get("sweep"))


def registered(study_dir=None) -> dict[str, Point]:
    """Every point registered under the study folder (a point.toml each), by name. A
    registration that names the `study` module reading it (the digits check:
    sera.studies.digits) is no confirmation point and is left to that module."""
    folder = Path(study_dir or runstore.STUDY_DIR)
    entries = {path: runstore.read_registration(path)
               for path in sorted(folder.glob(f"*/{runstore.REGISTRATION}"))}
    return {path.parent.name: load_point(path, entry) for path, entry in entries.items()
            if "study" not in entry}


POINTS = registered()
"""The registered points: adding a folder with a point.toml adds a point."""


def point(name: str) -> Point:
    """The registered point of that name."""
    if name not in POINTS:
        raise KeyError(f"no confirmation point {name!r}; known: {', '.join(POINTS)}")
    return POINTS[name]


def read_prediction(name: str, store_dir=None) -> pd.DataFrame:
    """A point's prediction as written before its runs (data/study/<point>/prediction.csv)."""
    return pd.read_csv(Path(store_dir or runstore.STUDY_DIR) / name / runstore.PREDICTION,
                       comment="#")


def n_seeds(point: Point) -> int:
    """The point's seeds: fixed, or the power calculation's for the treatment's predicted gain
    at the point's K (stored in its prediction.csv)."""
    if point.seeds is not None:
        return point.seeds
    if not (runstore.STUDY_DIR / point.name / runstore.PREDICTION).exists():
        raise FileNotFoundError(f"{point.name} takes its seeds from its prediction: run "
                                f"`python -m sera.confirm predict {point.name}` first")
    table = read_prediction(point.name)
    rows = table[(table["arm"] == point.treatment) & (table["k"] == point.k)]
    return int(rows["seeds_needed"].iloc[0])
