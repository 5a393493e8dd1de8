"""Why a confirmation point's measurement departs from its prediction: the same statistics of the
training rollouts, computed from the real runs and from the simulator's runs of the same point.

The simulator predicts Pass@K on its own training prompts, each an independent logit moved only by
its own rollouts. The real runs are scored on held-out prompts, by a model whose prompts share
every parameter. Both kinds of run store the same allocations table (one row per prompt visit:
step, epoch, rollouts, successes), so the training prompts can be compared like for like (the
simulator's allocations for a point's arms come from `sera.studies.confirm.simulated_allocations`):

- `training_curves`: per epoch, the success rate on the training prompts visited (a Pass@1 on
  the training set, measured on-policy) and the share of the budget that landed in mixed groups,
  the only groups whose MaxRL advantages are not all zero;
- `band_gains`: SERA - MaxRL success in the last epoch by the prompt's difficulty in the
  warm-up profile (never solved in 32 samples, up to 1/4, up to 3/4, above), with each band's
  rollouts per visit: where the allocator moved the budget, and what it bought there;
- `coverage`: the share of held-out prompts never solved in the final samples, and of those
  solved at least half the time, the two ends that move Pass@K at large and at small K;
- `selection_binding`: how often the paper's observability-guided selection would have dropped
  a prompt along stored runs, from the estimates they planned with or from the paper's counts
  rule replayed on their outcomes;
- `evidence`: per arm, the successes a step's mixed groups hold (the responses a MaxRL update
  learns from) in the first and second half of the steps, averaged over steps and seeds;
- `drift`: how far a logged metric (held-out Pass@1, token entropy, response length) moved over
  each run, and the share of seeds that ended below where they started, which flags an arm that
  made its model worse than the warm-up rather than merely improving it more slowly.

notebooks/08_when_sera_helps.ipynb reads the long maze and math points with them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sera.results import t_half_width
from sera.tables import with_arm

EDGES = (0.25, 0.75)
"""Upper edges of the warm-up difficulty bands after "never solved"; the last band is the rest."""


def difficulty_band(p_hat) -> pd.Categorical:
    """Each prompt's band of warm-up success: never solved, then (0, 1/4], (1/4, 3/4], (3/4, 1]."""
    p_hat = np.asarray(p_hat, dtype=float)
    if p_hat.size and (np.nanmin(p_hat) < 0 or np.nanmax(p_hat) > 1):
        raise ValueError("p_hat must be success probabilities in [0, 1]")
    labels = ["never solved", f"(0, {EDGES[0]:g}]", f"({EDGES[0]:g}, {EDGES[1]:g}]",
              f"({EDGES[1]:g}, 1]"]
    codes = np.where(p_hat <= 0, 0, 1 + np.searchsorted(EDGES, p_hat, side="left"))
    return pd.Categorical.from_codes(codes, labels)


def _with_rates(allocations: pd.DataFrame) -> pd.DataFrame:
    table = with_arm(allocations[allocations["rollouts"] > 0]).copy()
    if table.empty:
        raise ValueError("the allocations table has no visit with rollouts")
    table["rate"] = table["successes"] / table["rollouts"]
    table["mixed"] = (table["successes"] > 0) & (table["successes"] < table["rollouts"])
    table["in_mixed"] = table["rollouts"] * table["mixed"]
    return table


def training_curves(allocations: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, seed, epoch): `success`, the mean success rate of the training prompts visited
    (each prompt counts once per visit, whatever its rollouts), and `signal`, the share of the
    epoch's rollouts in mixed groups (0 < successes < rollouts)."""
    table = _with_rates(allocations)
    grouped = table.groupby(["arm", "seed", "epoch"])
    out = grouped.agg(success=("rate", "mean"), in_mixed=("in_mixed", "sum"),
                      rollouts=("rollouts", "sum")).reset_index()
    out["signal"] = out["in_mixed"] / out["rollouts"]
    return out.drop(columns=["in_mixed", "rollouts"])


def paired(values: pd.DataFrame, treatment: str, control: str,
            confidence: float) -> dict:
    """Mean of the per-seed treatment - control differences with a Student-t interval."""
    diff = (values[treatment] - values[control]).dropna().to_numpy()
    half = float(t_half_width(diff.std(ddof=1), diff.size, confidence)) if diff.size > 1 \
        else np.nan
    mean = float(diff.mean()) if diff.size else np.nan
    return {"gain": mean, "low": mean - half, "high": mean + half, "seeds": int(diff.size)}


