"""The results page: every arm of every stored confirmation point against its control (MaxRL
unless the point registers another), from the tables.

`python -m sera.studies.report` rewrites docs/results.md and the README's results table from the
stored runs under data/study/; `--check` only says whether both are up to date (the tests run it).
A gain is the mean of per-seed paired differences on the same held-out prompts with its 95%
Student-t interval over seeds (`sera.results.paired_gain`); each arm's rows name the instruction
set its runs and its comparator's runs were trained with, so that arms from different machines
are never compared without a word.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sera import runstore
from sera.methods import METHODS
from sera.results import (
    MIN_SEEDS,
    bh_kept,
    bracket,
    paired_gain,
    paired_p,
    per_prompt_pass,
    verdict,
    welch,
)
from sera.studies import (
    confirm,
    crossfit,
    diagnosis,
    difficulty,
    digits,
    discount,
    frontier,
    screen,
    sweep,
)
from sera.studies import readme as readme_block
from sera.studies.confirm.storage import continued, stored_points, stored_table

README_ARMS = ("sera", "sera lr-half", "sera-evidence-step", "sera-rate")
"""The arms of the README's short table: the paper's method, it at half the step, the remedy
candidate (its step scaled by the evidence, sera.evidence) and the package's variant."""
README_START = "<!-- results: python -m sera.studies.report -->"
README_END = "<!-- end of results -->"


def _starts(name: str):
    """(arm name, the provenance entries where a run started) of each stored run of the point,
    matched to its arm through the point's own run list."""
    summary = confirm.stored(name)
    by_folder = {record["run"].split("/")[-1]: record for record in summary.get("runs", [])}
    for config, arm in confirm.point(name).runs():
        record = by_folder.get(Path(config.out).name)
        if record is not None:
            yield arm.name, [start for start in record["provenance"] if "cpu_capability" in start]


def machines(name: str) -> dict[str, str]:
    """Per arm of a stored point, the instruction sets (torch's cpu_capability) its stored runs
    were trained with."""
    found: dict[str, set] = {}
    for arm, starts in _starts(name):
        found.setdefault(arm, set()).update(s.get("cpu_capability") or "unknown" for s in starts)
    return {arm: "+".join(sorted(kinds)) for arm, kinds in found.items()}


def stacks(name: str) -> dict[str, str]:
    """Per arm of a stored point, the library versions (torch, transformers) its stored runs
    recorded when they started."""
    found: dict[str, set] = {}
    for arm, starts in _starts(name):
        found.setdefault(arm, set()).update(
            f"torch {s.get('torch', '?')}, transformers {s.get('transformers', '?')}"
            for s in starts)
    return {arm: " + ".join(sorted(kinds)) for arm, kinds in found.items()}


def steps(name: str) -> dict[str, float]:
    """Each arm's learning rate as a multiple of the point's (1 where the arm leaves it)."""
    point = confirm.point(name)
    return {a.name: dict(a.changes).get("lr", point.config.lr) / point.config.lr
            for a in point.arms}


def _per_seed_pass(final: pd.DataFrame, arm: str, k: int) -> np.ndarray:
    """Each seed's mean Pass@K over the held-out prompts, for one arm."""
    mine = final[final["arm"] == arm]
    return np.array([per_prompt_pass(run, k).mean() for _, run in mine.groupby("seed")])


def _prediction(name: str) -> pd.DataFrame:
    folder = runstore.STUDY_DIR / name
    if not (folder / runstore.PREDICTION).exists():
        return pd.DataFrame(columns=["arm", "k", "gain"])
    return confirm.read_prediction(name)


def _controls(control: str, arms: list[str], arm: str, tag: str, against: str = "") -> list[str]:
    """The point's control, and the control with the same changes where the point has it
    (e.g. "maxrl lr-half"); for a method that sets its own step (sera-evidence-step), also the
    control at every other step the point runs it at ("maxrl lr-half"), since that method's
    steps are not the preset's; and the arm it was registered `against` where that has runs."""
    same = f"{control} {tag}" if tag else None
    out = [control, *([same] if same in arms and same != arm else [])]
    if against in arms and against not in out:
        out.append(against)
    if not tag and _sets_own_step(arm):
        out += [a for a in arms if a.startswith(f"{control} lr-") and a not in out]
    return out


@functools.cache
def _final(name: str) -> pd.DataFrame:
    """A point's stored final table, read once per process (the page and the README share it)."""
    return confirm.load(name).final


