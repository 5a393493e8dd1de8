"""Pieces every trainer shares: the epoch order of prompts, the metrics table, progress bars,
and command-line flags built from config dataclasses."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pandas as pd

COLUMNS = ["step", "method", "seed", "n0", "metric", "value"]


def next_batch(run, size: int) -> np.ndarray:
    """Indices of the run's next batch: a permutation per epoch seeded by (seed, epoch), so a
    resumed run sees the same order; the history folds in its outcomes at each epoch boundary.
    `run` carries config (seed, batch_size), epoch, position and history."""
    batch_size = run.config.batch_size
    if run.position + batch_size > size:
        run.epoch, run.position = run.epoch + 1, 0
        run.history.end_epoch()
    order = np.random.default_rng([run.config.seed, run.epoch]).permutation(size)
    batch = order[run.position:run.position + batch_size]
    run.position += batch_size
    return batch


def metrics_table(rows) -> pd.DataFrame:
    """The tidy table every study writes: step, method, seed, n0, metric, value."""
    return pd.DataFrame(rows, columns=COLUMNS)


def progress_bar(enabled: bool, total: int, start: int = 0, desc: str = "", leave=True):
    """A tqdm bar, or None when disabled."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc=desc, leave=leave)


def latest(rows, metrics) -> dict:
    """The most recent value of each of these metrics, formatted for a progress bar."""
    found = {}
    for row in reversed(rows):
        if row["metric"] in metrics and row["metric"] not in found:
            found[row["metric"]] = f"{row['value']:.3f}"
    return found


def add_flags(parser: argparse.ArgumentParser, cls) -> None:
    """One --flag per field of a config dataclass: booleans as --x/--no-x, tuples as lists of
    ints, optional values accept 'none'."""
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.type.startswith("tuple"):
            parser.add_argument(flag, type=int, nargs="+", default=list(f.default))
        else:
            kind = {"int": int, "float": float, "str": str}[f.type.split(" |")[0]]
            convert = (lambda v, k=kind: None if v == "none" else k(v)) if "None" in f.type \
                else kind
            parser.add_argument(flag, type=convert, default=f.default, help=f"default {f.default}")


def build(cls, values: dict):
    """An instance of cls from the parsed values that belong to it (lists back to tuples)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: tuple(v) if isinstance(v, list) else v
                  for k, v in values.items() if k in names})
