"""A point's prediction, written before its runs: the simulator on its profile, and its seeds."""

from __future__ import annotations

import dataclasses
import math as pymath
import time

import numpy as np
import pandas as pd

from sera import runstore
from sera.methods import METHODS
from sera.results import MIN_SEEDS
from sera.studies.confirm import points
from sera.studies.confirm.comparison import compare
from sera.studies.confirm.points import Point, builder, read_prediction
from sera.studies.confirm.storage import load
from sera.studies.simulate import (
    SimulationConfig,
    calibrate_lr,
    in_processes,
    posterior_draws,
    predicted_gain,
    regime_map_over,
    simulate,
)
from sera.tables import arm

SEED_SD = 0.05
"""Seed-to-seed standard deviation of a SERA - MaxRL Pass@1 difference, measured on six seeds
of the math `fast` preset; the power calculation's only measured input."""
POWER = 2.5
"""A predicted gain counts as resolvable when it is POWER standard errors over the seeds."""
PROFILE_SAMPLES = 32
"""Rollouts per prompt behind each stored profile.csv."""


def seeds_needed(gain: float, sd: float = SEED_SD, power: float = POWER) -> int:
    """Seeds for a predicted gain to sit `power` standard errors above zero over the seeds, given
    the seed-to-seed sd of a difference; MIN_SEEDS where no gain is predicted."""
    if not gain > 0:
        return MIN_SEEDS
    return max(MIN_SEEDS, pymath.ceil((power * sd / gain) ** 2))


def profile(point: Point, runs_dir=None, samples: int = PROFILE_SAMPLES) -> np.ndarray:
    """The point's difficulty profile: each training prompt's success probability under its
    warm-up, measured once (warming up first if needed) and stored beside its tables."""
    from sera.trainers.profiles import measure_profile

    path = runstore.STUDY_DIR / point.name / runstore.PROFILE
    if path.exists():
        return pd.read_csv(path, comment="#")["p"].to_numpy()
    folder = point.folder(runs_dir)
    config = dataclasses.replace(point.config, warmup_dir=str(runstore.warmup_dir(folder)),
                                 out=str(folder / "profile"), device="cpu")
    started = time.perf_counter()
    values = measure_profile(config, builder(point.task), samples)
    header = (f"# {point.name}: each training prompt's success probability under the warm-up, "
              f"{samples} samples each; {time.perf_counter() - started:.0f} s\n")
    table = pd.DataFrame({"prompt": np.arange(values.size), "p": values, "samples": samples})
    runstore.write_text(path, header + table.to_csv(index=False))
    return values


def predict(point: Point, repetitions: int = 24, lr: float = 1.0, runs_dir=None,
            overwrite: bool = False) -> pd.DataFrame:
    """The simulator's SERA - MaxRL (and safeguarded SERA - MaxRL) Pass@K at the point's final
    step, from its own difficulty profile (measured first where none is stored, which may train
    the warm-up), with the seeds the power calculation asks for; written to
    data/study/<point>/prediction.csv once (a prediction is made before the runs and not
    rewritten unless overwrite)."""
    path = runstore.STUDY_DIR / point.name / runstore.PREDICTION
    if path.exists() and not overwrite:
        return read_prediction(point.name)
    if point.calibrate_on is not None:
        out = calibrated_prediction(point, repetitions, runs_dir)
    else:
        # one repetition per row, seeds 0, 1, ...: the same runs as regime_map's repetitions
        out = arm_gains(point, np.tile(profile(point, runs_dir), (repetitions, 1)), lr)
        out["seeds_needed"] = [seeds_needed(g) for g in out["gain"]]
        out.attrs["how"] = f"{repetitions} repetitions, lr {lr}, from profile.csv"
    header = (f"# {point.name}: predicted gain over {point.control} (sera.studies.simulate, "
              f"{out.attrs['how']}), written {time.strftime('%Y-%m-%d %H:%M')} before the runs\n")
    runstore.write_text(path, header + out.round(4).to_csv(index=False))
    return out