def point_table(name: str) -> pd.DataFrame:
    """One row per arm, comparator and K (`page_ks`): the paired gain in points with its
    interval, the seeds, the stored prediction, the verdict and the machines."""
    point = confirm.point(name)
    final = _final(name)
    final = final.assign(method=final["arm"])
    arms = list(dict.fromkeys(final["arm"]))
    tags = {a.name: a.tag for a in point.arms}
    registered = {a.name: a.against for a in point.arms}
    prediction = _prediction(name)
    kinds, libraries, step = machines(name), stacks(name), steps(name)
    ks = page_ks(point)
    rows = []
    for arm in arms:
        if arm == point.control:
            continue
        for control in _controls(point.control, arms, arm, tags.get(arm, ""),
                                 registered.get(arm, "")):
            gains = paired_gain(final, arm, control, by=(), ks=ks)
            for g in gains.itertuples():
                match = prediction[(prediction["arm"] == arm) & (prediction["k"] == g.k)]
                predicted = float(match["gain"].iloc[0]) \
                    if control == point.control and len(match) and _simulated(arm) else math.nan
                enough = g.seeds >= MIN_SEEDS
                unpaired = welch(_per_seed_pass(final, arm, g.k),
                                 _per_seed_pass(final, control, g.k))[1:]
                rows.append({
                    "point": name, "arm": arm, "against": control, "k": int(g.k),
                    "seeds": int(g.seeds), "gain": g.gain, "low": g.low, "high": g.high,
                    "per_seed": g.per_seed, "predicted": predicted,
                    "verdict": verdict(g.gain, g.low, g.high, predicted, seeds=int(g.seeds)),
                    "machine": kinds.get(arm, "unknown"),
                    "against_machine": kinds.get(control, "unknown"),
                    "stack": libraries.get(arm, "unknown"),
                    "against_stack": libraries.get(control, "unknown"),
                    "step": step.get(arm, 1.0), "against_step": step.get(control, 1.0),
                    "welch_low": unpaired[0], "welch_high": unpaired[1],
                    "p": paired_p(g.per_seed) if enough else math.nan})
    return pd.DataFrame(rows)


def _sets_own_step(arm: str) -> bool:
    """Whether the arm's method scales its own step (sera-evidence-step), not the preset's."""
    method = METHODS.get(arm.split(" ")[0])
    return method is not None and method.evidence_step


def _simulated(arm: str) -> bool:
    """Whether the simulator's prediction of an arm means anything: not for a method that sets
    its own step (the simulator takes plain gradient steps on logits, with no optimizer whose
    step a method could scale); such an arm has the expectation its point registered instead."""
    return not _sets_own_step(arm)


BH_LEVEL = 0.05
"""The false discovery rate at which the page's Benjamini-Hochberg column keeps a cell."""


