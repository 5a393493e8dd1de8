"""A frontier point's test: does `sera` lie above MaxRL's Pass@1-Pass@K frontier at the same
Pass@1, once MaxRL's frontier is traced past the stored sweep's smallest step?

A "frontier" point (`kind = "frontier"` in its point.toml) adds cells to a stored sweep, from the
sweep's warm-up and on its stack, and evaluates each run at the end on more held-out prompts,
the sweep's first. Its registration holds the test (`[test]`: the methods, the K, the prompt
sets) and the predictions (`[[predictions]]`), written before its runs; this module only reads
them.

The test, for each `sera` cell: its Pass@K minus MaxRL's Pass@K at the cell's own Pass@1, read
from the straight line between the two MaxRL cells whose Pass@1 bracket it (MaxRL's cells that
another MaxRL cell beats at both Pass@1 and Pass@K are left out). A cell outside MaxRL's range
of Pass@1 gets no margin: the line is never drawn past the last cell. On the sweep's prompts
every cell of both points takes part (a cell both ran keeps the sweep's evaluation); on all of
the point's prompts only its own cells do. The interval is a 95% percentile bootstrap that
draws the prompts (the same draw for every cell) and each cell's seeds together; the
seeds-only interval, prompts held fixed, stands beside it.

    python -m sera.studies.frontier math-n0-4-320-frontier
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from sera import runstore
from sera.results import MIN_SEEDS, bracket, per_prompt_pass, verdict
from sera.studies.confirm.points import point
from sera.studies.confirm.storage import stored, stored_table
from sera.studies.sweep import multipliers

STACK = ("torch", "numpy", "transformers", "tokenizers", "python", "cpu_capability",
         "torch_threads", "warmup")
"""What two points' runs must share for their cells to be read together."""


def registration(name: str) -> dict:
    """The point's registration as read from its point.toml; ValueError unless it is a
    frontier point."""
    entry = runstore.read_registration(runstore.STUDY_DIR / name / runstore.REGISTRATION)
    if entry.get("kind") != "frontier":
        raise ValueError(f"{name} is no frontier point (kind = \"frontier\" in its point.toml)")
    return entry


def stacks(name: str) -> pd.DataFrame:
    """The stack every stored run of the point and of its sweep started on, one row per
    distinct stack: columns point, the STACK fields, runs."""
    rows = []
    for source in (registration(name)["sweep"], name):
        for run in stored(source)["runs"]:
            first = run["provenance"][0]
            rows.append({"point": source, **{key: first.get(key) for key in STACK}})
    table = pd.DataFrame(rows)
    return table.groupby(list(table.columns), dropna=False).size().rename("runs").reset_index()


def check_stack(name: str) -> None:
    """ValueError when the point's runs and its sweep's did not all run on one stack and
    instruction set from one warm-up: such cells are never read together."""
    table = stacks(name)
    if len(table.drop(columns=["point", "runs"]).drop_duplicates()) > 1:
        raise ValueError(f"{name} and its sweep ran on more than one stack, so their cells are "
                         f"not read together:\n{table.to_string(index=False)}")


def _final(source: str) -> pd.DataFrame:
    final = stored_table(source, "final")
    return final.assign(multiplier=final["arm"].map(multipliers(source)))


def pass_matrices(name: str, k: int, prompts: int) -> dict[tuple[str, float], np.ndarray]:
    """Every complete cell's (MIN_SEEDS seeds or more) Pass@K as a seeds x prompts array, by
    (method, multiplier), on the first `prompts` held-out prompts: the sweep's cells and the
    point's where `prompts` is the sweep's count (a cell in both keeps the sweep's evaluation),
    the point's own otherwise."""
    entry = registration(name)
    sweep_final = _final(entry["sweep"])
    sources = [_final(name)]
    if prompts <= sweep_final["prompt"].nunique():
        sources.insert(0, sweep_final)
    cells: dict[tuple[str, float], np.ndarray] = {}
    for final in sources:
        final = final[final["prompt"] < prompts]
        if final["prompt"].nunique() < prompts:
            continue  # runs evaluated on fewer prompts take no part
        for (method, mult), cell in final.groupby(["method", "multiplier"]):
            if (method, mult) in cells:
                continue
            if cell["seed"].nunique() < MIN_SEEDS:
                continue  # a cell whose seeds are still landing takes no part
            cell = cell.sort_values(["seed", "prompt"])
            values = per_prompt_pass(cell, k).reshape(cell["seed"].nunique(), prompts)
            cells[(method, float(mult))] = values
    return cells


