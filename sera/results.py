"""Tables of the training studies, computed from the long tables every run writes.

A run's rows carry its keys (method, estimates, allocator, seed, n0, agg, u_min); nothing here
parses a label. Used by notebooks/04_gradient_cosine_study.ipynb and
notebooks/05_maze_navigation.ipynb.

- `summarize_runs`: one row per run (mean and final cosine, history agreement, allocated share);
- `summarize`: mean and spread over seeds;
- `passk_profile`: final Pass@K per run, from each held-out prompt's pool or exact p;
- `seed_gains`, `paired_gain`, `gains_against`: one method minus another, paired over the
  held-out prompts within each seed, with a Student-t interval over seeds (training runs);
- `compare_with_paper`, `direction_table`: our numbers beside the paper's, like with like.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sera import _checks
from sera.passk import k_grid, pass_at_k, pass_at_k_analytic
from sera.tables import RUN_KEYS, keys_of


def _groups(table: pd.DataFrame, keys):
    return table.groupby(keys, dropna=False, sort=False)


def summarize_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run: mean_cosine (all measurements), final_cosine (the last one),
    expected_cosine (mean), history_mae / history_pearson and ideal_mae / ideal_pearson (means over
    every measured step), allocated_share, retained (mean), and final Pass@K as pass@K columns."""
    keys = keys_of(metrics)
    rows = []
    for values, run in _groups(metrics, keys):
        row = dict(zip(keys, values, strict=True))
        series = {name: group.sort_values("step")["value"] for name, group in
                  run[run["k"].isna()].groupby("metric")}
        if "cosine" in series:
            row["mean_cosine"] = float(series["cosine"].mean())
            row["final_cosine"] = float(series["cosine"].iloc[-1])
        for name in ("expected_cosine", "history_mae", "history_pearson", "ideal_mae",
                     "ideal_pearson", "retained", "mixed_groups"):
            if name in series:
                row[name] = float(series[name].mean())
        if "allocated_share" in series:
            row["allocated_share"] = float(series["allocated_share"].iloc[-1])
        if "rollouts" in series:
            row["rollouts"] = float(series["rollouts"].sum())
        final = run[run["metric"] == "pass"]
        final = final[final["step"] == final["step"].max()]
        for k, value in zip(final["k"], final["value"], strict=True):
            row[f"pass@{int(k)}"] = float(value)
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(per_run: pd.DataFrame, by=("method", "n0")) -> pd.DataFrame:
    """Mean and standard deviation over seeds of every numeric column of summarize_runs, with
    the number of seeds."""
    by = [c for c in by if c in per_run.columns]
    values = [c for c in per_run.columns if c not in RUN_KEYS]
    grouped = _groups(per_run, by)
    table = grouped[values].mean().add_suffix(" mean").join(
        grouped[values].std(ddof=0).add_suffix(" sd"))
    table["seeds"] = grouped["seed"].nunique()
    ordered = [f"{c} {s}" for c in values for s in ("mean", "sd")] + ["seeds"]
    return table[ordered].reset_index()


def per_prompt_pass(final: pd.DataFrame, k: int) -> np.ndarray:
    """Pass@K of every row of a final table: unbiased from (n, correct), or 1 - (1-p)^K."""
    if "p" in final.columns:
        return pass_at_k_analytic(final["p"].to_numpy(), k)
    return pass_at_k(final["n"].to_numpy(), final["correct"].to_numpy(), k)


def _ks(final: pd.DataFrame, ks):
    if ks is not None:
        return list(ks)
    top = int(final["n"].min()) if "n" in final.columns else 128
    return k_grid(top)


def passk_profile(final: pd.DataFrame, ks=None) -> pd.DataFrame:
    """Final Pass@K per run (mean over held-out prompts): the run's keys, k and pass@k."""
    keys = keys_of(final)
    rows = []
    for values, run in _groups(final, keys):
        for k in _ks(run, ks):
            rows.append({**dict(zip(keys, values, strict=True)), "k": k,
                         "pass@k": float(per_prompt_pass(run, k).mean())})
    return pd.DataFrame(rows)