def with_bh(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Each point's table with a column `bh`: for a cell whose interval excludes zero, "kept"
    or "lost" under a Benjamini-Hochberg correction at BH_LEVEL across every cell of the page
    with a p-value; "" elsewhere."""
    every = pd.concat([t.assign(_point=name) for name, t in tables.items()], ignore_index=True)
    tested = every["p"].notna()
    kept = np.zeros(len(every), dtype=bool)
    if tested.any():
        kept[tested.to_numpy()] = bh_kept(every.loc[tested, "p"].to_numpy(), BH_LEVEL)
    nominal = tested & ((every["low"] > 0) | (every["high"] < 0))
    every["bh"] = np.where(nominal, np.where(kept, "kept", "lost"), "")
    return {name: part.drop(columns="_point").reset_index(drop=True)
            for name, part in every.groupby("_point", sort=False)}


def page_ks(point) -> tuple[int, ...]:
    """Pass@1, the K the point was sized for, and Pass@8 and Pass@32 where the evaluation drew
    that many or more."""
    drawn = {k for k in (8, 32) if point.config.final_samples >= k}
    return tuple(sorted({1, point.k} | drawn))


def control_level(name: str, ks=None) -> dict[int, float]:
    """The point's control's (MaxRL's unless registered otherwise) held-out Pass@K at the final
    step, mean over seeds and prompts (default: the page's K)."""
    point = confirm.point(name)
    final = _final(name)
    mine = final[final["arm"] == point.control]
    return {k: float(per_prompt_pass(mine, k).mean()) for k in ks or page_ks(point)}


def _cell(row) -> str:
    if row.seeds < MIN_SEEDS or not math.isfinite(row.low):
        return "per seed " + " ".join(f"{100 * g:+.1f}" for g in row.per_seed)
    return bracket(row.gain, row.low, row.high)


def _machine(machine: str, against: str) -> str:
    """An arm's instruction set, and its baseline's where they differ."""
    return machine if machine == against else f"{machine} (against {against})"


def _differs(row) -> str:
    """What besides the method differs between an arm and its comparator."""
    said = []
    scaled = [name for name in (row.arm, row.against) if _sets_own_step(name)]
    if scaled:  # its own scale: the preset's step times a factor of at most 1, batch by batch
        steps = [f"{row.step:g}x" if row.arm not in scaled else "its own",
                 f"{row.against_step:g}x" if row.against not in scaled else "its own"]
        said.append(f"step ({' and '.join(scaled)} scales its own by the evidence; "
                    f"{steps[0]} against {steps[1]})")
    elif not math.isclose(row.step, row.against_step):
        said.append(f"step ({row.step:g}x against {row.against_step:g}x)")
    if row.machine != row.against_machine:
        said.append(f"instruction set ({row.machine} against {row.against_machine})")
    if row.stack != row.against_stack:
        said.append(f"libraries ({row.stack} against {row.against_stack})")
    return "; ".join(said)


def page_table(name: str, table: pd.DataFrame | None = None) -> str:
    """A point's rows as markdown, gains in points of Pass@K (table: point_table's, with_bh's
    column where the page has run it)."""
    table = point_table(name) if table is None else table
    welch = [f"[{100 * r.welch_low:+.1f}, {100 * r.welch_high:+.1f}]"
             if r.seeds >= MIN_SEEDS and math.isfinite(r.welch_low) else ""
             for r in table.itertuples()]
    shown = pd.DataFrame({
        "arm": table["arm"], "against": table["against"], "K": table["k"],
        "seeds": table["seeds"], "gain [95% interval]": [_cell(r) for r in table.itertuples()],
        "Welch interval": welch,
        "predicted": [f"{100 * p:+.1f}" if math.isfinite(p) else "" for p in table["predicted"]],
        "verdict": table["verdict"], "BH": table["bh"] if "bh" in table else "",
        "instruction set": [_machine(r.machine, r.against_machine) for r in table.itertuples()],
        "also differs in": [_differs(r) for r in table.itertuples()]})
    return shown.to_markdown(index=False, disable_numparse=True)


def preset_section() -> str:
    """The page's table at the preset step (preset_table) with its heading."""
    return ("## At the preset step\n\n"
            "What a user who does not tune sees: each arm's gain in points of Pass@K on held-out "
            "prompts at the long CPU points (95% interval over seeds; the MaxRL column is its own "
            "Pass@K in percent). An arm that runs at another step than the preset's is compared "
            "with MaxRL at that same step where the point registered one (§); `sera-rate` is the "
            "package's own variant.\n\n" + preset_table() + "\n")


def _matched(point, arms) -> list[str]:
    """For each arm: the control with the arm's tag where the point registered one (the same
    step), else the control."""
    names = {a.name for a in point.arms}
    out = []
    for arm in arms:
        tag = arm.split(" ", 1)[1] if " " in arm else ""
        out.append(f"{point.control} {tag}" if tag and f"{point.control} {tag}" in names
                   else point.control)
    return out


def preset_table() -> str:
    """Per long point (320 steps or more) and K: MaxRL's level and each README arm's gain, for
    the arms with MIN_SEEDS seeds or more (a point whose runs are still landing waits). An arm
    tagged T is compared with the control tagged T where the point has that arm (the same
    step), else with the control."""
    rows = []
    for name in stored_points():
        point = confirm.point(name)
        if point.config.steps < 320:
            continue
        table = point_table(name)
        if not table.empty:  # the table quotes an arm once it has its seeds
            table = table[table["against"].isin(_matched(point, table["arm"]))
                          & (table["seeds"] >= MIN_SEEDS)]
        if table.empty:  # runs still landing
            continue
        if point.control != "maxrl":  # the table is a table of gains over MaxRL
            continue
        extended = continued(name)
        for k, level in control_level(name, sorted({1, point.k})).items():
            row = {"point": name, "K": k, "MaxRL": f"{100 * level:.1f}" + (
                " ‡" if point.control in extended else "")}
            for arm in README_ARMS:
                match = table[(table["arm"] == arm) & (table["k"] == k)]
                match = match[match["against"] == _matched(point, [arm])[0]]
                if len(match):
                    found = next(match.itertuples())
                    mixed = found.machine != found.against_machine
                    row[arm] = (_cell(found) + (" †" if mixed else "")
                                + (" ‡" if arm in extended else "")
                                + (" §" if found.against != point.control else ""))
                else:
                    row[arm] = ""
            rows.append(row)
    return (pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)
            + "\n\n† this arm and its MaxRL trained on different instruction sets.\n\n"
            "§ against MaxRL at the same step (the point's `maxrl` arm with the same tag).\n\n"
            "‡ these runs repeat or continue another point's (the same runs through its last "
            "step, not a second sample; docs/results.md names them).")


PAGE_HEAD = """# Results: every arm of every confirmation point

Generated from the stored runs in `data/study/` by `python -m sera.studies.report`
(`make results`); `tests/test_report.py` checks that this page matches them. Do not edit by hand.

This page answers:
- How far is each arm of each point ahead of or behind its control (MaxRL at every point so
  far), at Pass@1 and at large K?
- Did the interval confirm the prediction written before the runs, refute it, or neither?
- Which instruction set and library versions did each arm and its comparator train on, and does
  a comparison also change the step?
- Which cells stay significant once the page's many comparisons are accounted for?
- Over the second half of the 640-step runs, did any arm fall back (a collapse only delayed)?
- Which remedy candidates pass the screen of training reward early in a run?

Gains are in points of Pass@K on the held-out prompts: the mean of per-seed paired differences,
with the 95% Student-t interval over seeds. `against` is the arm subtracted: the point's control
(`control` in its `point.toml`, MaxRL unless it says otherwise) at the point's settings, and for
an arm that changes a setting also the control with the same change. Verdicts
(`sera.results.verdict`, the one vocabulary of the package's tables and notebooks): *ahead* or
*behind* where the interval excludes zero, *inconclusive* where it holds zero (which is not
evidence of no effect); with a prediction, *as predicted* or *not as predicted* says whether the
prediction lies inside the interval, and an inconclusive interval that holds the prediction
neither confirms nor refutes it. Predictions are the simulator's, stored in each
point's `prediction.csv`; arms that change the training (tagged arms) and methods that set their
own step (`sera-evidence-step`: the simulator takes plain gradient steps, with no optimizer whose
step a method could scale) have a written expectation in their point's registration instead, and
no prediction here. An arm with fewer than 6 seeds shows its per-seed
differences and no verdict. The *instruction set* is torch's CPU capability when each run
started; runs on different ones are different samples of the same experiment. *Also differs in*
names what else separates an arm from its comparator: a step of another size (a gain then
measures the step as much as the method), another instruction set, other library versions.

Pairing by seed helps only while two runs stay alike, and after some 80 steps they do not (on the
math point two runs of one seed correlate +0.76 in Pass@1 at step 80 and +0.02 at step 320), so
beside the paired interval stands the unpaired *Welch interval* over the two arms' seeds. *BH*
marks each cell whose paired interval excludes zero: *kept* where it stays significant under a
Benjamini-Hochberg correction at a 5% false discovery rate across every cell of this page with
6 seeds or more, *lost* where it does not.

Each point's folder in `data/study/` holds its registration (`point.toml`), its prediction, the
runs' `metrics`, `final` and `allocations` tables and their provenance, and for the runs that
record one, `rollouts.csv.gz`: one row per response (step, prompt, its group's size, length in
tokens, reward), from which a statement about response lengths or lone successes can be checked.
"""


def _continued_note(name: str) -> str:
    """The page's sentence on the arms that repeat or continue other stored runs ("" where none
    do)."""
    found = continued(name)
    if not found:
        return ""
    said = "; ".join(f"`{arm}` is " + " and ".join(
        f"{other}'s `{their}`" for other, their, _ in places) + f" through step {places[0][2]}"
        for arm, places in found.items())
    return (f"Same runs, not a second sample: {said}. Each has the same warm-up and, for every "
            f"seed, the same training reward, token entropy and response length at every one of "
            f"those steps.\n\n")


def page() -> str:
    parts = [PAGE_HEAD]
    tables = with_bh({name: point_table(name) for name in stored_points()})
    for name, table in tables.items():
        point = confirm.point(name)
        level = ", ".join(f"Pass@{k} {100 * v:.1f}" for k, v in control_level(name).items())
        control = "MaxRL" if point.control == "maxrl" else f"`{point.control}`"
        parts.append(f"## {name}\n\n{point.task}, N0 = {point.config.n0}, "
                     f"{point.config.steps} steps; {control}'s level: {level}.\n\n"
                     f"{_continued_note(name)}{page_table(name, table)}\n")
    parts.append(preset_section())
    parts.append(second_half_section())
    parts.append(crossfit.page_section())
    parts.append(sweep.page_section())
    parts += [frontier.page_section(name) for name in frontier.frontier_points()]
    parts.append(difficulty.page_section())
    parts.append(screen_section())
    parts.append(digits_section())
    parts.append(discount_section())
    return "\n".join(part for part in parts if part)


LONG = 640
"""Points of at least this many steps get a row per arm in the page's second-half table."""


def second_half_section() -> str:
    """Per arm of every stored point of LONG steps or more: held-out Pass@1 (the runs' own
    evaluations) at the middle and at the end, and the change over the second half with its
    interval over seeds (sera.studies.diagnosis.drift): whether a collapse was removed or only
    delayed."""
    rows = []
    for name in stored_points():
        steps = confirm.point(name).config.steps
        if steps < LONG:
            continue
        metrics = stored_table(name, "metrics")
        half = diagnosis.drift(metrics[metrics["step"] >= steps // 2])
        for row in half.itertuples():
            rows.append({"point": name, "arm": row.arm, "seeds": row.seeds,
                         f"Pass@1 at {steps // 2}": f"{100 * row.start:.1f}",
                         f"at {steps}": f"{100 * row.end:.1f}",
                         "change [95% interval]": bracket(row.change, row.low, row.high),
                         "seeds that fell": f"{round(row.below * row.seeds)} of {row.seeds}"})
    if not rows:
        return ""
    return ("## The second half of the long runs: removed or delayed?\n\n"
            "Each arm's held-out Pass@1 from the runs' own evaluations at the middle and at the "
            "end, in percent, and the change over the second half with its 95% interval over "
            "seeds (`sera.studies.diagnosis.drift`). A collapse that half the step only delayed "
            "shows as a fall here.\n\n"
            f"{pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)}\n")


def screen_section() -> str:
    """The screen (sera.studies.screen) of every arm of every stored point, beside the arm's
    final Pass@1 gain over the point's control."""
    rows = []
    for name in stored_points():
        table = screen.gaps(name)
        if table.empty:
            continue
        final = point_table(name)
        control = confirm.point(name).control
        final = final[(final["against"] == control) & (final["k"] == 1)].set_index("arm")
        first, last = screen.steps_of(name)
        for row in table.itertuples():
            rows.append({
                "point": name, "steps": f"{first}-{last}", "arm": row.arm, "seeds": row.seeds,
                "training reward gap [95% interval]":
                    f"{row.gap:+.1f} [{row.low:+.1f}, {row.high:+.1f}]",
                "passes": "yes" if row.passes else "no",
                "final Pass@1 gain": _cell(final.loc[row.arm]) if row.arm in final.index
                else ""})
    if not rows:
        return ""
    return (f"## The screen: training reward in epochs {screen.EPOCHS[0]}-{screen.EPOCHS[1]}\n\n"
            f"Each arm's mean training reward over the steps of epochs {screen.EPOCHS[0]}-"
            f"{screen.EPOCHS[1]} minus MaxRL's at the same seed, in points, with its 95% interval "
            f"over seeds (`sera.studies.screen`), beside the arm's Pass@1 gain at the point's "
            f"last step. An arm passes at a mean of {screen.PASS:+.1f} or above, a rule set on "
            f"the math points; on the mazes the gap does not foretell Pass@1.\n\n"
            f"{pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)}\n")


def digits_section() -> str:
    """The regime map's digits check (sera.studies.digits) as a section of the page; "" before
    its runs are stored."""
    if not (digits.FOLDER / runstore.stored_file("final")).exists():
        return ""
    table = digits.compare()
    kinds = digits.machines()
    final = pd.read_csv(digits.FOLDER / runstore.stored_file("final"))
    mine = final[final["method"] == "maxrl"]
    level = ", ".join(f"Pass@{k} {100 * per_prompt_pass(mine, k).mean():.1f}" for k in digits.KS)
    against = kinds.get("maxrl", "unknown")
    machine = [_machine(kinds.get(arm, "unknown"), against) for arm in table["arm"]]
    shown = pd.DataFrame({
        "arm": table["arm"], "against": "maxrl", "K": table["k"], "seeds": table["seeds"],
        "gain [95% interval]": [f"{r.gain:+.1f} [{r.low:+.1f}, {r.high:+.1f}]"
                                for r in table.itertuples()],
        "predicted": [f"{p:+.1f}" for p in table["predicted"]], "verdict": table["verdict"],
        "instruction set": machine})
    return (f"## {digits.NAME}\n\nThe regime map's digits profile on real runs "
            f"(`python -m sera.studies.digits`): digits, N0 = 16, 300 steps, held-out Pass@K exact "
            f"(each image's p); MaxRL's level: {level}.\n\n"
            f"{shown.to_markdown(index=False, disable_numparse=True)}\n")


def discount_section() -> str:
    """The history's discount study (sera.studies.discount) as a section of the page: each counts
    discount's Brier regret per point and the choice; "" before the study is stored."""
    path = discount.FOLDER / discount.BRIER
    if not path.exists():
        return ""
    table = pd.read_csv(path)
    gap = (1e4 * discount.regret(table)).round(1)
    runs = table.groupby("point")["seed"].nunique()
    gap.columns = [f"{c} ({runs[c]} seeds)" if c in runs else c for c in gap.columns]
    return (f"## The history's discount\n\nHow well each discount of the paper's counts rule "
            f"predicts a prompt's next visit, replayed on the stored runs' outcomes "
            f"(`python -m sera.studies.discount`; digits runs trained for it): the Brier score "
            f"minus the best discount's at each point, in 1e-4 (the difference is the mean "
            f"squared error against the true p), and the worst over points. The chosen "
            f"discount has the smallest worst regret: **{discount.chosen(table)}** "
            f"(`sera` plans with {discount.DEFAULT}).\n\n"
            f"{gap.reset_index().to_markdown(index=False, disable_numparse=True)}\n\n"
            f"{discount_reading(1e4 * discount.regret(table))}\n")


def discount_reading(gap: pd.DataFrame) -> str:
    """Why the choice stands, from the regret table (discount.regret's, in 1e-4): the best
    discount on the sequence points (confirmation points) alone, what the chosen one costs
    there, and what that one would cost elsewhere; "" without both kinds of point."""
    points = [c for c in gap.columns if c != "worst"]
    sequence = [c for c in points if c in confirm.POINTS]
    others = [c for c in points if c not in sequence]
    if not sequence or not others:
        return ""
    best = discount.best_on(gap, sequence)
    if best == discount.DEFAULT:
        return f"{discount.DEFAULT} is also the best choice on the sequence points alone."
    cost = gap.loc[discount.DEFAULT, sequence]
    return (f"On the sequence points alone {best} predicts best (worst regret "
            f"{gap.loc[best, sequence].max():.1f}); {discount.DEFAULT} costs {cost.min():.1f}-"
            f"{cost.max():.1f} there, while {best} would cost {gap.loc[best, others].max():.1f} on "
            f"{', '.join(others)}. The choice stands as the "
            f"one no task pays much for; whether {best}'s better prediction on the sequence "
            f"points changes what `sera` trains is not measured (it needs `sera` runs at "
            f"{best}, a named variant).")


def with_readme_table(readme: str, table: str, markers=(README_START, README_END)) -> str:
    """The README text with the block between the markers replaced by `table`."""
    first, last = markers
    start, end = readme.find(first), readme.find(last)
    if start < 0 or end < start:
        raise ValueError(f"the README has no block between {first!r} and {last!r}")
    return readme[:start] + first + "\n\n" + table + "\n\n" + readme[end:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if docs/results.md or the README's table "
                             "differs from the stored runs")
    parser.add_argument("--root", type=Path, default=runstore.ROOT,
                        help="the checkout holding README.md and docs/")
    args = parser.parse_args(argv)
    targets = {args.root / "docs" / "results.md": page()}
    readme = args.root / "README.md"
    targets[readme] = with_readme_table(readme.read_text(), readme_block.block())
    stale = [path for path, text in targets.items()
             if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} differs from the stored runs: run python -m sera.studies.report",
                  file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        runstore.write_text(path, targets[path])
        print(f"wrote {path}")
    if stale:
        from sera.plotting import savefig
        from sera.plotting.sweep import plot_frontier

        for name in filter(sweep.is_sweep, stored_points()):
            savefig(plot_frontier(sweep.cells(name), title=name), sweep.figure_name(name),
                    folder=args.root / "figures")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
