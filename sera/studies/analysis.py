"""Small studies behind the theory notebooks, each returning a tidy pandas table.

- compare_rounding: the paper's integerization against the exact integer max-min
  (notebooks/02_waterline_allocation.ipynb, benchmarks/rounding_gap.py);
- budget_concentration: what a near-zero success probability does to the rest of the batch;
- reweighting_study: inverse-fidelity reweighting against reallocation, by Monte Carlo
  (both in notebooks/03_allocation_vs_success.ipynb);
- monte_carlo_fidelity: the MaxRL estimator's mean over many groups, in units of grad log p
  (notebooks/01_finite_rollout_fidelity.ipynb).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sera import _checks
from sera.allocation import allocate, waterline
from sera.estimators import maxrl_advantages
from sera.fidelity import kappa


def compare_rounding(instances: int = 3000, seed: int = 0, max_prompts: int = 4,
                     n_min: int = 2, max_n_max: int = 16) -> pd.DataFrame:
    """Random small instances (B <= max_prompts, p ~ U(0, 1), n_max in [n_min, max_n_max], a
    feasible budget); one row per instance with the minimum fidelity of each method and the gap
    exact - paper (>= 0: the exact method is max-min optimal)."""
    instances = _checks.integer(instances, "instances", minimum=1)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(instances):
        b = int(rng.integers(1, max_prompts + 1))
        p = rng.uniform(0, 1, b)
        n_max = int(rng.integers(n_min, max_n_max + 1))
        budget = int(rng.integers(n_min * b, n_max * b + 1))
        paper = allocate(p, budget, n_min, n_max, rule="paper")
        exact = allocate(p, budget, n_min, n_max, rule="exact")
        rows.append({"instance": i, "prompts": b, "p": tuple(p), "budget": budget, "n_max": n_max,
                     "paper_min_kappa": paper.fidelity.min(),
                     "exact_min_kappa": exact.fidelity.min(),
                     "same_counts": bool((paper.counts == exact.counts).all())})
    table = pd.DataFrame(rows)
    table["gap"] = table["exact_min_kappa"] - table["paper_min_kappa"]
    return table


def summarize_rounding(table: pd.DataFrame) -> pd.DataFrame:
    """One-row summary of compare_rounding: how often and by how much the paper falls below."""
    below = table["gap"] > 1e-12
    return pd.DataFrame([{
        "instances": len(table),
        "paper below exact": int(below.sum()),
        "share below": float(below.mean()),
        "largest gap": float(table["gap"].max()),
        "mean gap where below": float(table.loc[below, "gap"].mean()) if below.any() else 0.0,
        "identical counts": float(table["same_counts"].mean()),
        "exact below paper": int((table["gap"] < -1e-12).sum()),
    }])


def budget_concentration(p_low, others, budget: int, n_min: int = 2,
                         n_max: int | None = None) -> pd.DataFrame:
    """As the lowest success probability p_low shrinks, how much of the budget its prompt takes
    and what common fidelity the other prompts are left with (continuous waterline)."""
    others = np.asarray(others, dtype=float)
    rows = []
    for value in np.atleast_1d(np.asarray(p_low, dtype=float)):
        p = np.concatenate(([value], others))
        counts, lam = waterline(p, budget, n_min, n_max)
        rows.append({"p_low": value, "share_of_budget": counts[0] / budget,
                     "rollouts_low": counts[0], "level": 1 - np.exp(-lam),
                     "min_kappa_others": float(kappa(others, counts[1:]).min())})
    return pd.DataFrame(rows)


def _normalized_estimates(p, counts, draws, rng):
    """Draws x prompts of the centered MaxRL estimate divided by grad log p, for a Bernoulli
    policy with logit theta: with c successes among N it is (N - c) / (N (1 - p)) if c >= 1,
    else 0, so its mean is kappa(p, N). Also returns which groups carried no signal."""
    successes = rng.binomial(counts[None, :], p[None, :], size=(draws, p.size))
    zero_signal = (successes == 0) | (successes == counts[None, :])
    estimate = np.where(successes > 0, (counts - successes) / (counts * (1 - p)), 0.0)
    return estimate, zero_signal


def reweighting_study(p, n0: int, draws: int = 20_000, seed: int = 0, n_min: int = 2,
                      n_max: int | None = 64) -> pd.DataFrame:
    """Uniform MaxRL, inverse-fidelity reweighting and SERA reallocation at the same budget
    B * n0, by Monte Carlo on a batch of Bernoulli prompts (0 < p < 1).

    Per method: the zero-signal probability (a group with all successes or all failures), the
    expected normalized update (1 would be the exact likelihood gradient for every prompt), the
    variance and relative variance of the per-prompt estimates, and the cosine between the
    sampled batch update and the exact direction (the all-ones vector in normalized units).
    """
    p = _checks.batch_probabilities(p)
    if ((p <= 0) | (p >= 1)).any():
        raise ValueError("reweighting_study needs 0 < p < 1 for every prompt (grad log p = 0 "
                         "at p = 1 and the estimator is 0 at p = 0)")
    rng = np.random.default_rng(seed)
    uniform_counts = np.full(p.size, n0)
    plan = allocate(p, n0 * p.size, n_min, n_max, rule="exact")
    rows = []
    for method, counts, scale in [
        ("uniform", uniform_counts, np.ones(p.size)),
        ("reweight", uniform_counts, 1 / kappa(p, uniform_counts)),
        ("sera", plan.counts, np.ones(p.size)),
    ]:
        estimate, zero_signal = _normalized_estimates(p, counts, draws, rng)
        estimate = estimate * scale
        mean = estimate.mean(0)
        norms = np.linalg.norm(estimate, axis=1)
        cosine = np.divide(estimate.sum(1), norms * np.sqrt(p.size), out=np.zeros(draws),
                           where=norms > 0)
        rows.append({
            "method": method,
            "budget": int(counts.sum()),
            "zero_signal": float(zero_signal.mean()),
            "mean_update": float(mean.mean()),
            "update_spread": float(mean.std() / mean.mean()),
            "variance": float(estimate.var(0).mean()),
            "relative_variance": float((estimate.var(0) / mean**2).mean()),
            "expected_cosine": float(mean.sum() / (np.linalg.norm(mean) * np.sqrt(p.size))),
            "sampled_cosine": float(cosine.mean()),
        })
    return pd.DataFrame(rows)


def monte_carlo_fidelity(p: float, n: int, draws: int = 20_000, seed: int = 0,
                         centered: bool = True) -> tuple[float, float]:
    """Mean and standard error of the MaxRL gradient in units of grad log p, for a Bernoulli
    policy with logit theta (score r - p, grad log p = 1 - p), over `draws` groups of n rollouts
    scored with sera.maxrl_advantages. The mean estimates kappa(p, n)."""
    p = _checks.real(p, "p", 0.0, 1.0, low_open=True)
    if p >= 1:
        raise ValueError("p must be below 1: grad log p = 0 at p = 1")
    n = _checks.integer(n, "n", minimum=1)
    rng = np.random.default_rng(seed)
    rewards = (rng.random(draws * n) < p).astype(float)
    groups = np.repeat(np.arange(draws), n)
    advantages = maxrl_advantages(rewards, groups, centered=centered)
    per_group = (advantages * (rewards - p)).reshape(draws, n).mean(1) / (1 - p)
    return float(per_group.mean()), float(per_group.std(ddof=1) / np.sqrt(draws))
