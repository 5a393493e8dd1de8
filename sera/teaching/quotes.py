"""Numbers the study notebooks' prose quotes from the stored runs, filled in from the tables.

A markdown cell tagged `quoted` keeps its text as a template in `metadata["sera"]["template"]`,
with a field wherever it quotes a stored result; the cell's source is the template filled from
data/study/. A field is `{kind|point|arm|k}` (k where the kind has one; the gains also read the
digits check, sera.studies.digits, as point digits-n0-16):

    gain        the arm's paired gain over MaxRL in points, signed       {gain|maze-n0-8|grpo|32}
    size        the same without its sign ("4.1 points behind")
    interval    its 95% interval over seeds, "-6.1 to -2.2"
    bracket     gain and interval, "-6.6 [-9.8, -3.3]"
    predicted   the simulator's prediction written before the runs, signed
    predicted_size  the same without its sign
    predicted_bracket  the prediction with its interval over the simulator's repetitions
    seeds_needed    the seeds the power calculation asked for, from the same prediction
    seeds       the seeds of the comparison                                {seeds|point|arm}
    below       the arm's seeds whose held-out Pass@1 ended below its start    {below|point|arm}
    above       the rest of its seeds
    start, end  the arm's held-out Pass@1 over its runs' first and last evaluations
    start_pct, end_pct  the same in percent
    change_bracket  end - start in points with its interval over seeds
    length_start, length_end  the arm's mean response length, in tokens, over the same windows
    length_change_bracket, length_below  its change with its interval; seeds whose length fell

An arm written "A vs B" (gain, size, interval, bracket, seeds) is A's paired gain over arm B of
the same point instead of over MaxRL. The diagnosis kinds name a row after "@":

    band_bracket, band_size   an arm's training success minus MaxRL's in the last epoch, in a
                              warm-up difficulty band ("all", "never solved", "(0, 0.25]", ...)
                              {band_bracket|maze-n0-8-long|sera-rate@never solved}
    band_rollouts, band_signal   its rollouts a visit there; the share (%) in mixed groups
    cover_bracket             held-out share never solved ("unsolved") or solved half the time
                              ("solid"), minus MaxRL's    {cover_bracket|point|sera-rate@solid}
    signal_range              the lowest and highest share (%) of the arm's rollouts in mixed
                              groups over the epochs from the one named (counted from 0)
    success_first, success_last  its training success rate in the first and last epoch
    success_change_bracket    last minus first, in points, with its interval over seeds
    evidence_first, evidence_second  successes in mixed groups a step, each half of the run
    screen_bracket, screen_gap   the screen's training-reward gap over MaxRL (sera.studies.screen)

The learning-rate sweeps at a confirmation point (sera.studies.sweep: maze-n0-8-long-lr,
math-n0-4-320-lr) give a method's chosen step as a multiple of the preset's (step_chosen), and
the tuned comparison, on the held-out prompts that did not choose: the method at its step minus
the point's control at its own, Welch, in points (step_bracket, step_gain, step_interval), and
how far the method at its chosen step lies above the control's Pass@1-Pass@K frontier on the
same prompts, with its bootstrap interval (frontier_bracket, K 32 unless given; sweep.frontier_gap)
    {step_chosen|maze-n0-8-long-lr|sera}    {step_bracket|maze-n0-8-long-lr|sera|8}

The package's verdicts on the sweeps are cross-fitted (sera.studies.crossfit: each method's step
chosen for each K on one half and read on the other, both ways): the gain with its interval over
prompts and seeds (cross_bracket), its verdict (cross_verdict) and a method's two choices as one
step or a range ("0.35" or "0.35-0.5", cross_steps)
    {cross_bracket|math-n0-4-320-lr|sera|32}    {cross_steps|math-n0-4-320-lr|maxrl|32}

The tuning sweeps of notebook 06 (sera.studies.tuning: digits-lr, maze-lr) give, with the
sweep's name in the point's place, a method's gain over `sera-rate` in points with each method
at its own best rate (tuned_bracket, tuned_size, tuned_interval) or every method at the sweep's
shared rate (shared_bracket, shared_size, shared_interval; the rate: {shared_lr|sweep|all}),
its chosen rate (best_lr), its runs
and how many stopped early (runs, stopped: methods joined by "+" count together; stopped_first,
stopped_last: the earliest and latest step a run stopped at) and its
rollouts per run at its best rate (rollouts)
    {tuned_bracket|maze-lr|knapsack|1}    {best_lr|digits-lr|sera-rate}

    python -m sera.teaching.quotes          # fill every quoted cell from the stored runs
    python -m sera.teaching.quotes --check  # exit 1 when a cell's numbers differ from the runs

tests/test_quotes.py checks the notebooks are filled from the runs as stored and that no quoted
cell holds a decimal number outside a field.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import sys
from pathlib import Path

import nbformat
import pandas as pd

from sera.results import bracket, t_half_width
from sera.teaching.notebook_files import ROOT, notebooks, strip

TAG = "quoted"
DIAGNOSIS_KINDS = ("band_bracket", "band_size", "band_rollouts", "band_signal", "cover_bracket",
                   "signal_range", "success_first", "success_last", "success_change_bracket",
                   "evidence_first",
                   "evidence_second", "screen_bracket", "screen_gap")
TUNING_KINDS = ("tuned_bracket", "tuned_size", "tuned_interval", "shared_bracket", "shared_size",
                "shared_interval", "best_lr", "shared_lr", "stopped", "stopped_first",
                "stopped_last", "runs", "rollouts")
SWEEP_KINDS = ("step_chosen", "step_bracket", "step_gain", "step_interval", "frontier_bracket",
               "cross_bracket", "cross_verdict", "cross_steps")
FIELD = re.compile(r"\{(\w+)\|([^{}|]+)\|([^{}|]+)(?:\|(\d+))?\}")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+")


@functools.cache
def _compared(point: str):
    from sera.studies import confirm, digits

    if point == digits.NAME:  # the regime map's digits check, stored apart from the points
        table = digits.compare()
        return table.assign(measured=table["gain"] / 100, low=table["low"] / 100,
                            high=table["high"] / 100).set_index(["arm", "k"])
    return confirm.compare(point).set_index(["arm", "k"])


@functools.cache
def _predicted(point: str):
    from sera.studies import confirm

    return confirm.read_prediction(point).set_index(["arm", "k"])


@functools.cache
def _drift(point: str, metric: str):
    from sera.studies import confirm, diagnosis

    metrics = confirm.load(point).metrics
    if metric == "val_pass":
        return diagnosis.drift(metrics).set_index("arm")
    return diagnosis.drift(metrics, metric, None).set_index("arm")


@functools.cache
def _versus(point: str, treatment: str, control: str):
    from sera.results import paired_gain
    from sera.studies import confirm

    final = confirm.load(point).final
    table = paired_gain(final.assign(method=final["arm"]), treatment, control, by=(),
                        ks=(1, 8, 32))
    return table.rename(columns={"gain": "measured"}).set_index("k")


@functools.cache
def _diagnosis(point: str, what: str):
    """The point's diagnosis tables, read from its stored runs (trains nothing)."""
    from sera.studies import confirm, diagnosis, screen

    runs = confirm.load(point)
    if what == "bands":
        profile = confirm.profile(confirm.point(point))
        return pd.concat([diagnosis.band_gains(runs.allocations),
                          diagnosis.band_gains(runs.allocations, profile)]).astype(
            {"band": str}).set_index(["arm", "band"])
    if what == "cover":
        return diagnosis.coverage(runs.final).set_index(["arm", "share"])
    if what == "curves":
        return diagnosis.training_curves(runs.allocations)
    if what == "evidence":
        return diagnosis.evidence(runs.allocations)
    return screen.gaps(point).set_index("arm")