def band_gains(allocations: pd.DataFrame, profile=None, control: str = "maxrl",
               epoch: int | None = None, confidence: float = 0.95) -> pd.DataFrame:
    """Each arm's success on the training prompts minus `control`'s, in one epoch (default the
    last), per warm-up difficulty band (`difficulty_band` of profile, indexed by prompt id; all
    prompts as one band "all" when profile is None), paired by seed with a Student-t interval;
    with the band's share of prompts, the mean rollouts per visit of the arm and of the control,
    the band's share of the arm's rollouts (`budget`) and the share of those in mixed groups
    (`signal`)."""
    table = _with_rates(allocations)
    if profile is None:
        bands = pd.Categorical(np.full(int(table["prompt"].max()) + 1, "all"))
    else:
        bands = difficulty_band(profile)
    if table["prompt"].max() >= len(bands):
        raise ValueError(f"profile has {len(bands)} prompts; the allocations name prompt "
                         f"{table['prompt'].max()}")
    epoch = int(table["epoch"].max()) if epoch is None else int(epoch)
    table = table[table["epoch"] == epoch]
    if table.empty:
        raise ValueError(f"no visit in epoch {epoch}")
    table["band"] = bands[table["prompt"].to_numpy()]
    if control not in set(table["arm"]):
        raise ValueError(f"no {control!r} arm in the allocations")
    rates = table.groupby(["band", "seed", "arm"], observed=True)["rate"].mean().unstack("arm")
    visits = table.groupby(["band", "arm"], observed=True)["rollouts"].mean().unstack("arm")
    spent = table.groupby(["band", "arm"], observed=True)[["rollouts", "in_mixed"]].sum()
    budget = spent["rollouts"] / spent["rollouts"].groupby(level="arm").transform("sum")
    signal = spent["in_mixed"] / spent["rollouts"]
    share = pd.Series(bands).value_counts(normalize=True)
    rows = []
    for band, part in rates.groupby(level="band", observed=True):
        for arm_name in [a for a in part.columns if a != control]:
            rows.append({"arm": arm_name, "band": band, "prompts": float(share[band]),
                         **paired(part, arm_name, control, confidence),
                         "rollouts": float(visits.loc[band, arm_name]),
                         "control_rollouts": float(visits.loc[band, control]),
                         "budget": float(budget[band, arm_name]),
                         "signal": float(signal[band, arm_name])})
    out = pd.DataFrame(rows)
    out["band"] = pd.Categorical(out["band"], categories=bands.categories, ordered=True)
    return out.sort_values(["arm", "band"], ignore_index=True).assign(epoch=epoch)


def coverage(final: pd.DataFrame, control: str = "maxrl", confidence: float = 0.95) -> pd.DataFrame:
    """Per arm: the share of held-out prompts never solved in their final samples (`unsolved`)
    and of those solved at least half the time (`solid`), each arm minus `control` paired by
    seed with a Student-t interval."""
    table = with_arm(final).copy()
    table["unsolved"] = table["correct"] == 0
    table["solid"] = table["correct"] >= table["n"] / 2
    shares = table.groupby(["seed", "arm"])[["unsolved", "solid"]].mean()
    rows = []
    for what in ("unsolved", "solid"):
        values = shares[what].unstack("arm")
        for arm_name in values.columns:
            level = float(values[arm_name].mean())
            gap = paired(values, arm_name, control, confidence) if arm_name != control else {}
            rows.append({"share": what, "arm": arm_name, "level": level, **gap})
    return pd.DataFrame(rows)


