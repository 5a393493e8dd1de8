"""A learning-rate sweep at a confirmation point: every (method, step) cell's Pass@K, the step each
method chooses on held-out prompts that do not report the result, the tuned comparison, and the
step-per-evidence account's registered predictions checked against the runs; and every word the
results page and the README say of them (`page_section`, `tuned_table`, `readme_tuned_table`).

The held-out prompts are split once, by index: even prompts choose each method's step (SELECT),
odd prompts report the comparison at the chosen steps (REPORT), so the choice never sees the
prompts it is judged on. A point is a sweep when its arms change only the learning rate
(`lr` in their changes) and some method runs at MIN_STEPS steps or more; the step multiplier is
that rate over the preset's. A method the point
runs at fewer than MIN_STEPS steps (an arm beside the sweep, at the preset step) has cells and
comparisons but no chosen step.

    python -m sera.studies.sweep maze-n0-8-long-lr      # tables, and its frontier figure
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from sera.results import MIN_SEEDS, bracket, per_prompt_pass, t_half_width, verdict, welch
from sera.studies.confirm.points import point
from sera.studies.confirm.storage import stored_points, stored_table
from sera.studies.diagnosis import drift, paired

SELECT, REPORT = "select", "report"
"""The two halves of the held-out prompts: even indices choose, odd ones report."""
KS = (1, 8, 32)
FRONTIER_KS = (8, 32)
MIN_STEPS = 3
"""The fewest steps a method runs at for the point to choose one of them."""


def half(prompts) -> np.ndarray:
    """SELECT for an even held-out prompt index, REPORT for an odd one."""
    return np.where(np.asarray(prompts) % 2 == 0, SELECT, REPORT)


def multipliers(name: str) -> dict[str, float]:
    """Each arm's step as a multiple of the preset's, by arm name; ValueError for an arm that
    changes anything but the learning rate (the point is then no sweep)."""
    p = point(name)
    out = {}
    for a in p.arms:
        changes = dict(a.changes)
        if set(changes) - {"lr"}:
            raise ValueError(f"{name}: arm {a.name!r} changes {sorted(set(changes) - {'lr'})}, "
                             f"not only the learning rate: not a sweep")
        out[a.name] = round(changes.get("lr", p.config.lr) / p.config.lr, 4)
    return out


def per_seed(name: str, ks=KS) -> pd.DataFrame:
    """Final Pass@K of every run, averaged over the prompts of each half and over all of them:
    columns method, multiplier, seed, k, split (SELECT, REPORT or "all"), value."""
    final = stored_table(name, "final")
    steps = multipliers(name)
    final = final.assign(multiplier=final["arm"].map(steps), split=half(final["prompt"]))
    rows = []
    for (method, mult, seed), run in final.groupby(["method", "multiplier", "seed"]):
        for k in ks:
            passed = per_prompt_pass(run, k)
            for split in (SELECT, REPORT, "all"):
                mine = np.ones(len(run), bool) if split == "all" else \
                    (run["split"] == split).to_numpy()
                rows.append({"method": method, "multiplier": mult, "seed": int(seed), "k": k,
                             "split": split, "value": float(passed[mine].mean())})
    return pd.DataFrame(rows)


def cells(name: str, split: str = "all", ks=KS) -> pd.DataFrame:
    """Mean Pass@K over seeds of every (method, multiplier) cell with its Student-t interval over
    seeds: columns method, multiplier, k, mean, low, high, seeds."""
    table = per_seed(name, ks)
    table = table[table["split"] == split]
    out = table.groupby(["method", "multiplier", "k"])["value"].agg(["mean", "std", "count"])
    half_width = t_half_width(out["std"].to_numpy(), out["count"].to_numpy())
    return pd.DataFrame({"mean": out["mean"], "low": out["mean"] - half_width,
                         "high": out["mean"] + half_width,
                         "seeds": out["count"]}).reset_index()


def chosen(name: str) -> pd.DataFrame:
    """Each method's step: the multiplier with the highest mean final Pass@1 on SELECT among the
    cells with MIN_SEEDS seeds or more (ties to the smaller step), the rule the point registered
    before its runs. Columns method, multiplier, select_pass1, cells (those it chose among),
    registered (the method's steps in the point's grid), at_edge (the choice is the grid's
    smallest or largest step, so the best may lie beyond). A choice among fewer cells than
    registered is provisional: `tuned` waits for the whole grid."""
    table = cells(name, SELECT, ks=(1,))
    rows = []
    for method, part in table[table["seeds"] >= MIN_SEEDS].groupby("method"):
        mine = grid_of(name, method)
        if len(mine) < MIN_STEPS:
            continue  # an arm beside the sweep
        part = part.sort_values("multiplier")
        best = part.loc[part["mean"].idxmax()]  # idxmax keeps the first: the smaller step
        rows.append({"method": method, "multiplier": float(best["multiplier"]),
                     "select_pass1": float(best["mean"]), "cells": len(part),
                     "registered": len(mine),
                     "at_edge": best["multiplier"] in (mine[0], mine[-1])})
    return pd.DataFrame(rows, columns=["method", "multiplier", "select_pass1", "cells",
                                       "registered", "at_edge"])


def grid_of(name: str, method: str) -> list[float]:
    """The step multipliers a method runs at in the point's registration."""
    p = point(name)
    steps = multipliers(name)
    return sorted({steps[a.name] for a in p.arms if a.method == method})


