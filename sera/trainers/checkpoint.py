"""Checkpoints written atomically, with the metrics table beside them, so a crash loses
at most the steps since the last checkpoint and a resumed run continues the same table."""

from __future__ import annotations

import os
from pathlib import Path

import torch

# Fields that may change between a run and its resumption without changing its results.
RESUMABLE = {"steps", "out", "progress", "device", "workers"}


def save_checkpoint(path: Path, state: dict, table, out: Path) -> None:
    """Write state to path and the table to out/metrics.csv, each through a temporary file."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    csv = Path(out) / "metrics.csv"
    table.to_csv(csv.with_suffix(".tmp"), index=False)
    os.replace(csv.with_suffix(".tmp"), csv)


def load_checkpoint(path: Path, config: dict) -> dict | None:
    """The saved state if path exists; a ValueError if it was written by another config."""
    path = Path(path)
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    saved = state.get("config", {})
    changed = {k for k in set(saved) | set(config) if k not in RESUMABLE
               and _plain(saved.get(k)) != _plain(config.get(k))}
    if changed:
        raise ValueError(f"{path} was written by a different configuration "
                         f"({', '.join(sorted(changed))} differ); use a new --out folder "
                         f"or delete the checkpoint")
    return state


def _plain(value):
    return list(value) if isinstance(value, tuple | list) else value