def selection_binding(allocations: pd.DataFrame, u_min: float, rule: str | None = None,
                      n_min: int = 2, n_max_factor: int = 8) -> pd.DataFrame:
    """Per arm: over the batches a run planned from estimates (every prompt available), the share
    in which allocating with the selection at u_min would leave at least one prompt out
    (`batches`) and the share of prompt visits it would leave out (`visits`).

    rule None reads the estimates the runs recorded (column `estimate`); "counts" or "rate"
    replays that history rule (gamma 0.5, Beta(1, 1), weight 16) on the runs' own outcomes, so the
    question "what would the paper's estimates have said here" is asked of the same trajectory.
    """
    from sera.allocation import allocate
    from sera.history import SuccessHistory

    out = []
    for (arm_name, seed), run in with_arm(allocations).groupby(["arm", "seed"], sort=False):
        n0 = int(run["n0"].iloc[0])
        n_prompts = int(run["prompt"].max()) + 1
        history = SuccessHistory(n_prompts, rule=rule or "counts")
        epoch, batches, visits = 0, [], []
        for _, part in run.sort_values(["step", "prompt"]).groupby("step"):
            for _ in range(int(part["epoch"].iloc[0]) - epoch):
                history.end_epoch()
            epoch = int(part["epoch"].iloc[0])
            ids = part["prompt"].to_numpy(dtype=np.int64)
            p_hat, available = history.estimate(ids)
            if rule is None:
                p_hat, available = part["estimate"].to_numpy(dtype=float), part["allocated"]
            if np.all(available):
                kept = allocate(p_hat, ids.size * n0, n_min=n_min, n_max=n_max_factor * n0,
                                n0=n0, u_min=u_min).retained
                batches.append(not kept.all())
                visits.append(1 - kept.mean())
            history.record_groups(ids, part["successes"].to_numpy(dtype=float),
                                  part["rollouts"].to_numpy(dtype=float))
        out.append({"arm": arm_name, "seed": seed, "planned": len(batches),
                    "batches": float(np.mean(batches)) if batches else np.nan,
                    "visits": float(np.mean(visits)) if visits else np.nan})
    return pd.DataFrame(out).groupby("arm", sort=False)[["planned", "batches", "visits"]].agg(
        {"planned": "sum", "batches": "mean", "visits": "mean"})


def evidence(allocations: pd.DataFrame) -> pd.DataFrame:
    """Per arm (rows): the successes in groups holding both outcomes per step, mean over the steps
    of each half of the run (`first`, `second`) and over seeds; `seeds`. Read from the stored
    allocations (one row per prompt visit), so it exists for runs that predate the trainers'
    `mixed_successes` metric."""
    table = _with_rates(allocations)
    table["evidence"] = table["successes"] * table["mixed"]
    per_step = table.groupby(["arm", "seed", "step"], as_index=False)["evidence"].sum()
    middle = (per_step["step"].min() + per_step["step"].max() + 1) / 2
    per_step["half"] = np.where(per_step["step"] < middle, "first", "second")
    out = per_step.groupby(["arm", "half"])["evidence"].mean().unstack("half")
    out["seeds"] = per_step.groupby("arm")["seed"].nunique()
    return out


def drift(metrics: pd.DataFrame, metric: str = "val_pass", k: int | None = 1,
          window: float = 0.1, confidence: float = 0.95) -> pd.DataFrame:
    """Per arm, how `metric` (at `k` where it has one) moved over the runs: its mean over each
    run's first `window` share of steps (`start`) and last (`end`), averaged over seeds, the
    change end - start with a Student-t interval over seeds, and `below`, the share of seeds that
    ended below their start. Evaluations logged every few steps (val_pass) use the first and
    last evaluation."""
    table = metrics[metrics["metric"] == metric]
    if k is not None:
        table = table[table["k"] == k]
    if table.empty:
        raise ValueError(f"no {metric!r} rows" + (f" at k = {k}" if k is not None else ""))
    if not 0 < window <= 0.5:
        raise ValueError("window must be a share of the steps in (0, 0.5]")
    table = with_arm(table)
    rows = []
    for arm_name, part in table.groupby("arm"):
        first, last = part["step"].min(), part["step"].max()
        reach = window * (last - first)
        per_seed = pd.DataFrame({
            "start": part[part["step"] <= first + reach].groupby("seed")["value"].mean(),
            "end": part[part["step"] >= last - reach].groupby("seed")["value"].mean()})
        change = paired(per_seed, "end", "start", confidence)
        rows.append({"arm": arm_name, "start": float(per_seed["start"].mean()),
                     "end": float(per_seed["end"].mean()), "change": change["gain"],
                     "low": change["low"], "high": change["high"], "seeds": change["seeds"],
                     "below": float((per_seed["end"] < per_seed["start"]).mean())})
    return pd.DataFrame(rows)