def compare_cells(name: str, treatment: tuple[str, float], control: tuple[str, float],
                  split: str = REPORT, ks=KS) -> pd.DataFrame:
    """Pass@K of one cell minus another's on a split, per K: Welch (unpaired) gain and interval,
    and the paired one over the seeds both ran (pairing by seed carries little once two runs
    have drifted apart). Each cell is (method, multiplier)."""
    table = per_seed(name, ks)
    table = table[table["split"] == split]
    rows = []
    for k in ks:
        a, b = (_cell(table[table["k"] == k], cell) for cell in (treatment, control))
        if len(a) < 2 or len(b) < 2:
            continue
        gain, low, high = welch(a, b)
        both = paired(pd.DataFrame({"a": a, "b": b}), "a", "b", 0.95)
        rows.append({"k": k, "gain": gain, "low": low, "high": high,
                     "paired_gain": both["gain"], "paired_low": both["low"],
                     "paired_high": both["high"], "seeds": (len(a), len(b))})
    return pd.DataFrame(rows)


def _cell(table: pd.DataFrame, cell: tuple[str, float]) -> pd.Series:
    """A (method, multiplier) cell's per-seed values, by seed."""
    mine = table[(table["method"] == cell[0]) & (table["multiplier"] == cell[1])]
    return mine.set_index("seed")["value"]


def tuned(name: str, treatment: str = "sera", control: str | None = None) -> pd.DataFrame:
    """The treatment at its chosen step against the control (default: the point's) at its own,
    on REPORT."""
    control = control or point(name).control
    picks = chosen(name).set_index("method")
    steps = picks["multiplier"]
    beside = [m for m in (treatment, control) if len(grid_of(name, m)) < MIN_STEPS]
    if beside:
        raise ValueError(f"{name}: {beside} run at fewer than {MIN_STEPS} steps, so no step is "
                         f"chosen for them")
    missing = [m for m in (treatment, control) if m not in steps]
    if missing:
        raise ValueError(f"{name}: no cell of {missing} has {MIN_SEEDS} seeds yet")
    waiting = [f"{m} ({picks.loc[m, 'cells']} of {picks.loc[m, 'registered']} steps)"
               for m in (treatment, control) if picks.loc[m, "cells"] < picks.loc[m, "registered"]]
    if waiting:
        raise ValueError(f"{name}: each method's step is chosen among its whole registered grid, "
                         f"and not every step has {MIN_SEEDS} seeds yet: {', '.join(waiting)}")
    out = compare_cells(name, (treatment, steps[treatment]), (control, steps[control]))
    return out.assign(treatment=f"{treatment} x{steps[treatment]:g}",
                      control=f"{control} x{steps[control]:g}")


def _above(cells: np.ndarray, x: float, y: float) -> float:
    """How far (x, y) lies above the frontier of `cells` (rows (Pass@1, Pass@K)) at Pass@1 = x:
    y minus the highest Pass@K of the cells whose Pass@1 is x or more (what the best of them
    reaching at least that Pass@1 gives); nan where none reaches it."""
    reaching = cells[cells[:, 0] >= x]
    return y - reaching[:, 1].max() if len(reaching) else math.nan