def arm_gains(point: Point, starts, lr: float) -> pd.DataFrame:
    """Each simulated waterline arm minus the point's control (MaxRL unless registered
    otherwise) at the point's final step, one repetition per row of `starts` (profiles), at
    step size lr."""
    config = point.config
    ks = tuple(sorted({k for k in (1, 8, 32, 128) if k <= config.final_samples}
                      | {config.final_samples, point.k}))
    control = next(a.method for a in point.arms if a.name == point.control)
    parts = []
    for a in point.arms:
        method = METHODS[a.method]
        if a.name == point.control or method.allocator != "waterline" or a.changes \
                or method.evidence_step:
            # the simulator has no model of an arm that changes the training or sets its own
            # step (it takes plain gradient steps on logits, with no optimizer to scale)
            continue
        base = SimulationConfig(batch_size=config.batch_size, eval_every=config.steps, lr=lr,
                                ks=ks, allocator=dataclasses.replace(config.allocator,
                                                                     u_min=a.u_min))
        table = regime_map_over(starts, [config.n0], config.steps, (control, a.method), base)
        gains = predicted_gain(table, treatment=a.method, control=control)
        gains = gains[gains["step"] == config.steps]
        parts.append(gains[["k", "gain", "low", "high"]].assign(arm=a.name))
    if not parts:  # every arm changes the training: the registration's own predictions stand
        return pd.DataFrame(columns=["k", "gain", "low", "high", "arm"])
    return pd.concat(parts, ignore_index=True)


def seed_sd(name: str, k: int, arm_name: str = "sera-rate", store_dir=None) -> float:
    """Seed-to-seed standard deviation of the arm's gain over the control at K in a point's
    stored runs (per-seed paired differences over the held-out prompts)."""
    row = compare(name, ks=(k,), store_dir=store_dir)
    row = row[(row["arm"] == arm_name) & (row["k"] == k)]
    if row.empty:
        raise ValueError(f"{name} has no stored {arm_name} gain at K = {k}")
    return float(np.std(row["per_seed"].iloc[0], ddof=1))


def calibration(point: Point, runs_dir=None, draws: int = 4) -> dict:
    """The simulator's step size for the point's task: the one at which MaxRL's simulated Pass@1
    rises, from the calibration point's profile and over its steps, by as much as its stored
    MaxRL runs rose on the held-out prompts (mean over seeds, step 0 to the last evaluation)."""
    ref = points.point(point.calibrate_on)
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


def calibrated_prediction(point: Point, repetitions: int = 24, runs_dir=None) -> pd.DataFrame:
    """predict() for a point with calibrate_on, computed and not written: the simulator at the
    calibrated step size, each repetition from its own posterior draw of the point's profile, and
    the seeds sized with the seed-to-seed SD measured at each K on the calibration point; how it
    was made in attrs["how"]."""
    cal = calibration(point, runs_dir)
    draws = posterior_draws(profile(point, runs_dir), PROFILE_SAMPLES, repetitions)
    out = arm_gains(point, draws, cal["lr"])
    # an arm the calibration point did not run takes the SD of that point's treatment
    ran = set(load(cal["on"]).final["arm"])
    fallback = points.point(cal["on"]).treatment
    out["sd"] = [seed_sd(cal["on"], int(k), a if a in ran else fallback)
                 for k, a in zip(out["k"], out["arm"], strict=True)]
    out["seeds_needed"] = [seeds_needed(g, sd) for g, sd in zip(out["gain"], out["sd"],
                                                                 strict=True)]
    out.attrs["how"] = (f"{repetitions} repetitions, each from its own Jeffreys-posterior draw "
                        f"of profile.csv; step size {cal['lr']} calibrated on {cal['on']}'s "
                        f"MaxRL Pass@1 rise of {cal['rise']} over {cal['steps']} steps; sd: "
                        f"seed-to-seed SD of the gain at K measured on {cal['on']}")
    return out


def simulated_allocations(name: str, repetitions: int = 24, runs_dir=None,
                          seed: int = 0, lr: float | None = None, processes: int = 1
                          ) -> pd.DataFrame:
    """The simulator's allocations table for every arm of a calibrated point, one repetition per
    Jeffreys-posterior draw of the point's profile, at the step size its prediction used (the
    draws and seeds of `calibrated_prediction`); with an arm column. lr: that step size
    when the caller already has it from `calibration`, which is otherwise rerun. processes > 1
    simulates the repetitions in that many worker processes (the same table)."""
    point = points.point(name)
    if point.calibrate_on is None:
        raise ValueError(f"{name} was predicted at the map's step size; simulated_allocations "
                         f"reads points calibrated on stored runs")
    lr = calibration(point, runs_dir)["lr"] if lr is None else lr
    draws = posterior_draws(profile(point, runs_dir), PROFILE_SAMPLES, repetitions, seed)
    config = point.config
    tasks = []
    for a in point.arms:
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