def seed_gains(final: pd.DataFrame, treatment: str = "sera", control: str = "maxrl",
               by=("agg",), ks=None) -> pd.DataFrame:
    """Each seed's paired difference: Pass@K of `treatment` minus `control`, averaged over the
    held-out prompts both methods were evaluated on in that seed. One row per (by, k, seed) with
    columns gain and prompts; the points `paired_gain`'s interval is computed from."""
    by = [c for c in by if c in final.columns]
    rows = []
    for values, part in _groups(final, by) if by else [((), final)]:
        values = values if isinstance(values, tuple) else (values,)
        a = part[part["method"] == treatment].set_index(["seed", "prompt"]).sort_index()
        b = part[part["method"] == control].set_index(["seed", "prompt"]).sort_index()
        common = a.index.intersection(b.index)
        if common.empty:
            continue
        a, b = a.loc[common].reset_index(), b.loc[common].reset_index()
        seeds = a["seed"].to_numpy()
        for k in _ks(pd.concat([a, b]), ks):
            diff = per_prompt_pass(a, k) - per_prompt_pass(b, k)
            for seed in dict.fromkeys(seeds):
                mine = seeds == seed
                rows.append({**dict(zip(by, values, strict=True)), "k": k, "seed": seed,
                             "gain": float(diff[mine].mean()), "prompts": int(mine.sum())})
    return pd.DataFrame(rows, columns=[*by, "k", "seed", "gain", "prompts"])


def t_half_width(sd, n, confidence: float = 0.95):
    """Half-width of the Student-t interval of a mean of n values with standard deviation sd
    (n - 1 degrees of freedom); NaN where n < 2. Vectorised over sd and n."""
    from scipy import stats

    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        half = stats.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1)) * sd / np.sqrt(n)
    return np.where(n >= 2, half, np.nan)