MAX_DROPPED = 0.05
"""The largest share of resampled draws frontier_gap may drop (no control cell reaching the
draw's Pass@1) and still give an interval."""


def frontier_gap(name: str, k: int, treatment: str = "sera", control: str | None = None,
                 split: str = "all", draws: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Does the treatment move the control's Pass@1-Pass@K frontier, or slide along it? For each
    treatment cell with MIN_SEEDS seeds or more, on the held-out prompts of `split` (REPORT
    where a chosen step is singled out: SELECT chose it): its Pass@K minus the best Pass@K among
    the control's cells whose Pass@1 is at least its own (_above). The interval is a bootstrap
    percentile interval (95%) from resampling each cell's seeds, draws times (a seed's Pass@1 and
    Pass@K together; the maximum over resampled control cells leans towards the control). A draw
    no control cell reaches is dropped; `dropped` is their share, and above MAX_DROPPED there is
    no interval. With 6 seeds a cell, percentile intervals run narrower than Student-t ones.
    gap nan where no control cell reaches the cell's Pass@1; no rows before both methods have a
    complete cell. Columns multiplier, pass1, passk, gap, low, high, dropped."""
    columns = ["multiplier", "pass1", "passk", "gap", "low", "high", "dropped"]
    control = control or point(name).control
    table = per_seed(name, ks=(1, k))
    table = table[table["split"] == split].pivot_table(
        index=["method", "multiplier", "seed"], columns="k", values="value")
    full = table.groupby(["method", "multiplier"]).size()
    full = full[full >= MIN_SEEDS]
    methods = set(full.index.get_level_values("method"))
    if not {treatment, control} <= methods:
        return pd.DataFrame(columns=columns)

    def cells_of(method):
        steps = sorted(full.loc[method].index)
        return steps, [table.loc[(method, m)].to_numpy() for m in steps]

    _, theirs = cells_of(control)
    rng = np.random.default_rng(seed)
    rows = []
    for mult, cell in zip(*cells_of(treatment), strict=True):
        x, y = cell.mean(axis=0)
        gap = _above(np.array([c.mean(axis=0) for c in theirs]), x, y)
        low = high = dropped = math.nan
        if math.isfinite(gap):
            drawn = np.array([_resampled_gap(theirs, cell, rng) for _ in range(draws)])
            dropped = float(np.mean(~np.isfinite(drawn)))
            if dropped <= MAX_DROPPED:
                low, high = np.quantile(drawn[np.isfinite(drawn)], [0.025, 0.975])
        rows.append({"multiplier": float(mult), "pass1": float(x), "passk": float(y),
                     "gap": gap, "low": float(low), "high": float(high), "dropped": dropped})
    return pd.DataFrame(rows, columns=columns)


def _resampled_gap(theirs: list[np.ndarray], cell: np.ndarray, rng) -> float:
    """One bootstrap draw of frontier_gap: every control cell's seeds resampled (in order), then
    the treatment cell's; each cell is seeds x (Pass@1, Pass@K)."""
    control = np.array([c[rng.integers(0, len(c), len(c))].mean(axis=0) for c in theirs])
    return _above(control, *cell[rng.integers(0, len(cell), len(cell))].mean(axis=0))


def chosen_frontier(name: str, k: int, method: str = "sera") -> pd.Series:
    """frontier_gap's row (gap, low, high, ...) at the method's chosen step, on the reporting
    half (SELECT chose the step); KeyError until the method has a chosen step with its cell."""
    step = chosen(name).set_index("method").loc[method, "multiplier"]
    return frontier_gap(name, k, method, split=REPORT).set_index("multiplier").loc[step]


def second_half(name: str, metric: str) -> pd.DataFrame:
    """How a training metric moved over the second half of every run, per cell (drift over the
    steps from half-way on): columns method, multiplier, start, end, change, low, high, below."""
    metrics = stored_table(name, "metrics")
    metrics = metrics[(metrics["metric"] == metric)
                      & (metrics["step"] >= metrics["step"].max() / 2)]
    table = drift(metrics, metric, k=None)
    steps = multipliers(name)
    arms = table["arm"]
    return table.assign(method=arms.map(lambda a: a.split(" ")[0]),
                        multiplier=arms.map(steps)).drop(columns="arm")


