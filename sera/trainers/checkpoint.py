"""Checkpoints and tables written atomically (a temporary file, then a rename), so a crash loses
at most the steps since the last checkpoint and a resumed run continues the same tables."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from sera.trainers.config import differences


def save(path: Path, state: dict) -> None:
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def write_csv(table, path: Path) -> None:
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    table.to_csv(tmp, index=False)
    os.replace(tmp, path)


def load(path: Path, config: dict) -> dict | None:
    """The saved state if path exists; a ValueError if it was written by another config."""
    path = Path(path)
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    changed = differences(state.get("config", {}), config)
    if changed:
        raise ValueError(f"{path} was written by a different configuration "
                         f"({', '.join(changed)} differ); use a new output folder, delete the "
                         f"checkpoint, or rerun the grid with rerun=True")
    return state
