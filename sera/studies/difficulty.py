"""Where a gain comes from: the treatment's Pass@K minus the control's on held-out prompts
grouped by how often the control solves them, so that a reader can hold each group against the
solve rates of their own prompts.

Grouping prompts by the control's own measured rate and then measuring the control on them
again would favour the treatment: a prompt the control happened to miss lands in the hardest
bin, where the control's own luck turns into the treatment's gain. So the grouping is
cross-fitted over the control's seeds: its even seeds set each prompt's bin and its odd seeds
measure it there, then the other way round, and the two are averaged (the treatment's seeds all
measure it). The interval is a 95% percentile bootstrap that draws the prompts and each arm's
seeds together; `prompts` is the mean count of prompts in the bin over the two folds.

    python -m sera.studies.difficulty
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from sera.results import per_prompt_pass, verdict

EDGES = (0.05, 0.25, 0.60)
"""Upper edges of the control's solve-rate bins (at most 5%, 5-25%, 25-60%); the last is the
rest."""
LABELS = ("<= 5%", "5-25%", "25-60%", "> 60%")


def matrix(final: pd.DataFrame, values: np.ndarray) -> np.ndarray:
    """A value per row of one arm's final table as a seeds x prompts array."""
    table = final.assign(value=values).pivot(index="seed", columns="prompt", values="value")
    if table.isna().any().any():
        raise ValueError("every seed of an arm must evaluate the same prompts")
    return table.to_numpy()


def _weights(draws: np.ndarray, size: int) -> np.ndarray:
    """Each draw's seeds (rows of seed positions) as averaging weights over `size` seeds."""
    out = np.zeros((len(draws), size))
    for column in draws.T:
        out[np.arange(len(draws)), column] += 1
    return out / draws.shape[1]


def _bin_gains(treatment_k, control_k, control_rate, seeds_t, folds, prompts) -> np.ndarray:
    """Per draw (rows) and bin: the gain averaged over the two folds (each fold: the control
    seeds that bin, those that measure), nan where neither fold puts a prompt in the bin; then
    the bins' prompt counts averaged over the folds. seeds_t, each fold's seeds: draws x seeds
    positions; prompts: draws x prompts positions."""
    rows = np.arange(len(prompts))[:, None]
    treated = (_weights(seeds_t, len(treatment_k)) @ treatment_k)[rows, prompts]
    sums = counts = seen = 0
    for binning, measuring in folds:
        rate = (_weights(binning, len(control_rate)) @ control_rate)[rows, prompts]
        gain = treated - (_weights(measuring, len(control_k)) @ control_k)[rows, prompts]
        bins = np.searchsorted(EDGES, rate, side="left")
        inside = np.stack([bins == b for b in range(len(LABELS))], axis=1)  # draws x bins x P
        count = inside.sum(axis=2)
        mean = (inside * gain[:, None, :]).sum(axis=2) / np.maximum(count, 1)
        sums, counts = sums + np.where(count > 0, mean, 0), counts + (count > 0)
        seen = seen + count
    gains = np.where(counts > 0, sums / np.maximum(counts, 1), math.nan)
    return np.concatenate([gains, seen / len(folds)], axis=1)


def by_difficulty(treatment: pd.DataFrame, control: pd.DataFrame, k: int, prompts=None,
                  draws: int = 2000, seed: int = 0) -> pd.DataFrame:
    """treatment, control: the two arms' final tables (seed, prompt, n, correct). prompts: the
    prompt ids to read (default: all). Columns bin, prompts, gain, low, high, verdict."""
    if prompts is not None:
        treatment, control = (t[t["prompt"].isin(prompts)] for t in (treatment, control))
    treatment_k = matrix(treatment, per_prompt_pass(treatment, k))
    control_k = matrix(control, per_prompt_pass(control, k))
    control_rate = matrix(control, (control["correct"] / control["n"]).to_numpy())
    n_t, n_c, n_p = len(treatment_k), len(control_k), treatment_k.shape[1]
    even, odd = np.arange(0, n_c, 2), np.arange(1, n_c, 2)
    if not (len(even) and len(odd)):
        raise ValueError("the control needs two seeds or more to cross-fit the bins")
    every = _bin_gains(treatment_k, control_k, control_rate, np.arange(n_t)[None],
                       [(even[None], odd[None]), (odd[None], even[None])], np.arange(n_p)[None])
    rng = np.random.default_rng(seed)
    # the control's seeds are drawn within each fold, so that neither fold is ever empty
    drawn_even, drawn_odd = (rng.choice(half, (draws, len(half))) for half in (even, odd))
    drawn = _bin_gains(treatment_k, control_k, control_rate, rng.integers(0, n_t, (draws, n_t)),
                       [(drawn_even, drawn_odd), (drawn_odd, drawn_even)],
                       rng.integers(0, n_p, (draws, n_p)))
    rows = []
    for b, label in enumerate(LABELS):
        values = drawn[:, b][np.isfinite(drawn[:, b])]
        low, high = np.quantile(values, [0.025, 0.975]) if len(values) > 0.95 * draws \
            else (math.nan, math.nan)
        gain = float(every[0, b])
        rows.append({"bin": label, "prompts": float(every[0, len(LABELS) + b]), "gain": gain,
                     "low": float(low), "high": float(high),
                     "verdict": verdict(gain, low, high, seeds=n_c)
                     if math.isfinite(gain) else verdict(gain, low, high)})
    return pd.DataFrame(rows)


