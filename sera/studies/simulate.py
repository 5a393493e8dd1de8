"""A model-free simulator of finite-rollout training on independent prompts: where SERA can help.

Each training prompt q is a tabular policy with its own logit theta_q, p_q = sigmoid(theta_q).
A simulated run goes through the package's own loop (`sera.trainers.loop.fit`): the same epochs
and batches, the method's plan from `SuccessHistory` (or its sequential protocol), Bernoulli
rewards, the method's advantages and its weights n0 / N_q. The update is the policy gradient of
the weighted loss for this parameterisation,

    theta_q += lr * (B / M) * w_q * sum_i A_i (r_i - p_q),

with B the prompts and M the responses of the update, so that under uniform counts a prompt
moves by lr times its group's mean of A_i (r_i - p_q); for MaxRL that mean has expectation
kappa(p, N) (1 - p) (`expected_update`, checked in tests/test_simulate.py). Pass@K is measured on
the training prompts themselves.

What it leaves out, on purpose: prompts share no parameters (a real model's update on one prompt
moves the others, and held-out prompts improve only through that sharing), responses have no length
(token-mean aggregation weighs long responses more), the optimizer is plain gradient ascent on
logits (no Adam, no clipping), and the learning rate's scale is the simulator's own. It predicts the
sign and rough size of SERA - MaxRL from the difficulty profile, N0, n_min and the number of epochs;
the real tasks confirm or refute it (notebooks/08_when_sera_helps.ipynb). The shared parameters it
leaves out are what its Pass@1 predictions miss: on the long maze runs it predicted SERA ahead
at Pass@1 where the real runs put it behind, on held-out and training mazes alike, the mazes whose
budget SERA left unchanged included (`sera.studies.diagnosis`; the numbers are in
docs/results.md and notebook 08).

Difficulty profiles (each prompt's success probability before RL) are measured from the
studies' starting models by `sera.trainers.profiles` and stored in data/difficulty_profiles.csv.
A simulated run lives in memory (`loop.train_in_memory`): no folder, no checkpoint, no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from sera import _checks
from sera.fidelity import kappa
from sera.passk import pass_at_k_analytic
from sera.results import t_half_width
from sera.tables import TABLES, Results
from sera.trainers import loop
from sera.trainers.config import RunConfig
from sera.trainers.profiles import PROFILES_FILE, measure_profiles
from sera.trainers.steps import advantages as method_advantages
from sera.trainers.steps import step_scale

ZERO = 0.05
"""A prompt counts as 'near p = 0' below this success probability (budget-share diagnostic)."""
DIAGNOSTICS = ("zero_share", "mixed_groups", "allocated")
"""The per-step diagnostics a regime map averages up to each evaluation."""


@dataclass(frozen=True)
class SimulationConfig(RunConfig):
    """One simulated run: the method, budget and schedule of RunConfig plus the step size."""

    lr: float = 2.0
    """Step size on the logits (see the module text for the update)."""
    ks: tuple[int, ...] = (1, 8, 32, 128)
    """K values of Pass@K."""
    eval_every: int = 10
    batch_size: int = 16
    n0: int = 4
    steps: int = 40
    progress: bool = False
    min_allocated_share: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks must be positive integers, got {self.ks}")


class SimulatedStudy:
    """Independent Bernoulli prompts with one logit each: the Study the loop runs."""

    def __init__(self, config: SimulationConfig, p0):
        self.config = config
        p0 = _checks.probabilities(np.asarray(p0, dtype=float), "p0")
        if p0.ndim != 1 or p0.size < 1:
            raise ValueError(f"p0 must be a 1-D array of success probabilities, got shape "
                             f"{p0.shape}")
        # Logits stay finite: p exactly 0 or 1 would never move under any gradient.
        self.theta = logit(np.clip(p0, 1e-6, 1 - 1e-6))
        self.n_prompts = p0.size
        self.rng = np.random.default_rng([config.seed, 1])
        self._pool: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (ids, counts, rewards)

    @property
    def p(self) -> np.ndarray:
        return expit(self.theta)

    def p_of(self, ids: np.ndarray) -> np.ndarray:
        """p of the prompts ids only (a step reads a batch, not every prompt)."""
        return expit(self.theta[ids])

    def state_dict(self) -> dict:
        return {"theta": self.theta.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.theta = np.asarray(state["theta"], dtype=float)
        self.rng.bit_generator.state = state["rng"]

    def exact_p(self, ids: np.ndarray) -> np.ndarray:
        return self.p_of(ids)

    def sample(self, run: loop.Run, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        counts = np.asarray(counts, dtype=np.int64)
        rewards = (self.rng.random(int(counts.sum())) < np.repeat(self.p_of(ids), counts))
        rewards = rewards.astype(float)
        self._pool.append((ids, counts, rewards))
        return np.bincount(np.repeat(np.arange(ids.size), counts), rewards, ids.size)

    def _groups(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This step's rollouts of each prompt of ids, in ids' order: (counts, rewards)."""
        pool, self._pool = self._pool, []
        if len(pool) == 1 and np.array_equal(pool[0][0], ids):  # one draw of these prompts
            return pool[0][1], pool[0][2]
        kept: dict[int, list[np.ndarray]] = {}
        for drawn, counts, rewards in pool:
            for q, part in zip(drawn.tolist(), np.split(rewards, np.cumsum(counts)[:-1]),
                               strict=True):
                kept.setdefault(q, []).append(part)
        groups = [np.concatenate(kept.get(q, [np.zeros(0)])) for q in ids.tolist()]
        return np.array([g.size for g in groups], dtype=np.int64), np.concatenate(groups)

    def update(self, run: loop.Run, outcome) -> None:
        ids, allocation = outcome.ids, outcome.allocation
        if ids.size == 0 or allocation is None:
            self._pool = []
            return
        counts, rewards = self._groups(ids)
        kept = counts > 0
        advantages = method_advantages(run.method, rewards, counts[kept], allocation.n0)
        owner = np.repeat(np.arange(ids.size), counts)
        p = self.p_of(ids)
        step = np.bincount(owner, advantages * (rewards - p[owner]), ids.size)
        scale = ids.size / max(int(counts.sum()), 1)
        factor = step_scale(run.method, outcome)  # None: the method scales no step
        lr = self.config.lr * (1.0 if factor is None else factor)
        np.add.at(self.theta, ids, lr * scale * allocation.weights * step)
        if factor is not None:
            run.log("step_scale", factor)
        near_zero = p < ZERO
        run.log("zero_share", counts[near_zero].sum() / max(counts.sum(), 1))
        run.log("zero_prompts", loop.mean(near_zero))

    def evaluate(self, run: loop.Run) -> None:
        p = self.p
        for k in self.config.ks:
            run.log("val_pass", float(pass_at_k_analytic(p, k).mean()), k)

    def finish(self, run: loop.Run) -> pd.DataFrame:
        return pd.DataFrame({"prompt": np.arange(self.n_prompts), "p": self.p})