@functools.cache
def _tuning(name: str):
    """A stored tuning sweep: its results, each method's chosen rate, and each method's gain over
    sera-rate at its own best rate and at the sweep's shared rate (K = 1, 8, 16, 64, 128)."""
    from sera.results import gains_against
    from sera.studies import tuning

    results = tuning.load(name)
    chosen = tuning.best(results.metrics)
    drawn = results.final["n"].min() if "n" in results.final else None  # None: exact p
    ks = [k for k in (1, 8, 16, 64, 128) if drawn is None or k <= drawn]
    parts = {"tuned": tuning.at_best(results, chosen),
             "shared": tuning.at_lr(results, tuning.sweep(name).base.lr)}
    gains = {how: gains_against(part.final, "sera-rate", by=(), ks=ks).set_index(["method", "k"])
             for how, part in parts.items()}
    return results, chosen.set_index("method"), gains, parts["tuned"]


def _tuned(kind: str, name: str, method: str, k: int | None) -> str:
    results, chosen, gains, tuned = _tuning(name)
    if kind == "best_lr":
        return f"{float(chosen.loc[method, 'best lr']):.4g}"
    if kind == "shared_lr":  # the sweep's shared rate, whatever the method field says
        from sera.studies import tuning

        return f"{tuning.sweep(name).base.lr:.4g}"
    if kind in ("stopped", "runs"):  # method: one name, or several joined by "+"
        methods = method.split("+")
        if kind == "runs":
            runs = results.final[results.final["method"].isin(methods)]
            return f"{len(runs.groupby(['method', 'lr', 'seed']))}"
        stopped = results.metrics[results.metrics["metric"] == "stopped"]
        return f"{int(stopped['method'].isin(methods).sum())}"
    if kind in ("stopped_first", "stopped_last"):  # the earliest and latest step stopped at
        stopped = results.metrics[(results.metrics["metric"] == "stopped")
                                  & results.metrics["method"].isin(method.split("+"))]
        return f"{int(stopped['step'].min() if kind == 'stopped_first' else stopped['step'].max())}"
    if kind == "rollouts":  # at the method's own best rate, per run
        drawn = tuned.metrics[(tuned.metrics["metric"] == "rollouts")
                              & (tuned.metrics["method"] == method)]
        return f"{drawn.groupby('seed')['value'].sum().mean():,.0f}"
    how, shape = kind.split("_")
    row = gains[how].loc[(method, k or 1)]
    return {"bracket": lambda: bracket(row["gain"], row["low"], row["high"]),
            "size": lambda: f"{abs(100 * row['gain']):.1f}",
            "interval": lambda: f"{_signed(row['low'])} to {_signed(row['high'])}"}[shape]()


