"""Step selection that survives the split: a sweep's comparison with each method tuned for the
K it is read at, cross-fitted over the two halves of the held-out prompts.

For each K: each method's step is the one with the highest mean Pass@K over its seeds on one
half (even prompt index; ties go to the smaller step), and the two methods are compared at
those steps on the other half; then the halves swap roles, and the gain is the mean of the two.
So a Pass@K lead is against MaxRL tuned for that K, and no prompt both chooses a step and judges
it. The interval is a 95% percentile bootstrap that draws the prompts (within each half, the
same draw for every cell) and every cell's seeds, and chooses the steps again in every draw, so
it carries the choice's own uncertainty; the seeds-only interval (prompts held fixed) stands
beside it. Leave-one-seed-out stability: how many of the fits without one seed choose the same
step, in each direction.

    python -m sera.studies.crossfit math-n0-4-320-lr
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from sera.results import MIN_SEEDS, bracket, per_prompt_pass, verdict
from sera.studies import frontier, sweep
from sera.studies.confirm.points import point
from sera.studies.confirm.storage import stored_table

KS = (1, 8, 32)
DRAWS = 2000


def cell_matrices(name: str, k: int) -> dict[str, dict[float, np.ndarray]]:
    """Every complete cell (MIN_SEEDS seeds or more) of the sweep's methods that run at
    sweep.MIN_STEPS steps or more: by method, then multiplier, its Pass@K as a seeds x prompts
    array (seeds and prompts in order). The complete cells of a frontier point that extends the
    sweep join them, on the sweep's prompts (sera.studies.frontier checks they share its stack;
    a cell both ran keeps the sweep's evaluation)."""
    final = stored_table(name, "final")
    final = final.assign(multiplier=final["arm"].map(sweep.multipliers(name)))
    out: dict[str, dict[float, np.ndarray]] = {}
    for (method, mult), cell in final.groupby(["method", "multiplier"]):
        if len(sweep.grid_of(name, method)) < sweep.MIN_STEPS or \
                cell["seed"].nunique() < MIN_SEEDS:
            continue
        cell = cell.sort_values(["seed", "prompt"])
        values = per_prompt_pass(cell, k).reshape(cell["seed"].nunique(), -1)
        out.setdefault(method, {})[float(mult)] = values
    prompts = final["prompt"].nunique()
    for extension in frontier.extending(name):
        frontier.check_stack(extension)
        for (method, mult), values in frontier.pass_matrices(extension, k, prompts).items():
            if method in out:
                out[method].setdefault(mult, values)
    return out


def _means(cell: np.ndarray, seeds: np.ndarray, prompts: np.ndarray) -> np.ndarray:
    """Per draw (rows): the cell's mean over the drawn seeds (draws x seeds positions) and the
    drawn prompts (draws x prompt weights summing to one)."""
    weights = np.zeros((len(seeds), len(cell)))
    for column in seeds.T:
        weights[np.arange(len(seeds)), column] += 1 / seeds.shape[1]
    return ((weights @ cell) * prompts).sum(axis=1)


def _fits(cells, seeds, halves) -> dict:
    """Per direction (0: even chooses, odd reports; 1: the other way), per method: the chosen
    step's index in sorted order and its Pass@K on the reporting half, per draw."""
    out = {}
    for direction, (choose, report) in enumerate((halves, halves[::-1])):
        for method, steps in cells.items():
            grid = sorted(steps)
            chosen = np.stack([_means(steps[m], seeds[method, m], choose) for m in grid], axis=1)
            reported = np.stack([_means(steps[m], seeds[method, m], report) for m in grid],
                                axis=1)
            pick = chosen.argmax(axis=1)  # argmax keeps the first: the smaller step
            out[direction, method] = pick, reported[np.arange(len(pick)), pick]
    return out


