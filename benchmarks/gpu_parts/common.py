"""What the parts of the GPU check share: the registry of parts, step timing against SERA's clock
(sera.timing), the loop's checks of SERA's bookkeeping, and the shared loop run to a deadline."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

import sera
from sera import timing
from sera.trainers import loop


@dataclass(frozen=True)
class Part:
    """One part of the check: run(cpu, budget, work) -> its report; budget: seconds of timed
    steps on a GPU."""

    name: str
    run: Callable
    budget: float


PARTS: dict[str, Part] = {}


def part(name: str, budget: float):
    """Register the decorated function as the part `name`; a name is registered once."""

    def register(function):
        if name in PARTS:
            raise ValueError(f"the GPU check part {name!r} is registered twice")
        PARTS[name] = Part(name, function, budget)
        return function

    return register


class TimeUp(Exception):
    """A part's wall-clock budget ran out; what it measured so far is reported."""


class Steps:
    """Step times and SERA seconds per step, with a deadline that counts only after `minimum`
    steps (enough for the checks to see an allocated step on a slow or loaded machine)."""

    def __init__(self, clock: timing.Clock, budget: float, minimum: int = 0):
        self.clock, self.deadline = clock, time.perf_counter() + budget
        self.minimum = minimum
        self.times: list[float] = []
        self.sera: list[float] = []
        self._start = self._sera0 = None

    def begin(self):
        sync()
        self._start, self._sera0 = time.perf_counter(), self.clock.seconds

    def end(self):
        sync()
        now = time.perf_counter()
        self.times.append(now - self._start)
        self.sera.append(self.clock.seconds - self._sera0)
        self._start, self._sera0 = now, self.clock.seconds
        return now > self.deadline and len(self.times) >= self.minimum

    def summary(self, skip: int = 1) -> dict:
        """Times without the first `skip` steps (compilation and allocator warm-up)."""
        times = np.array(self.times[skip:] or self.times)
        sera_s = np.array(self.sera[skip:] or self.sera)
        return {"steps": len(self.times), "step_s_median": float(np.median(times)),
                "step_s_p90": float(np.quantile(times, 0.9)),
                "sera_share": float(sera_s.sum() / times.sum()),
                "sera_ms_per_step": float(1000 * sera_s.mean()),
                "measured_s": float(times.sum())}


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def memory() -> dict:
    if not torch.cuda.is_available():
        return {"peak_gib": None}
    return {"peak_gib": torch.cuda.max_memory_allocated() / 2**30}


def check(checks: dict, name: str, ok: bool, detail: str = "") -> None:
    checks[name] = {"ok": bool(ok), "detail": detail}


# ----------------------------------------------------------------------------- loop parts

def loop_checks(run: loop.Run, n_prompts: int, batch: int) -> dict:
    """SERA's checks on a run of the shared loop, from its allocation records."""
    config = run.config
    table = run.allocation_table()
    checks: dict = {}
    n_min, n_max = config.allocator.n_min, config.allocator.n_max_for(config.n0)
    per_step = table.groupby("step").agg(prompts=("prompt", "size"), rollouts=("rollouts", "sum"),
                                         low=("rollouts", "min"), high=("rollouts", "max"),
                                         allocated=("allocated", "first"))
    check(checks, "budget", (per_step["rollouts"] == per_step["prompts"] * config.n0).all(),
           f"{len(per_step)} steps, rollouts per step = prompts x n0 = "
           f"{sorted(set((per_step['prompts'] * config.n0).tolist()))}")
    check(checks, "bounds", ((per_step["low"] >= n_min) & (per_step["high"] <= n_max)).all(),
           f"counts from {int(per_step['low'].min())} to {int(per_step['high'].max())}, "
           f"bounds [{n_min}, {n_max}]")
    allocated = per_step[per_step["allocated"]]
    epoch_steps = -(-n_prompts // batch)
    check(checks, "allocates_after_first_epoch",
           len(per_step) <= epoch_steps or len(allocated) == len(per_step) - epoch_steps,
           f"{len(allocated)} of {len(per_step)} steps allocated from estimates; the first "
           f"{epoch_steps} (one epoch) are uniform")
    mismatches = 0
    for step in allocated.index:
        rows = table[table["step"] == step]
        expected = sera.allocate(rows["estimate"].to_numpy(), len(rows) * config.n0,
                                 n_min=n_min, n_max=n_max, n0=config.n0,
                                 method=config.allocator.rounding).counts
        mismatches += int(not np.array_equal(expected, rows["rollouts"].to_numpy()))
    check(checks, "counts_equal_allocate", mismatches == 0,
           f"{len(allocated) - mismatches} of {len(allocated)} allocated steps equal "
           f"sera.allocate on the estimates they read")
    check(checks, "history_folds", run.history.epoch == run.epoch,
           f"history folded {run.history.epoch} times in {run.epoch} epoch boundaries")
    return checks


def fit_to_deadline(study, budget: float, clock: timing.Clock, minimum: int = 0):
    """Run the shared loop on `study` until its steps or the budget end (not before `minimum`
    steps); returns (run, steps)."""
    steps = Steps(clock, budget, minimum)
    captured = {}

    def callback(run):
        captured["run"] = run
        if steps.end():
            raise TimeUp

    steps.begin()
    with contextlib.suppress(TimeUp):
        loop.fit(study, callback)
    return captured["run"], steps
