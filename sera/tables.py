"""The vocabulary of the training tables: which columns tell runs apart, which tables a run
writes, their columns, and the arm each row belongs to.

Every run writes three long tables (`TABLES`), each row carrying the run's keys (`RUN_KEYS`):

    metrics      step, metric, k, value          one row per logged number
    final        one row per held-out prompt     what the trainer measures at the end
    allocations  ALLOCATION_COLUMNS               one row per prompt and step (allocating methods)

An arm is what a comparison calls a set of runs: the method, with its u_min where that is not the
method's own, or a name given by a study (a column `arm` stored with the rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from sera.methods import METHODS

RUN_KEYS = ("method", "estimates", "allocator", "seed", "n0", "agg", "u_min")
"""What tells runs apart; every row of a trainer's tables carries them (RunConfig.keys)."""
TABLES = ("metrics", "final", "allocations")
ALLOCATION_COLUMNS = ("step", "epoch", "prompt", "estimate", "rollouts", "allocated",
                      "successes", "p_exact")
"""The per-prompt record of every step: the estimate the allocation read (for uniform methods,
the history's estimate, kept for comparison), the rollouts, their successes, and the exact p
where the task knows it."""
ROLLOUT_COLUMNS = ("step", "prompt", "group", "length", "reward")
"""The per-response record of a sequence task's steps (a run folder's rollouts.csv, beside the
three tables): the prompt it answered, its group's size that step (N_q), its length in tokens
and its reward."""


@dataclass
class Results:
    """A run's (or many runs') three tables."""

    metrics: pd.DataFrame
    final: pd.DataFrame
    allocations: pd.DataFrame

    @staticmethod
    def concat(parts: list[Results]) -> Results:
        return Results(*(pd.concat([getattr(p, name) for p in parts], ignore_index=True)
                         for name in TABLES))


def keys_of(table: pd.DataFrame) -> list[str]:
    """The run keys among table's columns."""
    return [k for k in RUN_KEYS if k in table.columns]


def arm(table: pd.DataFrame) -> pd.Series:
    """The arm of each row: its method, with " (u_min x)" where the run's threshold is not the
    method's own (0: the selection off). Labelled once per (method, u_min) pair, not per row."""
    pairs = table.groupby(["method", "u_min"], dropna=False, sort=False, observed=True)
    labels = [_arm_label(method, u_min) for method, u_min in pairs.size().index]
    codes = pairs.ngroup().to_numpy()
    return pd.Series(pd.array(labels, dtype=table["method"].dtype)[codes], index=table.index,
                     name="method")


def _arm_label(method: str, u_min) -> str:
    own = (METHODS[method].selection or None) if method in METHODS else None
    if pd.isna(u_min):  # no threshold recorded: the method's own when it has none
        return method if own is None else f"{method} (u_min 0)"
    return method if u_min == own else f"{method} (u_min {u_min:g})"


def with_arm(table: pd.DataFrame) -> pd.DataFrame:
    """table with its `arm` column (`arm`), added only where the table has none."""
    return table if "arm" in table.columns else table.assign(arm=arm(table))