def frontier_at(control: np.ndarray, x: float) -> float:
    """MaxRL's Pass@K at Pass@1 = x on the line between the two cells that bracket x; control:
    rows (Pass@1, Pass@K), one per cell. Cells another beats at both are left out; nan where x
    lies outside the remaining cells' Pass@1."""
    kept = np.array([row for row in control
                     if not np.any((control[:, 0] > row[0]) & (control[:, 1] > row[1]))])
    kept = kept[np.argsort(kept[:, 0])]
    if not kept[0, 0] <= x <= kept[-1, 0]:
        return math.nan
    return float(np.interp(x, kept[:, 0], kept[:, 1]))


def _gap(cells_1, cells_k, treatment, controls, seeds, prompts) -> tuple[float, float]:
    """One draw's two margins, each cell averaged over its drawn seeds and the drawn prompts:
    the treatment cell's Pass@K minus the control's frontier at its Pass@1 (the registered
    test), and minus the best Pass@K of the control's cells that reach its Pass@1 (a
    description: how far above every control cell with as high a Pass@1 it lies; nan where none
    reaches it)."""
    def mean(cell, table):
        return table[cell][np.ix_(seeds[cell], prompts)].mean()
    control = np.array([(mean(c, cells_1), mean(c, cells_k)) for c in controls])
    x, y = mean(treatment, cells_1), mean(treatment, cells_k)
    reaching = control[control[:, 0] >= x]
    best = y - reaching[:, 1].max() if len(reaching) else math.nan
    return y - frontier_at(control, x), best


def margins(name: str, draws: int | None = None, seed: int = 0) -> pd.DataFrame:
    """The registered test on every prompt set and K it names: one row per treatment cell with
    columns prompts, k, method, multiplier, pass1, passk, frontier, gap, low, high (prompts and
    seeds drawn), seeds_low, seeds_high (seeds only), seeds, bracketed, verdict (of the gap)."""
    check_stack(name)
    test = registration(name)["test"]
    draws = draws or test["draws"]
    rows = []
    for prompts in test["prompts"]:
        ones = pass_matrices(name, 1, prompts)
        controls = [c for c in ones if c[0] == test["control"]]
        for k in test["k"]:
            ks = pass_matrices(name, k, prompts)
            for cell in sorted(c for c in ones if c[0] == test["treatment"]):
                rows.append(_margin(ones, ks, cell, controls, prompts, k, draws, seed))
    return pd.DataFrame(rows)


def _margin(ones, ks, cell, controls, prompts, k, draws, seed) -> dict:
    every = {c: np.arange(len(ones[c])) for c in [cell, *controls]}
    all_prompts = np.arange(prompts)
    gap, best = _gap(ones, ks, cell, controls, every, all_prompts)
    pass1, passk = ones[cell].mean(), ks[cell].mean()
    rng = np.random.default_rng(seed)
    both, seeds_only = [], []
    for _ in range(draws if math.isfinite(gap) or math.isfinite(best) else 0):
        drawn = {c: rng.integers(0, len(s), len(s)) for c, s in every.items()}
        both.append(_gap(ones, ks, cell, controls, drawn, rng.integers(0, prompts, prompts)))
        seeds_only.append(_gap(ones, ks, cell, controls, drawn, all_prompts))
    both, seeds_only = np.array(both).reshape(-1, 2), np.array(seeds_only).reshape(-1, 2)
    low, high = _interval(both[:, 0]) if math.isfinite(gap) else (math.nan, math.nan)
    seeds_low, seeds_high = _interval(seeds_only[:, 0]) if math.isfinite(gap) else \
        (math.nan, math.nan)
    best_low, best_high = _interval(both[:, 1]) if math.isfinite(best) else (math.nan, math.nan)
    return {"prompts": prompts, "k": k, "method": cell[0], "multiplier": cell[1],
            "pass1": pass1, "passk": passk, "frontier": passk - gap, "gap": gap,
            "low": low, "high": high, "seeds_low": seeds_low, "seeds_high": seeds_high,
            "above_best": best, "best_low": best_low, "best_high": best_high,
            "seeds": len(ones[cell]), "bracketed": math.isfinite(gap),
            "verdict": verdict(gap, low, high, seeds=len(ones[cell]))
            if math.isfinite(gap) else verdict(gap, low, high)}