def comparisons() -> list[dict]:
    """What the page splits by difficulty: every stored confirmation point's treatment against
    its control on all its held-out prompts, and every sweep's two methods at their chosen steps
    on the reporting half. Each: point, treatment and control (arm names), prompts (None: all),
    ks (Pass@1 and the largest of 8 and 32 its evaluation allows)."""
    from sera.studies import sweep
    from sera.studies.confirm.points import point
    from sera.studies.confirm.storage import stored_points, stored_table

    out = []
    for name in stored_points():
        p = point(name)
        ks = (1, 32 if p.config.final_samples >= 32 else 8)
        if not sweep.is_sweep(name):
            out.append({"point": name, "treatment": p.treatment, "control": p.control,
                        "prompts": None, "ks": ks})
            continue
        picks = sweep.chosen(name).set_index("method")["multiplier"]
        steps = sweep.multipliers(name)
        arm = {m: next(a for a, s in steps.items() if s == picks[m]
                       and point(name).arms[list(steps).index(a)].method == m)
               for m in ("sera", p.control) if m in picks}
        if len(arm) < 2:
            continue
        prompts = stored_table(name, "final")["prompt"].unique()
        out.append({"point": name, "treatment": arm["sera"], "control": arm[p.control],
                    "prompts": np.sort(prompts[sweep.half(prompts) == sweep.REPORT]),
                    "ks": ks})
    return out


def table(draws: int = 2000) -> pd.DataFrame:
    """Every comparison's gain per bin: columns point, treatment, control, prompt_set, k, bin,
    prompts, gain, low, high, verdict."""
    from sera.studies.confirm.storage import stored_table

    parts = []
    for c in comparisons():
        final = stored_table(c["point"], "final")
        arms = [final[final["arm"] == c[side]] for side in ("treatment", "control")]
        for k in c["ks"]:
            part = by_difficulty(*arms, k=k, prompts=c["prompts"], draws=draws)
            parts.append(part.assign(point=c["point"], treatment=c["treatment"],
                                     control=c["control"], k=k,
                                     prompt_set="all" if c["prompts"] is None else "report"))
    return pd.concat(parts, ignore_index=True)


def page_section(found: pd.DataFrame | None = None) -> str:
    """The page's per-difficulty section: one row per comparison and K, one column per bin."""
    from sera.results import bracket

    found = table() if found is None else found
    rows = []
    for (name, treatment, control, prompts, k), part in found.groupby(
            ["point", "treatment", "control", "prompt_set", "k"], sort=False):
        row = {"point": name, "comparison": f"`{treatment}` - `{control}`",
               "prompts": prompts, "K": k}
        for r in part.itertuples():
            row[f"control solves {r.bin}"] = (
                f"{bracket(r.gain, r.low, r.high)} ({r.prompts:g}): {r.verdict}"
                if np.isfinite(r.gain) else "no prompt")
        rows.append(row)
    return ("## Where the gain comes from, by difficulty\n\n"
            "Each comparison's Pass@K gain, in points, on the held-out prompts grouped by how "
            "often the control solves them (its per-prompt rate at the final evaluation), with "
            "the 95% interval over prompts and seeds and, in brackets, the prompts in the "
            "group. The control's even seeds set each prompt's group and its odd seeds measure "
            "it there, then the other way round (`sera.studies.difficulty`), so that a prompt "
            "the control missed by chance does not count as the treatment's gain. A sweep is "
            "read at each method's chosen step on the reporting half.\n\n"
            + pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Gains by the control's solve rate.")
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args(argv)
    print(page_section(table(args.draws)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