def account(name: str, control: str | None = None, step: float = 1.3) -> dict:
    """The registered prediction (a): the control (default: the point's) at `step` x the preset
    against itself at 1x
    on all held-out prompts at Pass@1, with how many seeds ended below the warm-up and how its
    training reward and token entropy moved over the second half."""
    control = control or point(name).control
    gap = compare_cells(name, (control, step), (control, 1.0), split="all", ks=(1,))
    if gap.empty or min(gap.iloc[0]["seeds"]) < MIN_SEEDS:
        return {}  # until both cells have their seeds
    metrics = stored_table(name, "metrics")
    evaluations = metrics[(metrics["metric"] == "val_pass") & (metrics["k"] == 1)]
    steps = multipliers(name)
    mine = evaluations[evaluations["arm"].map(steps).eq(step)
                       & evaluations["method"].eq(control)]
    start = mine[mine["step"] == 0].set_index("seed")["value"]
    end = mine[mine["step"] == mine["step"].max()].set_index("seed")["value"]
    trends = {m: second_half(name, m).set_index(["method", "multiplier"]).loc[(control, step)]
              for m in ("train_reward", "token_entropy")}
    return {**gap.iloc[0].to_dict(), "below_warmup": int((end < start.reindex(end.index)).sum()),
            "seeds": int(end.size), "reward_change": float(trends["train_reward"]["change"]),
            "entropy_change": float(trends["token_entropy"]["change"])}


def is_sweep(name: str) -> bool:
    """Whether every arm of the point changes only the learning rate and some method runs at
    MIN_STEPS steps or more."""
    if point(name).kind != "point":
        return False
    try:
        return any(len(grid_of(name, m)) >= MIN_STEPS for m in {a.method for a in point(name).arms})
    except ValueError:  # an arm changes more than the learning rate
        return False


def figure_name(name: str) -> str:
    """The frontier figure's file name (figures/<it>.png), in the letters a figure name takes."""
    return f"lr_frontier_{name.replace('-', '_')}"


def section(name: str) -> str:
    """The results page's section of one sweep: every cell at K = 1, 8, 32 (all held-out
    prompts), each method's chosen step, the tuned comparison on REPORT, how far `sera` lies
    above MaxRL's frontier, the account's predictions (a) and (b), and the frontier figure."""
    table = cells(name)
    wide = []
    for (method, mult), part in table.groupby(["method", "multiplier"]):
        part = part.set_index("k")
        wide.append({"method": method, "step (x preset)": f"{mult:g}",
                     "seeds": int(part["seeds"].min()),
                     **{f"Pass@{k}": bracket(*part.loc[k, ["mean", "low", "high"]], sign="")
                        for k in KS if k in part.index}})
    picks = chosen(name)
    lines = [f"### {name}: the learning-rate sweep\n",
             f"Final held-out Pass@K in percent with its 95% interval over seeds, every prompt "
             f"(`python -m sera.studies.sweep {name}`; frontier: "
             f"[figures/{figure_name(name)}.png](../figures/{figure_name(name)}.png)).\n",
             pd.DataFrame(wide).to_markdown(index=False, disable_numparse=True), ""]
    if not picks.empty:
        said = "; ".join(f"{r.method} {r.multiplier:g}x (Pass@1 {100 * r.select_pass1:.1f} on "
                         f"the selection half, among {r.cells} complete steps of {r.registered}"
                         f"{', at the edge of the grid' if r.at_edge else ''}"
                         f"{', provisional' if r.cells < r.registered else ''})"
                         for r in picks.itertuples())
        lines.append(f"Each method's step, chosen on the even held-out prompts: {said}.\n")
    try:
        gap = tuned(name)
    except ValueError as exc:
        lines.append(f"No tuned comparison yet: {exc}.\n")
    else:
        rows = [{"comparison": f"{r.treatment} against {r.control}", "K": r.k,
                 "Welch gain [95% interval]": bracket(r.gain, r.low, r.high),
                 "paired gain [95% interval]": bracket(r.paired_gain, r.paired_low,
                                                        r.paired_high),
                 "seeds": f"{r.seeds[0]} and {r.seeds[1]}"} for r in gap.itertuples()]
        lines += ["The tuned comparison, on the odd held-out prompts only:\n",
                  pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True), ""]
    lines += _frontier_lines(name) + _account_lines(name)
    return "\n".join(lines)