MAX_DROPPED = 0.05
"""The largest share of bootstrap draws that may fall outside MaxRL's cells (no margin) for the
interval to be given."""


def _interval(values) -> tuple[float, float]:
    values = np.asarray(values, float)
    if not len(values) or np.mean(~np.isfinite(values)) > MAX_DROPPED:
        return math.nan, math.nan
    low, high = np.quantile(values[np.isfinite(values)], [0.025, 0.975])
    return float(low), float(high)


def predictions(name: str, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each registered prediction against what the runs gave: columns prediction, arm, k,
    prompts, predicted, measured, held ("yes", "no", or "not run")."""
    entry = registration(name)
    steps = multipliers(name)
    rows = []
    for spec in entry.get("predictions", []):
        if "near" in spec:
            rows += _near(name, spec, steps)
        else:
            table = margins(name) if table is None else table
            rows += _range(spec, steps, table)
    return pd.DataFrame(rows)


def _near(name: str, spec: dict, steps: dict) -> list[dict]:
    method = point(name).arms[[a.name for a in point(name).arms].index(spec["arm"])].method
    rows = []
    for k, near in zip(spec["k"], spec["near"], strict=True):
        cell = pass_matrices(name, k, spec["prompts"]).get((method, steps[spec["arm"]]))
        measured = math.nan if cell is None else 100 * cell.mean()
        held = "not run" if cell is None else \
            "yes" if abs(measured - near) <= spec["within"] else "no"
        rows.append({"prediction": f"within {spec['within']:g} of {near:g}", "arm": spec["arm"],
                     "k": k, "prompts": spec["prompts"], "predicted": near,
                     "measured": measured, "held": held})
    return rows


def _range(spec: dict, steps: dict, table: pd.DataFrame) -> list[dict]:
    rows = []
    for arm in spec["arms"]:
        for k in spec["k"]:
            mine = table[(table["multiplier"] == steps[arm]) & (table["k"] == k)]
            for r in mine.itertuples() if len(mine) else [None]:
                low, high = (math.nan, math.nan) if r is None else (100 * r.low, 100 * r.high)
                held = "not run" if r is None else "no margin" if not r.bracketed else \
                    "yes" if low <= spec["high"] and high >= spec["low"] else "no"
                rows.append({"prediction": f"margin in [{spec['low']:+g}, {spec['high']:+g}]",
                             "arm": arm, "k": k, "prompts": None if r is None else r.prompts,
                             "predicted": (spec["low"] + spec["high"]) / 2,
                             "measured": math.nan if r is None else 100 * r.gap, "held": held})
    return rows


def reruns(name: str) -> pd.DataFrame:
    """Every run of the point that repeats a cell of its sweep, checked against it: its training
    curve (every metric logged before the final evaluation) the same value for value. Columns
    arm, seed, rows, identical."""
    entry = registration(name)
    mine, theirs = (stored_table(source, "metrics") for source in (name, entry["sweep"]))
    steps, sweep_steps = multipliers(name), multipliers(entry["sweep"])
    rows = []
    for (arm, seed), run in mine.groupby(["arm", "seed"]):
        method = run["method"].iloc[0]
        same = [a for a, m in sweep_steps.items() if m == steps[arm]
                and (theirs["arm"] == a).any() and theirs.loc[theirs["arm"] == a,
                                                              "method"].iloc[0] == method]
        if not same:
            continue
        old = theirs[(theirs["arm"] == same[0]) & (theirs["seed"] == seed)]
        curve = ["step", "metric", "k", "value"]
        a, b = (t[~t["metric"].isin(("pass", "tune_pass"))][curve].reset_index(drop=True)
                for t in (run, old))
        rows.append({"arm": arm, "seed": int(seed), "rows": len(a), "identical": a.equals(b)})
    return pd.DataFrame(rows, columns=["arm", "seed", "rows", "identical"])


def frontier_points() -> list[str]:
    """The registered frontier points with stored runs."""
    from sera.studies.confirm.points import POINTS

    return [name for name, p in POINTS.items() if p.kind == "frontier"
            and (runstore.STUDY_DIR / name / runstore.stored_file("final")).exists()]


def extending(sweep_name: str) -> list[str]:
    """The frontier points with stored runs that extend a sweep."""
    return [name for name in frontier_points() if registration(name)["sweep"] == sweep_name]


def page_section(name: str) -> str:
    """A frontier point's part of the results page: its test, its predictions against the runs,
    the reruns' check and the stack; "" before its first run is stored."""
    if name not in frontier_points():
        return ""
    entry, table = registration(name), margins(name)
    stack = stacks(name)
    rows = [{"prompts": r.prompts, "K": r.k, "`sera` step": f"{r.multiplier:g}x",
             "seeds": r.seeds, "Pass@1": f"{100 * r.pass1:.1f}", "Pass@K": f"{100 * r.passk:.1f}",
             "MaxRL at that Pass@1": f"{100 * r.frontier:.1f}" if r.bracketed else "-",
             "margin [prompts and seeds]": bracket(r.gap, r.low, r.high) if r.bracketed else "-",
             "[seeds only]": "[" + bracket(r.gap, r.seeds_low, r.seeds_high).split(" [", 1)[1]
             if r.bracketed else "-", "verdict": r.verdict,
             "above every MaxRL cell reaching its Pass@1": bracket(r.above_best, r.best_low,
                                                                   r.best_high)
             if np.isfinite(r.above_best) and np.isfinite(r.best_low) else "-"}
            for r in table.itertuples()]
    said = predictions(name, table)
    said = said.assign(
        measured=said["measured"].map(lambda v: "-" if not np.isfinite(v) else f"{v:.1f}"),
        prompts=said["prompts"].map(lambda v: "-" if pd.isna(v) else f"{int(v)}"))
    checked = reruns(name)
    same = int(checked["identical"].sum()) if len(checked) else 0
    first = stack.drop(columns=["point", "runs"]).iloc[0]
    seeds = stored_table(name, "final").groupby("arm")["seed"].nunique()
    missing = [f"`{a.name}`" + (f" ({seeds[a.name]} of {MIN_SEEDS} seeds)" if a.name in seeds
                                else "")
               for a in point(name).arms if seeds.get(a.name, 0) < MIN_SEEDS]
    return "\n".join([
        f"## {name}: MaxRL's frontier past the sweep's smallest step\n",
        entry["why"] + ".\n",
        f"Every run of this point and of `{entry['sweep']}` started from warm-up "
        f"`{first['warmup']}` on {first['cpu_capability']} with torch {first['torch']} and "
        f"{first['torch_threads']} thread (checked before any cell is read). Each `sera` cell's "
        f"Pass@K minus MaxRL's at the same Pass@1, on the line between the two MaxRL cells that "
        f"bracket it, in points; \"-\" where no two MaxRL cells bracket it "
        f"(`python -m sera.studies.frontier {name}`). The last column is a description, not "
        f"the registered test: the cell's Pass@K minus the best of the MaxRL cells whose Pass@1 "
        f"is at least its own (the rule the sweep's own frontier section uses), with the same "
        f"interval over prompts and seeds:\n",
        pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True) + "\n",
        "The predictions registered before the runs:\n",
        said.to_markdown(index=False, disable_numparse=True) + "\n",
        f"Reruns of the sweep's cells: {same} of {len(checked)} repeat its training curve "
        f"value for value." + (f" Not complete yet: {', '.join(missing)}." if missing else "")
        + "\n"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="A frontier point's registered test.")
    parser.add_argument("point")
    args = parser.parse_args(argv)
    table = margins(args.point)
    shown = table.assign(**{c: 100 * table[c] for c in
                            ("pass1", "passk", "frontier", "gap", "low", "high", "seeds_low",
                             "seeds_high", "above_best", "best_low", "best_high")})
    print(shown.round(1).assign(multiplier=table["multiplier"]).to_string(index=False))
    print(predictions(args.point, table).round(1).to_string(index=False))
    print(reruns(args.point).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
