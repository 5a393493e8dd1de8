"""The README's results block: what to run, generated from the cross-fitted sweeps, the frontier
points and the per-difficulty gains, with the table behind it. Every word of a verdict comes
from `sera.results.verdict` through those analyses; the page (docs/results.md) has the rest.

The recommendation reads, per sweep: at Pass@1 and at the largest K its evaluation allows, the
method the cross-fitted verdict favours at its chosen step, or both where the interval holds
zero; then a sentence on the scale of the runs and where the gain sits by difficulty.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sera.results import SIDES, bracket, verdict
from sera.studies import crossfit, difficulty, frontier, sweep

MAX_WORDS = 40
"""The longest sentence the block may hold, in words."""
MAX_ROWS = 14
"""The most table rows the block may hold."""
TASKS = {"math": "math word problems", "maze": "mazes"}


def _steps(steps) -> str:
    """A method's two cross-fitted choices (even half, odd half) as one step or a range."""
    low, high = min(steps), max(steps)
    return f"{low:g}x" if low == high else f"{low:g}-{high:g}x"


def _advice(r) -> str:
    """What to run for one sweep and K, from its cross-fitted verdict."""
    ahead, behind, _ = SIDES
    side = r.verdict.split(",")[0]
    gain = bracket(r.gain, r.low, r.high)
    sera_at, maxrl_at = _steps(r.treatment_steps), _steps(r.control_steps)
    if side == ahead:
        return f"for Pass@{r.k} run `sera` at {sera_at} the preset step ({gain})"
    if side == behind:
        return f"for Pass@{r.k} run MaxRL at {maxrl_at} ({gain} for `sera`)"
    return f"Pass@{r.k} is unresolved, `sera` at {sera_at} against MaxRL at {maxrl_at} ({gain})"


def recommendation(found: pd.DataFrame, by_difficulty: pd.DataFrame) -> list[str]:
    """The block's sentences: one per sweep (Pass@1 and its largest K), then the caveat of scale
    with the gain on the hardest prompts at the largest K."""
    sentences = []
    for name, part in found.groupby("point", sort=False):
        task = sweep.point(name).task
        ends = part[part["k"].isin([1, part["k"].max()])]
        said = "; ".join(_advice(r) for r in ends.itertuples())
        sentences.append(f"On {TASKS.get(task, task)}, each method tuned for each K: {said}.")
    hardest = by_difficulty[(by_difficulty["bin"] == difficulty.LABELS[0])
                            & (by_difficulty["prompt_set"] == "report")]
    hardest = hardest[hardest["k"] == hardest.groupby("point")["k"].transform("max")]
    where = ", ".join(f"{sweep.point(r.point).task} {bracket(r.gain, r.low, r.high)}"
                      for r in hardest.itertuples())
    sentences.append(
        "All runs are tiny CPU models; the gain at large K sits on prompts MaxRL solves at most "
        f"5% of the time ({where} points), so compare your prompts' solve rates first.")
    return sentences


def table(found: pd.DataFrame, frontiers: pd.DataFrame) -> str:
    """The block's table: each sweep's cross-fitted gain per K, then each frontier point's margin
    at the largest K on all its prompts for the `sera` cells MaxRL's cells bracket."""
    rows = [{"study": r.point, "K": r.k,
             "`sera` - MaxRL, each at its step for this K": bracket(r.gain, r.low, r.high),
             "steps (`sera`; MaxRL)": "; ".join(
                 _steps(steps) + (" (grid's edge)" if r.at_edge[method] else "")
                 for method, steps in ((r.treatment, r.treatment_steps),
                                       (r.control, r.control_steps))),
             "verdict": r.verdict} for r in found.itertuples()]
    for r in frontiers.itertuples():
        if r.bracketed:  # the registered test
            said, steps, word = (f"{bracket(r.gap, r.low, r.high)} above MaxRL's frontier",
                                 "matched Pass@1", r.verdict)
        else:  # no two MaxRL cells bracket it: the description
            said, steps, word = (f"{bracket(r.above_best, r.best_low, r.best_high)} above "
                                 f"every MaxRL cell", "each with a higher Pass@1",
                                 verdict(r.above_best, r.best_low, r.best_high, seeds=r.seeds))
        rows.append({"study": r.point, "K": r.k,
                     "`sera` - MaxRL, each at its step for this K": said,
                     "steps (`sera`; MaxRL)": f"{r.multiplier:g}x; {steps}, "
                                              f"{r.prompts} prompts", "verdict": word})
    return pd.DataFrame(rows[:MAX_ROWS]).to_markdown(index=False, disable_numparse=True)


def _frontier_rows() -> pd.DataFrame:
    parts = []
    for name in frontier.frontier_points():
        margins = frontier.margins(name)
        shown = margins["bracketed"] | (np.isfinite(margins["above_best"])
                                         & np.isfinite(margins["best_low"]))
        margins = margins[shown & (margins["prompts"] == margins["prompts"].max())
                          & (margins["k"] == margins["k"].max())]
        parts.append(margins.assign(point=name))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["point", "k", "gap", "low", "high", "multiplier", "prompts", "verdict"])


def block(found: pd.DataFrame | None = None, by_difficulty: pd.DataFrame | None = None) -> str:
    """The README's results block: the recommendation, the table, the sweeps' frontier figures."""
    found = crossfit.table() if found is None else found
    by_difficulty = difficulty.table() if by_difficulty is None else by_difficulty
    figures = [f"![{name}: the Pass@1-Pass@K frontier](figures/{sweep.figure_name(name)}.png)"
               for name in found["point"].unique()]
    return "\n\n".join([" ".join(recommendation(found, by_difficulty)),
                        table(found, _frontier_rows()), *figures])


def sentences(text: str) -> list[str]:
    """The sentences of a block's first paragraph (split at ". " outside backticks and
    brackets), for the size checks."""
    head = text.split("\n\n")[0]
    out, depth, start = [], 0, 0
    for i, ch in enumerate(head):
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        if ch == "." and depth == 0 and (i + 1 == len(head) or head[i + 1] == " "):
            out.append(head[start:i + 1].strip())
            start = i + 1
    return [s for s in out if s]


def words(sentence: str) -> int:
    return len(sentence.split())


__all__ = ["block", "recommendation", "sentences", "table", "words", "MAX_ROWS", "MAX_WORDS"]

np.seterr(all="ignore")