def _called(control: str) -> str:
    """How the page's prose names a point's control: MaxRL, or the arm's name."""
    return "MaxRL" if control == "maxrl" else f"`{control}`"


def _frontier_lines(name: str) -> list[str]:
    """The section's frontier table (frontier_gap at FRONTIER_KS), as markdown lines."""
    control = _called(point(name).control)
    frontier = []
    for k in FRONTIER_KS:
        for r in frontier_gap(name, k).itertuples():
            above = bracket(r.gap, r.low, r.high) if math.isfinite(r.gap) else \
                f"no {control} step reaches its Pass@1"
            frontier.append({"sera step": f"{r.multiplier:g}x", "K": k,
                             "Pass@1": f"{100 * r.pass1:.1f}", "Pass@K": f"{100 * r.passk:.1f}",
                             f"above {control}'s frontier [95% interval]": above})
    if not frontier:
        return []
    return ["Does `sera` move the frontier or slide along it? Each `sera` cell's Pass@K minus the "
            f"best Pass@K of the {control} steps that reach at least its Pass@1, on every held-out "
            "prompt (95% bootstrap percentile interval, each cell's seeds resampled 2,000 times; "
            "with 6 seeds such intervals run narrower than Student-t ones):\n",
            pd.DataFrame(frontier).to_markdown(index=False, disable_numparse=True), ""]


def _account_lines(name: str) -> list[str]:
    """The account's predictions (a) and (b) as measured, once their cells are complete."""
    control = _called(point(name).control)
    lines = []
    checked = account(name)
    if checked:
        lines.append(
            f"The step-per-evidence account's prediction (a), {control} at 1.3x against {control} "
            f"at 1x "
            f"(predicted at least 5 points behind at Pass@1, interval below zero): "
            f"{bracket(checked['gain'], checked['low'], checked['high'])} (Welch), "
            f"{checked['below_warmup']} of {checked['seeds']} seeds below the warm-up; over the "
            f"second half its training reward moved {100 * checked['reward_change']:+.1f} "
            f"points and its token entropy {checked['entropy_change']:+.3f}.\n")
    ratio = step_ratio(name)
    if ratio:
        lines.append(
            f"The account's prediction (b), each method's best step in proportion to its "
            f"evidence (`sera`'s about 0.75 of {control}'s; the registration names what refutes "
            f"it): `sera` chose "
            f"{ratio['sera']:g}x and {control} {ratio['control']:g}x, a ratio of "
            f"{ratio['ratio']:.2f} ({ratio['side']} {control}'s).\n")
    return lines


def step_ratio(name: str, treatment: str = "sera") -> dict:
    """The prediction (b) as measured: the treatment's chosen step over the control's, once both
    are chosen among their whole grids ({} before): keys sera, control, ratio and side ("below",
    "at" or "above" the control's step)."""
    picks = chosen(name).set_index("method")
    control = point(name).control
    if not {treatment, control} <= set(picks.index) or \
            (picks["cells"] < picks["registered"]).loc[[treatment, control]].any():
        return {}
    mine, theirs = picks.loc[treatment, "multiplier"], picks.loc[control, "multiplier"]
    side = "below" if mine < theirs else "at" if mine == theirs else "above"
    return {"sera": float(mine), "control": float(theirs), "ratio": float(mine / theirs),
            "side": side}


