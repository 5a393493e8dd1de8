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


def provenance() -> dict:
    """What a run's numbers depend on beyond its configuration: the library versions, torch's
    thread count and the CPU's vector instruction set (bitwise-equal results need the same
    three), and the machine."""
    import platform

    import numpy

    return {"torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version(), "torch_threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(), "cuda": torch.cuda.is_available()}