def expected_update(p, n):
    """E[mean_i A_i (r_i - p)] of one MaxRL group of n rollouts: kappa(p, n) (1 - p), the
    per-visit expected move of the prompt's logit per unit step size under uniform counts."""
    return kappa(p, n) * (1 - np.asarray(p, dtype=float))


def simulate(p0, config: SimulationConfig, repetitions: int = 1, tables=TABLES) -> Results:
    """`repetitions` simulated runs of `config` from the initial success probabilities p0 (one
    per prompt), seeds config.seed, config.seed + 1, ...; the loop's tables, every row keyed by
    its run (the seed column tells repetitions apart). tables: the ones to build (the others
    come back empty)."""
    repetitions = _checks.integer(repetitions, "repetitions", minimum=1)
    return Results.concat([
        loop.train_in_memory(SimulatedStudy(dataclasses.replace(config, seed=config.seed + r),
                                            p0), tables=tables)
        for r in range(repetitions)])


def regime_map(p0, n0s, steps: int, methods=("maxrl", "sera"), repetitions: int = 8,
               base: SimulationConfig | None = None, progress: bool = False,
               processes: int = 1) -> pd.DataFrame:
    """Pass@K along training for every method and N0 from one difficulty profile: one row per
    (method, n0, seed, step, k) with pass@k, plus the budget share on prompts near p = 0 and
    the mixed groups per step averaged up to each evaluation. Same seeds for every method.
    processes > 1 simulates the settings in that many worker processes (the same rows)."""
    base = base or SimulationConfig()
    tasks = [(p0, dataclasses.replace(base, method=m, n0=int(n0), steps=int(steps)), repetitions)
             for n0 in n0s for m in methods]
    return pd.concat(_settings(tasks, processes, progress), ignore_index=True)


