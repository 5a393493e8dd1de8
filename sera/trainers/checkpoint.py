"""A run's checkpoint (written through sera.runstore.atomic, so a crash loses at most the steps
since the last one) and what its numbers depend on beyond the configuration (`provenance`, the
weights `fingerprint`). torch is imported when a checkpoint is read or written, not before."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sera import runstore
from sera.trainers.config import differences

if TYPE_CHECKING:
    import torch


def save(path: Path, state: dict) -> None:
    import torch

    with runstore.atomic(path) as scratch:
        torch.save(state, scratch)


def load(path: Path, config: dict, defaults: dict | None = None) -> dict | None:
    """The saved state if path exists; a ValueError if it was written by another config (a
    setting added since, at its value in `defaults`, is no change)."""
    path = Path(path)
    if not path.exists():
        return None
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    changed = differences(state.get("config", {}), config, defaults)
    if changed:
        raise ValueError(f"{path} was written by a different configuration "
                         f"({', '.join(changed)} differ); use a new output folder, delete the "
                         f"checkpoint, or rerun the grid with rerun=True")
    return state


def provenance() -> dict:
    """What a run's numbers depend on beyond its configuration: the library versions (numpy,
    torch, transformers, tokenizers), torch's thread count and the CPU's vector instruction set
    (bitwise-equal results need the same three), and the machine."""
    import platform

    import numpy
    import torch

    return {"torch": torch.__version__, "numpy": numpy.__version__,
            **{name: _version(name) for name in ("transformers", "tokenizers")},
            "python": platform.python_version(), "torch_threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(), "cuda": torch.cuda.is_available(),
            "commit": commit(), "command": " ".join(sys.argv),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def fingerprint(model: torch.nn.Module) -> str:
    """A short hash of a model's weights (names, shapes, dtypes and bytes in state_dict order):
    equal for bitwise-equal models, whatever file format they were saved in."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


@functools.cache
def commit() -> str | None:
    """The package's git commit (with "+changes" when its tree differs from it), or None
    outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "sera"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if dirty else "")