def welch(a, b, confidence: float = 0.95) -> tuple[float, float, float]:
    """mean(a) - mean(b) with Welch's interval (unequal variances, no pairing), as scipy gives
    it: for two arms whose runs have drifted apart, where pairing by seed carries nothing. NaN
    bounds with fewer than 2 values on a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    gain = float(a.mean() - b.mean()) if a.size and b.size else math.nan
    if a.size < 2 or b.size < 2:
        return gain, math.nan, math.nan
    from scipy import stats

    interval = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence)
    return gain, float(interval.low), float(interval.high)


def paired_p(per_seed) -> float:
    """Two-sided p-value of the paired t-test on per-seed differences (the test behind
    paired_gain's interval); NaN with fewer than 2 differences or all of them equal."""
    values = np.asarray(per_seed, dtype=float)
    if values.size < 2 or np.all(values == values[0]):
        return math.nan
    from scipy import stats

    return float(stats.ttest_1samp(values, 0.0).pvalue)


def bh_kept(p_values, level: float = 0.05) -> np.ndarray:
    """Which of a family of p-values stay significant under the Benjamini-Hochberg correction
    at false discovery rate `level` (scipy's adjusted p-values at or below it)."""
    from scipy import stats

    return stats.false_discovery_control(np.asarray(p_values, dtype=float)) <= level


def paired_gain(final: pd.DataFrame, treatment: str = "sera", control: str = "maxrl",
                by=("agg",), ks=None, n_resamples: int | None = None, seed: int | None = None,
                confidence: float = 0.95) -> pd.DataFrame:
    """Pass@K of `treatment` minus `control` per K (and per `by`), with an interval over
    training runs.

    Each seed's difference is the paired mean over the held-out prompts both methods were
    evaluated on (`seed_gains`); the gain is the mean of those S per-seed differences and the
    interval the Student-t interval with S - 1 degrees of freedom. Two training runs differ by
    more than their evaluations do, so the seed is the unit of replication: resampling the
    (seed, prompt) pairs of fixed final models measures evaluation noise only, and its interval
    covered the true gain in about a third of synthetic replications with a seed-level effect
    (tests/test_results.py). With fewer than 3 seeds there is no interval: low and high are NaN
    and `note` says so; the per-seed differences are still in `per_seed`.

    n_resamples and seed are accepted for older call sites and unused (no resampling).
    Columns: by..., k, gain, low, high, sd (of the per-seed differences), seeds, pairs,
    per_seed (tuple of the per-seed differences in seed order), note.
    """
    confidence = _checks.real(confidence, "confidence", 0.0, 1.0, low_open=True)
    per_seed = seed_gains(final, treatment, control, by, ks)
    by = [c for c in by if c in final.columns]
    rows = []
    for values, part in _groups(per_seed, [*by, "k"]):
        values = values if isinstance(values, tuple) else (values,)
        part = part.sort_values("seed")
        gains = part["gain"].to_numpy()
        n = gains.size
        sd = float(gains.std(ddof=1)) if n > 1 else np.nan
        low = high = np.nan
        note = ""
        if n >= 3:
            half = t_half_width(sd, n, confidence)
            low, high = gains.mean() - half, gains.mean() + half
        else:
            note = f"{n} seed{'s' if n != 1 else ''}: no interval over training runs (needs 3)"
        rows.append({**dict(zip([*by, "k"], values, strict=True)), "gain": float(gains.mean()),
                     "low": float(low), "high": float(high), "sd": sd, "seeds": n,
                     "pairs": int(part["prompts"].sum()), "per_seed": tuple(gains.tolist()),
                     "note": note})
    return pd.DataFrame(rows)


def reproduction(stored: pd.DataFrame, new: pd.DataFrame, treatment: str = "sera",
                 control: str = "maxrl", ks=None, confidence: float = 0.95) -> pd.DataFrame:
    """Whether new seeds of a comparison reproduce a stored one, per K.

    `stored` and `new` are final tables (method, seed, prompt, n, correct). A stored verdict is
    `verdict` of its mean per-seed gain and Student-t interval ("ahead", "behind",
    "inconclusive"). The new seeds reproduce it when their mean gain has the same sign (for
    "inconclusive": whatever sign) and each new seed's gain falls inside the stored prediction
    interval for one more seed, mean +- t(S-1) * sd * sqrt(1 + 1/S), the spread a seed of the
    stored experiment would show. Seeds run in both with identical results are counted too:
    on the machine kind the stored runs came from they are bitwise equal.

    Columns: k, stored_gain, stored_low, stored_high, verdict, spread_low, spread_high,
    new_gain, new_per_seed, inside (new seeds inside the spread), same_sign, reproduces,
    identical (seeds whose rows of both methods equal the stored ones) and seeds.
    """
    before = seed_gains(stored, treatment, control, by=(), ks=ks)
    after = seed_gains(new, treatment, control, by=(), ks=ks)
    identical = _identical_seeds(stored, new, (treatment, control))  # the same at every K
    rows = []
    for k, part in after.groupby("k"):
        old = before[before["k"] == k]["gain"].to_numpy()
        gains = part.sort_values("seed")["gain"].to_numpy()
        n, mean = old.size, float(old.mean())
        sd = float(old.std(ddof=1)) if n > 1 else np.nan
        half = float(t_half_width(sd, n, confidence))
        said = verdict(mean, mean - half, mean + half)
        spread = float(t_half_width(sd * np.sqrt(n + 1), n, confidence))  # sd*sqrt(1+1/n)*sqrt(n)
        inside = int(np.sum(np.abs(gains - mean) <= spread))
        same = said in ("inconclusive", "no interval") or np.sign(gains.mean()) == np.sign(mean)
        rows.append({"k": int(k), "stored_gain": mean, "stored_low": mean - half,
                     "stored_high": mean + half, "verdict": said,
                     "spread_low": mean - spread, "spread_high": mean + spread,
                     "new_gain": float(gains.mean()), "new_per_seed": tuple(gains.tolist()),
                     "inside": inside, "same_sign": bool(same),
                     "reproduces": bool(same and inside == gains.size),
                     "identical": identical,
                     "seeds": int(gains.size)})
    return pd.DataFrame(rows)


def _identical_seeds(stored: pd.DataFrame, new: pd.DataFrame, methods) -> int:
    """Seeds of `new` whose final rows of every method in `methods` equal the stored ones."""
    columns = ["method", "seed", "prompt", "n", "correct"]
    same = 0
    for seed in sorted(set(new["seed"])):
        pick = [t[t["method"].isin(methods) & (t["seed"] == seed)][columns]
                .sort_values(columns[:3]).reset_index(drop=True) for t in (stored, new)]
        same += bool(len(pick[0]) and pick[0].equals(pick[1]))
    return same


def gains_against(final: pd.DataFrame, reference: str = "sera", by=("agg",), ks=None,
                  n_resamples: int | None = None, seed: int | None = None) -> pd.DataFrame:
    """paired_gain of every other method against `reference`, with a method column."""
    parts = [paired_gain(final, method, reference, by, ks).assign(
        method=method) for method in dict.fromkeys(final["method"]) if method != reference]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def compare_with_paper(summary: pd.DataFrame, reference: pd.DataFrame, study: str, n0: int,
                       label: str) -> pd.DataFrame:
    """The paper's numbers of `study` beside ours from `summary` (summarize's output) at budget
    n0, statistic for statistic: a mean with a mean, a final value with a final value."""
    ours = summary[summary["n0"] == n0].set_index("method")
    rows = []
    for _, ref in reference[reference["study"] == study].iterrows():
        column = ref["metric"] if pd.isna(ref.get("k")) else f"{ref['metric']}@{int(ref['k'])}"
        value = ours.loc[ref["method"], f"{column} mean"] \
            if ref["method"] in ours.index and f"{column} mean" in ours.columns else np.nan
        rows.append({"statistic": column, "method": ref["method"], "paper": ref["value"],
                     label: value, "what the paper measured": ref["note"]})
    return pd.DataFrame(rows)


def direction_table(summary: pd.DataFrame, treatment: str = "sera-oracle",
                    control: str = "maxrl", statistics=("mean_cosine", "final_cosine",
                                                        "pass@1", "pass@128")) -> pd.DataFrame:
    """Per budget n0: whether `treatment` is above `control` on each statistic (seed means)."""
    out = {}
    for n0, part in summary.groupby("n0"):
        part = part.set_index("method")
        if treatment not in part.index or control not in part.index:
            continue
        out[f"N0={n0}"] = {f"{treatment} {s} above {control}":
                           bool(part.loc[treatment, f"{s} mean"] > part.loc[control, f"{s} mean"])
                           for s in statistics if f"{s} mean" in part.columns}
    return pd.DataFrame(out)


def replay(run: pd.DataFrame, **options):
    """Replay one run's recorded outcomes (its rows of an allocations table: step, epoch, prompt,
    rollouts, successes) through a fresh sera.SuccessHistory(**options): yields, step by step,
    (the step's rows, their prompt ids, the estimate and its availability) read before the
    step's outcomes are recorded, with the epochs folded in where the run folded them."""
    from sera.history import SuccessHistory

    history = SuccessHistory(int(run["prompt"].max()) + 1, **options)
    epoch = 0
    for _, part in run.sort_values(["step", "prompt"]).groupby("step", sort=True):
        for _ in range(int(part["epoch"].iloc[0]) - epoch):
            history.end_epoch()
        epoch = int(part["epoch"].iloc[0])
        ids = part["prompt"].to_numpy(dtype=np.int64)
        estimate, available = history.estimate(ids)
        yield part, ids, estimate, available
        history.record_groups(ids, part["successes"].to_numpy(dtype=float),
                              part["rollouts"].to_numpy(dtype=float))


def replay_history(allocations: pd.DataFrame, settings: dict) -> pd.DataFrame:
    """Replay history estimators on the outcomes that runs recorded (their allocations tables,
    which need p_exact): every estimator sees the same rollouts, so their accuracy is compared
    on one trajectory. settings maps a name to sera.SuccessHistory keyword arguments.

    One row per run and setting: history_mae and history_pearson, the mean over the steps where
    every prompt of the batch had an estimate of the per-step MAE and Pearson correlation against
    the exact p; ideal_mae and ideal_pearson, the same for the exact p at each prompt's previous
    visit (the best any history-only estimate can do); and the number of steps measured.
    """
    keys = keys_of(allocations)
    rows = []
    for values, run in _groups(allocations, keys):
        for name, options in settings.items():
            last = np.full(int(run["prompt"].max()) + 1, np.nan)
            scores = {"history": [], "ideal": []}
            for part, ids, estimate, available in replay(run, **options):
                exact = part["p_exact"].to_numpy(dtype=float)
                if available.all():
                    scores["history"].append(_agreement(estimate, exact))
                if not np.isnan(last[ids]).any():
                    scores["ideal"].append(_agreement(last[ids], exact))
                last[ids] = exact
            row = {**dict(zip(keys, values, strict=True)), "estimator": name,
                   "steps": len(scores["history"])}
            for source, found in scores.items():
                found = np.array(found, dtype=float).reshape(-1, 2)
                row[f"{source}_mae"] = float(np.nanmean(found[:, 0])) if len(found) else np.nan
                row[f"{source}_pearson"] = float(np.nanmean(found[:, 1])) if len(found) else np.nan
            rows.append(row)
    return pd.DataFrame(rows)


def _agreement(estimate, exact) -> tuple[float, float]:
    mae = float(np.abs(estimate - exact).mean())
    if estimate.size < 2 or np.std(estimate) == 0 or np.std(exact) == 0:
        return mae, np.nan
    return mae, float(np.corrcoef(estimate, exact)[0, 1])


def bracket(value: float, low: float, high: float, scale: float = 100, sign: str = "+") -> str:
    """A value with its interval as the pages print it, e.g. "+1.5 [-0.7, +3.7]" (sign "+") or
    "30.1 [29.3, 30.8]" (sign ""), in points for scale 100."""
    return f"{scale * value:{sign}.1f} [{scale * low:{sign}.1f}, {scale * high:{sign}.1f}]"


MIN_SEEDS = 6
"""The fewest seeds a confirmation point runs, and the fewest paired seeds a verdict is given on."""

SIDES = ("ahead", "behind", "inconclusive")
"""What an interval over seeds says of a gain: above zero, below zero, or holding zero."""


def verdict(gain: float, low: float, high: float, predicted: float = math.nan,
            seeds: int | None = None) -> str:
    """The one verdict every table, page and notebook gives a gain with its interval over seeds.

    The side (SIDES): "ahead" or "behind" where the interval excludes zero, "inconclusive" where
    it holds zero (which is not evidence of no effect). With a numeric prediction, ", as
    predicted" or ", not as predicted" says whether the prediction lies inside the interval; an
    inconclusive interval that holds the prediction neither confirms nor refutes it and says
    only "inconclusive". With `seeds` below MIN_SEEDS: "<seeds> seeds: no verdict"; without a
    finite interval: "no interval".
    """
    if seeds is not None and seeds < MIN_SEEDS:
        return f"{seeds} seed{'s' if seeds != 1 else ''}: no verdict"
    if not (math.isfinite(low) and math.isfinite(high)):
        return "no interval"
    ahead, behind, inconclusive = SIDES
    side = ahead if low > 0 else behind if high < 0 else inconclusive
    if not math.isfinite(predicted):
        return side
    inside = low <= predicted <= high
    if side == inconclusive and inside:
        return side
    return f"{side}, {'as predicted' if inside else 'not as predicted'}"