def regime_map_over(draws, n0s, steps: int, methods=("maxrl", "sera"),
                    base: SimulationConfig | None = None, processes: int = 1) -> pd.DataFrame:
    """regime_map with one repetition per profile, row r of `draws` (e.g. posterior_draws)
    under seed base.seed + r, so that the spread over repetitions includes the profile's own
    uncertainty."""
    base = base or SimulationConfig()
    draws = np.atleast_2d(np.asarray(draws, dtype=float))
    tasks = [(draw, dataclasses.replace(base, seed=base.seed + r, method=m, n0=int(n0),
                                        steps=int(steps)), 1)
             for r, draw in enumerate(draws) for n0 in n0s for m in methods]
    return pd.concat(_settings(tasks, processes), ignore_index=True)


def _setting(p0, config: SimulationConfig, repetitions: int) -> pd.DataFrame:
    return _trajectory(simulate(p0, config, repetitions, tables=("metrics",)).metrics)


_SIMULATED: dict[tuple, pd.DataFrame] = {}
"""_setting's tables by (profile bytes, config, repetitions), for this process's lifetime: a
setting that several maps share (notebook 08's sweep repeats two of its regime map's profiles) is
simulated once. A setting is a pure function of these keys, so a cached table is the one a new
simulation would give."""


def _settings(tasks: list[tuple], processes: int = 1, progress: bool = False) -> list[pd.DataFrame]:
    """[_setting(*task) for task in tasks], simulating only the settings not seen before."""
    keys = [(np.asarray(p0, dtype=float).tobytes(), config, repetitions)
            for p0, config, repetitions in tasks]
    missing = list(dict.fromkeys(k for k in keys if k not in _SIMULATED))
    task_of = dict(zip(keys, tasks, strict=True))
    new = in_processes(_setting, [task_of[k] for k in missing], processes, progress)
    _SIMULATED.update(zip(missing, new, strict=True))
    return [_SIMULATED[k].copy() for k in keys]


def in_processes(function, tasks: list[tuple], processes: int = 1, progress: bool = False):
    """[function(*task) for task in tasks], in order; over `processes` forked worker processes
    when more than one (each task is seeded on its own, so the results are the same)."""
    processes = _checks.integer(processes, "processes", minimum=1)
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(tasks), desc="simulated settings", leave=False)
    results = []
    if processes == 1 or len(tasks) < 2:
        for task in tasks:
            results.append(function(*task))
            if progress:
                bar.update(1)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("fork")  # no re-import: a worker starts at once
        with ProcessPoolExecutor(min(processes, len(tasks)), mp_context=context) as pool:
            for result in pool.map(function, *zip(*tasks, strict=True)):
                results.append(result)
                if progress:
                    bar.update(1)
    if progress:
        bar.close()
    return results


def _trajectory(metrics: pd.DataFrame) -> pd.DataFrame:
    """Validation Pass@K per evaluation step with the running means of the diagnostics (each
    the mean of the values logged before that step)."""
    keys = ["method", "n0", "seed"]
    passes = metrics[metrics["metric"] == "val_pass"][keys + ["step", "k", "value"]]
    passes = passes.rename(columns={"value": "pass@k"})
    logged = {name: dict(iter(metrics[metrics["metric"] == name].groupby(keys, sort=False)))
              for name in DIAGNOSTICS}
    out = []
    for values, run in passes.groupby(keys, sort=False):
        run = run.copy()
        for name in DIAGNOSTICS:
            series = logged[name].get(values, metrics.iloc[:0])
            order = np.argsort(series["step"].to_numpy(), kind="stable")
            steps, value = series["step"].to_numpy()[order], series["value"].to_numpy()[order]
            before = np.searchsorted(steps, run["step"].to_numpy(), "left")
            run[name] = [float(value[:n].mean()) if n else np.nan for n in before]
        out.append(run)
    return pd.concat(out, ignore_index=True)


def predicted_gain(table: pd.DataFrame, treatment: str = "sera", control: str = "maxrl",
                   confidence: float = 0.95) -> pd.DataFrame:
    """treatment - control Pass@K per (n0, step, k), paired by seed (the same seed starts both
    methods from the same profile), with a Student-t interval over the repetitions; beside it
    each method's budget share on prompts near p = 0 and mixed groups per step."""
    keys = ["n0", "seed", "step", "k"]
    a = table[table["method"] == treatment].set_index(keys)["pass@k"]
    b = table[table["method"] == control].set_index(keys)["pass@k"]
    common = a.index.intersection(b.index)
    diff = (a.loc[common] - b.loc[common]).rename("gain").reset_index()
    grouped = diff.groupby(["n0", "step", "k"])["gain"]
    out = grouped.agg(gain="mean", sd="std", runs="size").reset_index()
    half = t_half_width(out["sd"].to_numpy(), out["runs"].to_numpy(), confidence)
    out["low"], out["high"] = out["gain"] - half, out["gain"] + half
    diagnostics = table.groupby(["method", "n0", "step", "k"])[
        ["zero_share", "mixed_groups"]].mean()
    for method in (treatment, control):
        part = diagnostics.loc[method].add_prefix(f"{method}_")
        out = out.join(part, on=["n0", "step", "k"])
    return out