def _prompt_weights(n: int, draws: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The two halves' prompt weights (even, odd), each row summing to one: every prompt of the
    half once (draws None), or each draw's prompts drawn again within the half."""
    halves = []
    for parity in (0, 1):
        members = np.arange(parity, n, 2)
        if draws is None:
            picked = members[None]
        else:
            picked = members[draws[parity]]
        weights = np.zeros((len(picked), n))
        for column in picked.T:
            weights[np.arange(len(picked)), column] += 1 / picked.shape[1]
        halves.append(weights)
    return halves[0], halves[1]


def compare(name: str, k: int, treatment: str = "sera", control: str | None = None,
            draws: int = DRAWS, seed: int = 0) -> dict:
    """The cross-fitted comparison at K: steps chosen in each direction, gain, its intervals
    (prompts and seeds; seeds only), leave-one-seed-out stability and the verdict."""
    control = control or point(name).control
    cells = {m: c for m, c in cell_matrices(name, k).items() if m in (treatment, control)}
    if set(cells) != {treatment, control}:
        raise ValueError(f"{name}: {treatment} and {control} both need complete cells at "
                         f"{sweep.MIN_STEPS} steps or more")
    n_prompts = next(iter(next(iter(cells.values())).values())).shape[1]

    def all_seeds(rows):
        return {(m, s): np.tile(np.arange(len(c)), (rows, 1))
                for m, steps in cells.items() for s, c in steps.items()}

    whole = _fits(cells, all_seeds(1), _prompt_weights(n_prompts, None))
    gain = float(np.mean([whole[d, treatment][1][0] - whole[d, control][1][0] for d in (0, 1)]))
    rng = np.random.default_rng(seed)
    drawn_seeds = {(m, s): rng.integers(0, len(c), (draws, len(c)))
                   for m, steps in cells.items() for s, c in steps.items()}
    half = (n_prompts + 1) // 2, n_prompts // 2
    drawn_prompts = [rng.integers(0, h, (draws, h)) for h in half]
    both = _fits(cells, drawn_seeds, _prompt_weights(n_prompts, drawn_prompts))
    seeds_only = _fits(cells, drawn_seeds, _prompt_weights(n_prompts, None))
    low, high = _interval(both, treatment, control)
    seeds_low, seeds_high = _interval(seeds_only, treatment, control)
    grids = {m: sorted(steps) for m, steps in cells.items()}
    picks = {m: [grids[m][whole[d, m][0][0]] for d in (0, 1)] for m in cells}
    n_seeds = min(len(c) for steps in cells.values() for c in steps.values())
    return {"point": name, "k": k, "treatment": treatment, "control": control,
            "treatment_steps": picks[treatment], "control_steps": picks[control],
            "gain": gain, "low": low, "high": high, "seeds_low": seeds_low,
            "seeds_high": seeds_high, "seeds": n_seeds,
            "stable": {m: _stability(cells, m, picks[m]) for m in cells},
            "at_edge": {m: any(s in (grids[m][0], grids[m][-1]) for s in picks[m])
                        for m in cells},
            "verdict": verdict(gain, low, high, seeds=n_seeds)}


def _interval(fits, treatment, control) -> tuple[float, float]:
    gains = np.mean([fits[d, treatment][1] - fits[d, control][1] for d in (0, 1)], axis=0)
    low, high = np.quantile(gains, [0.025, 0.975])
    return float(low), float(high)


def _stability(cells, method, picks) -> tuple[int, int, int]:
    """(fits that keep the step chosen with every seed, even-chooses direction; the same, other
    direction; fits): one fit per seed left out of every cell."""
    steps = cells[method]
    n = min(len(c) for c in steps.values())
    grid = sorted(steps)
    halves = _prompt_weights(next(iter(steps.values())).shape[1], None)
    kept = [0, 0]
    for out in range(n):
        rows = {(method, s): np.array([[i for i in range(len(c)) if i != out]])
                for s, c in steps.items()}
        fits = _fits({method: steps}, rows, halves)
        for d in (0, 1):
            kept[d] += grid[fits[d, method][0][0]] == picks[d]
    return kept[0], kept[1], n


def table(names=None, ks=KS, draws: int = DRAWS) -> pd.DataFrame:
    """compare() for every stored sweep (or `names`) and K its evaluation allows."""
    names = names if names is not None else \
        [n for n in sweep.stored_points() if sweep.is_sweep(n)]
    rows = [compare(name, k, draws=draws) for name in names for k in ks
            if k <= point(name).config.final_samples]
    return pd.DataFrame(rows)


def page_section(found: pd.DataFrame | None = None) -> str:
    """The page's cross-fitted section: one row per sweep and K."""
    found = table() if found is None else found
    if found.empty:
        return ""
    rows = []
    for r in found.itertuples():
        stable = "; ".join(f"{m} {a}/{n} and {b}/{n}" for m, (a, b, n) in r.stable.items())
        rows.append({
            "point": r.point, "K": r.k,
            f"{r.control}: its steps": " / ".join(f"{s:g}x" for s in r.control_steps),
            f"{r.treatment}: its steps": " / ".join(f"{s:g}x" for s in r.treatment_steps),
            "gain [prompts and seeds]": bracket(r.gain, r.low, r.high),
            "[seeds only]": "[" + bracket(r.gain, r.seeds_low, r.seeds_high).split(" [", 1)[1],
            "same step without one seed": stable, "verdict": r.verdict})
    return ("## Each method tuned for each K, cross-fitted\n\n"
            "Each method's step is chosen for the K it is read at, on one half of the held-out "
            "prompts, and the two are compared on the other half; then the halves swap, and the "
            "gain is the mean of the two (`sera.studies.crossfit`). Steps are given as "
            "even-half / odd-half choices. The 95% interval draws the prompts and the seeds and "
            "chooses the steps again in every draw; drawing both counts each seed's sampling "
            "noise twice, so it errs wide, where the seeds-only interval, which holds the "
            "prompts fixed, errs narrow. The verdicts of this section are the package's "
            "verdicts on the sweeps; the single split registered before the runs stays in the "
            "section below. A frontier point that extends a sweep adds its complete cells to "
            "the sweep's grid, on the sweep's prompts.\n\n"
            + pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="A sweep's cross-fitted comparison.")
    parser.add_argument("points", nargs="*")
    parser.add_argument("--draws", type=int, default=DRAWS)
    args = parser.parse_args(argv)
    print(page_section(table(args.points or None, draws=args.draws)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