@functools.cache
def _swept(point: str):
    """A sweep point's chosen step of each method, as a multiple of the preset's."""
    from sera.studies import sweep

    return sweep.chosen(point).set_index("method")["multiplier"]


def _stepped(kind: str, point: str, method: str, k: int | None) -> str:
    if kind.startswith("cross_"):
        row = _crossed(point, k or 1)
        if kind == "cross_steps":
            steps = row["treatment_steps" if method == row["treatment"] else "control_steps"]
            return "-".join(f"{s:g}" for s in sorted(set(steps)))
        if method != row["treatment"]:
            raise KeyError(f"{point}: the cross-fit compares {row['treatment']}, not {method}")
        return bracket(row["gain"], row["low"], row["high"]) if kind == "cross_bracket" \
            else row["verdict"]
    if kind == "step_chosen":
        return f"{_swept(point)[method]:g}"
    if kind == "frontier_bracket":
        k = k or 32
        row = _frontier(point, method, k)
        if not (math.isfinite(row["gap"]) and math.isfinite(row["low"])):
            raise KeyError(f"{point}: no frontier gap with an interval for {method} at Pass@{k}")
        return bracket(row["gap"], row["low"], row["high"])
    row = _tuned_at(point, method).set_index("k").loc[k or 1]  # KeyError until the grid lands
    return {"step_bracket": lambda: bracket(row["gain"], row["low"], row["high"]),
            "step_gain": lambda: _signed(row["gain"]),
            "step_interval": lambda: f"{_signed(row['low'])} to {_signed(row['high'])}"}[kind]()


@functools.cache
def _crossed(point: str, k: int) -> dict:
    """The sweep's cross-fitted comparison at K (sera.studies.crossfit)."""
    from sera.studies import crossfit

    return crossfit.compare(point, k)


@functools.cache
def _frontier(point: str, method: str, k: int):
    from sera.studies import sweep

    return sweep.chosen_frontier(point, k, method)


@functools.cache
def _tuned_at(point: str, method: str):
    """The tuned comparison of a method against the point's control, by K (sweep.tuned)."""
    from sera.studies import sweep

    try:
        return sweep.tuned(point, method)
    except ValueError as exc:
        raise KeyError(str(exc)) from None


def _signed(value: float) -> str:
    return f"{100 * value:+.1f}"


def _diagnosed(kind: str, point: str, arm: str) -> str:
    """A diagnosis kind's text: arm is "<arm>@<row>" where the kind names a row."""
    arm, _, key = arm.partition("@")
    if kind.startswith("band_"):
        row = _diagnosis(point, "bands").loc[(arm, key)]
        return {"band_bracket": lambda: bracket(row["gain"], row["low"], row["high"]),
                "band_size": lambda: f"{abs(100 * row['gain']):.1f}",
                "band_rollouts": lambda: f"{row['rollouts']:.1f}",
                "band_signal": lambda: f"{100 * row['signal']:.0f}"}[kind]()
    if kind == "cover_bracket":
        row = _diagnosis(point, "cover").loc[(arm, key)]
        return bracket(row["gain"], row["low"], row["high"])
    if kind in ("signal_range", "success_first", "success_last", "success_change_bracket"):
        curves = _diagnosis(point, "curves")
        curves = curves[curves["arm"] == arm]
        means = curves.groupby("epoch")[["success", "signal"]].mean()
        if kind == "signal_range":
            shares = 100 * means.loc[means.index >= int(key), "signal"]
            return f"{shares.min():.0f}–{shares.max():.0f}"
        if kind == "success_change_bracket":  # last epoch minus first, per seed
            by_seed = curves.pivot_table(index="seed", columns="epoch", values="success")
            fall = by_seed[by_seed.columns.max()] - by_seed[by_seed.columns.min()]
            half = float(t_half_width(fall.std(ddof=1), len(fall)))
            return bracket(fall.mean(), fall.mean() - half, fall.mean() + half)
        return f"{means['success'].iloc[0 if kind == 'success_first' else -1]:.2f}"
    if kind in ("evidence_first", "evidence_second"):
        return f"{_diagnosis(point, 'evidence').loc[arm, kind.split('_')[1]]:.1f}"
    row = _diagnosis(point, "screen").loc[arm]  # screen_bracket, screen_gap: already in points
    if kind == "screen_gap":
        return f"{row['gap']:+.1f}"
    return bracket(row["gap"], row["low"], row["high"], scale=1)


