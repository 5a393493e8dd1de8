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
moves the others, and held-out prompts improve only through that sharing), responses have no
length (token-mean aggregation weighs long responses more), the optimizer is plain gradient
ascent on logits (no Adam, no clipping), and the learning rate's scale is the simulator's own.
It predicts the sign and rough size of SERA - MaxRL from the difficulty profile, N0, n_min and
the number of epochs; the real tasks confirm or refute it (notebooks/08_when_sera_helps.ipynb).
The shared parameters it leaves out are what its Pass@1 predictions miss: on 16-epoch maze runs
it predicted SERA 0.9 points ahead at Pass@1, while the real runs put SERA behind on held-out and
on training mazes alike, the mazes whose budget SERA left unchanged included (`sera.diagnosis`).

Difficulty profiles (each prompt's success probability before RL) are measured from the
studies' starting models by `measure_profiles` and stored in data/difficulty_profiles.csv.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from sera import _checks
from sera.fidelity import kappa
from sera.passk import pass_at_k_analytic
from sera.results import t_half_width
from sera.trainers import loop
from sera.trainers.config import RunConfig

PROFILES_FILE = Path(__file__).resolve().parents[1] / "data" / "difficulty_profiles.csv"
ZERO = 0.05
"""A prompt counts as 'near p = 0' below this success probability (budget-share diagnostic)."""


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
        self._pool: dict[int, list[np.ndarray]] = {}

    @property
    def p(self) -> np.ndarray:
        return expit(self.theta)

    def state_dict(self) -> dict:
        return {"theta": self.theta.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.theta = np.asarray(state["theta"], dtype=float)
        self.rng.bit_generator.state = state["rng"]

    def exact_p(self, ids: np.ndarray) -> np.ndarray:
        return self.p[ids]

    def sample(self, run: loop.Run, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        counts = np.asarray(counts, dtype=np.int64)
        rewards = (self.rng.random(int(counts.sum())) < np.repeat(self.p[ids], counts))
        rewards = rewards.astype(float)
        for q, part in zip(ids.tolist(), np.split(rewards, np.cumsum(counts)[:-1]),
                           strict=True):
            self._pool.setdefault(q, []).append(part)
        return np.bincount(np.repeat(np.arange(ids.size), counts), rewards, ids.size)

    def update(self, run: loop.Run, outcome) -> None:
        pool, self._pool = self._pool, {}
        ids, allocation = outcome.ids, outcome.allocation
        if ids.size == 0 or allocation is None:
            return
        groups = [np.concatenate(pool.get(q, [np.zeros(0)])) for q in ids.tolist()]
        counts = np.array([g.size for g in groups])
        kept = counts > 0
        rewards = np.concatenate(groups)
        advantages = run.method.advantages(rewards, sizes=counts[kept])
        owner = np.repeat(np.arange(ids.size), counts)
        p = self.p[ids]
        step = np.bincount(owner, advantages * (rewards - p[owner]), ids.size)
        scale = ids.size / max(int(counts.sum()), 1)
        np.add.at(self.theta, ids, self.config.lr * scale * allocation.weights * step)
        near_zero = p < ZERO
        run.log("zero_share", counts[near_zero].sum() / max(counts.sum(), 1))
        run.log("zero_prompts", near_zero.mean())

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


def simulate(p0, config: SimulationConfig, repetitions: int = 1) -> loop.Results:
    """`repetitions` simulated runs of `config` from the initial success probabilities p0 (one
    per prompt), seeds config.seed, config.seed + 1, ...; the loop's tables, every row keyed by
    its run (the seed column tells repetitions apart)."""
    repetitions = _checks.integer(repetitions, "repetitions", minimum=1)
    parts = []
    with tempfile.TemporaryDirectory() as folder:
        for r in range(repetitions):
            run = dataclasses.replace(config, seed=config.seed + r, out=f"{folder}/{r}",
                                      checkpoint_every=config.steps + 1)
            parts.append(loop.fit(SimulatedStudy(run, p0)))
    return loop.Results.concat(parts)


def regime_map(p0, n0s, steps: int, methods=("maxrl", "sera"), repetitions: int = 8,
               base: SimulationConfig | None = None, progress: bool = False) -> pd.DataFrame:
    """Pass@K along training for every method and N0 from one difficulty profile: one row per
    (method, n0, seed, step, k) with pass@k, plus the budget share on prompts near p = 0 and
    the mixed groups per step averaged up to each evaluation. Same seeds for every method."""
    base = base or SimulationConfig()
    rows = []
    grid = [(m, n0) for n0 in n0s for m in methods]
    if progress:
        from tqdm.auto import tqdm

        grid = tqdm(grid, desc="simulated settings", leave=False)
    for method, n0 in grid:
        config = dataclasses.replace(base, method=method, n0=int(n0), steps=int(steps))
        metrics = simulate(p0, config, repetitions).metrics
        rows.append(_trajectory(metrics))
    return pd.concat(rows, ignore_index=True)


def regime_map_over(draws, n0s, steps: int, methods=("maxrl", "sera"),
                    base: SimulationConfig | None = None) -> pd.DataFrame:
    """regime_map with one repetition per profile, row r of `draws` (e.g. posterior_draws)
    under seed base.seed + r, so that the spread over repetitions includes the profile's own
    uncertainty."""
    base = base or SimulationConfig()
    draws = np.atleast_2d(np.asarray(draws, dtype=float))
    return pd.concat([regime_map(draw, n0s, steps, methods, repetitions=1,
                                 base=dataclasses.replace(base, seed=base.seed + r))
                      for r, draw in enumerate(draws)], ignore_index=True)


def _trajectory(metrics: pd.DataFrame) -> pd.DataFrame:
    """Validation Pass@K per evaluation step with the running means of the diagnostics."""
    keys = ["method", "n0", "seed"]
    passes = metrics[metrics["metric"] == "val_pass"][keys + ["step", "k", "value"]]
    passes = passes.rename(columns={"value": "pass@k"})
    runs = dict(iter(metrics.groupby(keys, sort=False)))
    out = []
    for values, run in passes.groupby(keys, sort=False):
        diagnostics = runs[values]
        run = run.copy()
        for name in ("zero_share", "mixed_groups", "allocated"):
            series = diagnostics[diagnostics["metric"] == name].sort_values("step")
            steps, value = series["step"].to_numpy(), series["value"].to_numpy()
            run[name] = [float(value[steps < s].mean()) if (steps < s).any() else np.nan
                         for s in run["step"]]
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
    metrics = simulate(p0, config, repetitions).metrics
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

def load_profiles(path=PROFILES_FILE) -> dict[str, np.ndarray]:
    """The stored difficulty profiles: study name -> each training prompt's success probability
    under the study's starting model."""
    table = pd.read_csv(path, comment="#")
    return {name: part["p"].to_numpy() for name, part in table.groupby("study", sort=False)}


def harder(p0, factor: float) -> np.ndarray:
    """A profile `factor` times harder in odds: p / (1 - p) divided by factor."""
    factor = _checks.real(factor, "factor", 0.0, np.inf, low_open=True)
    p0 = np.asarray(p0, dtype=float)
    return expit(logit(np.clip(p0, 1e-9, 1 - 1e-9)) - np.log(factor))


def measure_profiles(samples: int = 32, out=PROFILES_FILE, progress: bool = True) -> pd.DataFrame:
    """Each training prompt's success probability under the starting model of the three CPU
    studies (their `fast` presets): digits (the untrained CNN, exact p), mazes and math (the
    supervised warm-up, estimated from `samples` rollouts per prompt at the training
    temperature). Written to `out` with a provenance header."""
    import platform
    import time

    import torch

    from sera.trainers import classification, math, maze

    start = time.time()
    parts = []
    with tempfile.TemporaryDirectory() as folder:
        study = classification.ClassificationStudy(dataclasses.replace(
            classification.PRESETS["fast"], out=f"{folder}/digits", device="cpu"))
        parts.append(pd.DataFrame({"study": "digits", "prompt": np.arange(study.n_prompts),
                                   "p": study.exact_p(np.arange(study.n_prompts)),
                                   "samples": np.nan}))
        for name, module in (("maze", maze), ("math", math)):
            config = dataclasses.replace(module.PRESETS["fast"], out=f"{folder}/{name}",
                                         device="cpu", progress=progress)
            p = measure_profile(config, module.build, samples)
            parts.append(pd.DataFrame({"study": name, "prompt": np.arange(p.size),
                                       "p": p, "samples": samples}))
    table = pd.concat(parts, ignore_index=True)
    header = (f"# Difficulty profiles: each training prompt's success probability under the "
              f"starting model of the `fast` presets (python -m sera.simulate --profiles). "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
              f"{platform.machine()}, {time.time() - start:.0f} s, "
              f"{time.strftime('%Y-%m-%d')}\n")
    Path(out).write_text(header + table.to_csv(index=False))
    return table


def measure_profile(config, build, samples: int = 32) -> np.ndarray:
    """Each training prompt's success probability under a sequence study's starting model (its
    warm-up, trained first if missing), estimated from `samples` rollouts per prompt at the
    training temperature. `build` is the task module's (e.g. sera.trainers.math.build)."""
    study = build(config)
    prompts = study.task.train_prompts
    counts = np.full(len(prompts), samples)
    responses = study.engine.generate(prompts, counts, study.training, seed=0)
    owner = np.repeat(np.arange(len(prompts)), samples)
    rewards = np.array([study.task.reward("train", int(q), r)
                        for q, r in zip(owner, responses, strict=True)])
    return np.bincount(owner, rewards, len(prompts)) / samples


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