def tuned_table() -> str:
    """The headline of the README and notebook 08: at every stored learning-rate sweep, the
    paper's `sera` at its own chosen step against the control at its own, per K on the reporting
    half of the held-out prompts (`tuned`), with each side's step and the control's Pass@K; a
    sweep whose grid is still landing is named with what it waits for."""
    rows, waiting, said = [], [], []
    for name in filter(is_sweep, stored_points()):
        try:
            gap = tuned(name)
        except ValueError as exc:
            waiting.append(str(exc))
            continue
        said.append(_tuned_sentence(name, gap))
        control = point(name).control
        picks = chosen(name).set_index("method")["multiplier"]
        level = cells(name, REPORT).set_index(["method", "multiplier", "k"])["mean"]
        for r in gap.itertuples():
            own = level[(control, picks[control], r.k)]
            rows.append({"point": name, "K": r.k,
                         f"{control}: its step, Pass@K": f"{picks[control]:g}x: {100 * own:.1f}",
                         "sera: its step": f"{picks['sera']:g}x",
                         "gain, Welch [95% interval]": bracket(r.gain, r.low, r.high),
                         "paired [95% interval]": bracket(r.paired_gain, r.paired_low,
                                                           r.paired_high),
                         "seeds": f"{r.seeds[0]} and {r.seeds[1]}"})
    parts = [pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)] if rows else []
    return "\n\n".join(parts + said + [f"Not yet tuned: {reason}." for reason in waiting])


def _tuned_sentence(name: str, gap: pd.DataFrame) -> str:
    """The tuned comparison of one sweep in words: its verdict at each K (sera.results.verdict,
    Welch), and how far `sera` at its step lies above the control's frontier at the largest K."""
    control = point(name).control
    verdicts = ", ".join(f"{verdict(r.gain, r.low, r.high)} at Pass@{r.k}"
                         for r in gap.itertuples())
    k = max(FRONTIER_KS)
    above = chosen_frontier(name, k)
    by = (bracket(above["gap"], above["low"], above["high"]) if math.isfinite(above["low"])
          else f"{100 * above['gap']:+.1f} (too many draws dropped for an interval)")
    # the verdict first, from the interval (sera.results.verdict), then the distance
    where = (f"is {verdict(above['gap'], above['low'], above['high'])} against {control}'s "
             f"Pass@1-Pass@{k} frontier on the same half, {by} points from it (the best "
             f"{control} step reaching its Pass@1; bootstrap percentile interval)"
             if math.isfinite(above["gap"]) else f"lies above every {control} step at Pass@1")
    return (f"`{name}`: tuned, `sera` is {verdicts} against {control}; at its step it "
            f"{where}.")


def readme_tuned_table() -> str:
    """tuned_table, and below it each sweep's Pass@1-Pass@K frontier."""
    figures = [f"![{name}: the Pass@1-Pass@K frontier](figures/{figure_name(name)}.png)"
               for name in filter(is_sweep, stored_points())]
    return "\n\n".join([tuned_table(), *figures])


def page_section() -> str:
    """The results page's section on the stored learning-rate sweeps, one `section` each: cells,
    chosen steps, the tuned comparison and the frontier; "" when none is stored."""
    parts = [section(name) for name in stored_points() if is_sweep(name)]
    if not parts:
        return ""
    return ("## Each method at its own step: learning-rate sweeps\n\n"
            "A method compared at a tuned step against a baseline at an untuned one measures the "
            "tuning. Each sweep trains MaxRL and the paper's `sera` at a grid of step multipliers "
            "on one instruction set and library stack; each method's step is chosen on half of "
            "the held-out prompts and the comparison reported on the other half.\n\n"
            + "\n".join(parts))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="A learning-rate sweep's tables and frontier.")
    parser.add_argument("point")
    parser.add_argument("--no-figure", action="store_true")
    args = parser.parse_args(argv)
    pd.set_option("display.width", 160)
    for split in ("all", SELECT, REPORT):
        print(f"\nPass@K by cell, held-out prompts: {split}")
        print(cells(args.point, split).round(4).to_string(index=False))
    print("\nEach method's step, chosen on", SELECT)
    print(chosen(args.point).to_string(index=False))
    try:
        print("\nTuned comparison on", REPORT)
        print(tuned(args.point).round(4).to_string(index=False))
    except ValueError as exc:
        print(exc)
    print("\nThe account's prediction (a):", account(args.point))
    if not args.no_figure:
        from sera.plotting import savefig
        from sera.plotting.sweep import plot_frontier

        print(savefig(plot_frontier(cells(args.point), title=args.point),
                      figure_name(args.point)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