def value(kind: str, point: str, arm: str, k: int | None = None) -> str:
    """One field's text (KeyError naming the field when the runs do not hold it)."""
    if kind in ("predicted", "predicted_size", "predicted_bracket", "seeds_needed"):
        row = _predicted(point).loc[(arm, k or 1)]  # written before any run
        return {"predicted": lambda: _signed(float(row["gain"])),
                "predicted_bracket": lambda: f"{_signed(float(row['gain']))} "
                                             f"[{_signed(float(row['low']))}, "
                                             f"{_signed(float(row['high']))}]",
                "predicted_size": lambda: f"{abs(100 * float(row['gain'])):.1f}",
                "seeds_needed": lambda: f"{int(row['seeds_needed'])}"}[kind]()
    if kind in ("gain", "size", "interval", "bracket", "seeds"):
        if " vs " in arm:
            row = _versus(point, *arm.split(" vs ")).loc[k or 1]
        else:
            row = _compared(point).loc[(arm, k or 1)]
        gain, low, high = (float(row[c]) for c in ("measured", "low", "high"))
        return {"gain": lambda: _signed(gain),
                "size": lambda: f"{abs(100 * gain):.1f}",
                "interval": lambda: f"{_signed(low)} to {_signed(high)}",
                "bracket": lambda: f"{_signed(gain)} [{_signed(low)}, {_signed(high)}]",
                "seeds": lambda: f"{int(row['seeds'])}"}[kind]()
    if kind in ("below", "above", "start", "end", "start_pct", "end_pct", "change_bracket"):
        row = _drift(point, "val_pass").loc[arm]
        below = round(float(row["below"]) * int(row["seeds"]))
        if kind in ("below", "above"):
            return f"{below if kind == 'below' else int(row['seeds']) - below}"
        if kind == "change_bracket":
            return bracket(row["change"], row["low"], row["high"])
        if kind.endswith("_pct"):
            return f"{100 * float(row[kind[:-4]]):.1f}"
        return f"{float(row[kind]):.2f}"
    if kind.startswith("length_"):
        row = _drift(point, "response_length").loc[arm]
        if kind == "length_change_bracket":
            return bracket(row["change"], row["low"], row["high"], scale=1)
        if kind == "length_below":
            return f"{round(float(row['below']) * int(row['seeds']))}"
        return f"{float(row[kind.split('_')[1]]):.0f}"
    if kind in DIAGNOSIS_KINDS:
        return _diagnosed(kind, point, arm)
    if kind in SWEEP_KINDS:
        return _stepped(kind, point, arm, k)
    if kind in TUNING_KINDS:
        return _tuned(kind, point, arm, k)
    raise KeyError(f"unknown field kind {kind!r}")


def fill(template: str) -> str:
    """The template with every field replaced by its value from the stored runs."""
    def one(match):
        kind, point, arm, k = match.groups()
        try:
            return value(kind, point, arm, int(k) if k else None)
        except KeyError as exc:
            raise KeyError(f"{match.group(0)}: the stored runs hold no {exc}") from None

    return FIELD.sub(one, template)


def loose_decimals(template: str, constants=()) -> list[str]:
    """Decimal numbers a template writes by hand, outside its fields, other than `constants`
    (a method's fixed numbers a cell declares in metadata["sera"]["constants"], such as the
    power calculation's 2.5 standard errors: not results)."""
    return [x for x in DECIMAL.findall(FIELD.sub("", template)) if x not in constants]


def stale(source: Path | None = None) -> list[Path]:
    """Notebooks with a quoted cell whose text differs from its filled template."""
    return [path for path in notebooks(source or ROOT / "notebooks") if _fill_notebook(path, False)]


def _fill_notebook(path: Path, write: bool) -> bool:
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if TAG in cell.metadata.get("tags", []):
            text = fill(cell.metadata["sera"]["template"])
            if cell.source != text:
                cell.source, changed = text, True
    if changed and write:
        nbformat.write(nb, path)
        strip(path)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale notebooks")
    args = parser.parse_args(argv)
    found = [path for path in notebooks(ROOT / "notebooks")
             if _fill_notebook(path, write=not args.check)]
    for path in found:
        print(f"{'out of date' if args.check else 'filled'}: {path.name}")
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