# ----------------------------------------------------------------------------- calibration

def pass1_rise(p0, config: SimulationConfig, repetitions: int = 4) -> float:
    """Mean rise of Pass@1 on the prompts from step 0 to config.steps over `repetitions` runs
    (seeds config.seed, config.seed + 1, ...)."""
    config = dataclasses.replace(config, eval_every=config.steps, ks=(1,))
    metrics = simulate(p0, config, repetitions, tables=("metrics",)).metrics
    passes = metrics[metrics["metric"] == "val_pass"]
    end = passes[passes["step"] == config.steps]["value"].mean()
    return float(end - passes[passes["step"] == 0]["value"].mean())


def calibrate_lr(p0, config: SimulationConfig, rise: float, repetitions: int = 4,
                 bounds: tuple[float, float] = (0.01, 20.0)) -> float:
    """The simulator's step size at which `config` (MaxRL, say, at a real run's N0, batch size
    and steps) raises Pass@1 on the prompts by `rise`, the rise the real runs measured: a root
    of pass1_rise(lr) - rise found by Brent's method, the same seeds at every step size. This
    ties the simulator's otherwise arbitrary step size to how fast the real model learns."""
    from scipy.optimize import brentq

    rise = _checks.real(rise, "rise", 0.0, 1.0, low_open=True)
    low, high = bounds

    def gap(lr):
        return pass1_rise(p0, dataclasses.replace(config, lr=float(lr)), repetitions) - rise

    if gap(low) > 0 or gap(high) < 0:
        raise ValueError(f"a Pass@1 rise of {rise:.3f} is outside what step sizes {low:g} to "
                         f"{high:g} give from this profile in {config.steps} steps")
    return float(brentq(gap, low, high, xtol=1e-3, rtol=1e-3))


def posterior_draws(p_hat, samples: int, draws: int, seed: int = 0) -> np.ndarray:
    """Profiles consistent with one measured from `samples` rollouts per prompt: `draws` rows,
    each prompt's p drawn from the Jeffreys posterior Beta(s + 1/2, n - s + 1/2) of its s
    successes in n = samples. A prompt measured at 0 of 32 is then hard (p ~ 1/64), not
    impossible: taken as exactly 0 it could never be learned in the simulator, and every
    rollout SERA gave it would be wasted by construction."""
    samples = _checks.integer(samples, "samples", minimum=1)
    draws = _checks.integer(draws, "draws", minimum=1)
    p_hat = _checks.probabilities(np.asarray(p_hat, dtype=float), "p_hat")
    successes = np.round(p_hat * samples)
    if not np.allclose(successes, p_hat * samples, atol=1e-6):
        raise ValueError(f"p_hat must be counts out of {samples} (k / {samples})")
    rng = np.random.default_rng([seed, 2])
    return rng.beta(successes + 0.5, samples - successes + 0.5, size=(draws, p_hat.size))


# ----------------------------------------------------------------------------- profiles

def harder(p0, factor: float) -> np.ndarray:
    """A profile `factor` times harder in odds: p / (1 - p) divided by factor; factor 1 gives p0
    itself (not its round trip through the logit), so a sweep's x1 setting is the profile's own
    and is simulated once."""
    factor = _checks.real(factor, "factor", 0.0, np.inf, low_open=True)
    p0 = np.asarray(p0, dtype=float)
    if factor == 1:
        return p0.copy()
    return expit(logit(np.clip(p0, 1e-9, 1 - 1e-9)) - np.log(factor))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="The simulator's stored inputs.")
    parser.add_argument("--profiles", action="store_true",
                        help=f"measure the difficulty profiles into {PROFILES_FILE.name}")
    parser.add_argument("--samples", type=int, default=32)
    args = parser.parse_args(argv)
    if not args.profiles:
        parser.error("nothing to do: pass --profiles")
    table = measure_profiles(args.samples)
    print(table.groupby("study")["p"].describe().round(3).to_string())
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
