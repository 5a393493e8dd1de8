"""Configuration shared by every trainer: the run, and named presets (the allocator's settings,
AllocatorConfig, live in the core, sera.allocator_config, and are imported here).

Each trainer's config is a frozen dataclass that extends RunConfig with its task's fields; the
command line (sera.trainers.cli) and the notebooks build the same dataclass, and the final config
is saved beside the results it produced.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from sera.allocator_config import AllocatorConfig
from sera.methods import METHODS
from sera.tables import RUN_KEYS


@dataclass(frozen=True)
class RunConfig:
    """Fields every trainer has: the method, the budget, the schedule and where results go."""

    method: str = "sera"
    """A name from sera.methods.METHODS (the trainer lists the ones it supports)."""
    n0: int = 16
    """Rollouts per prompt under uniform allocation; the budget of a batch is its size * n0."""
    batch_size: int = 64
    """Prompts per step (the last batch of an epoch may be smaller: no prompt is skipped)."""
    steps: int = 300
    """Optimizer steps."""
    seed: int = 0
    """Seed of the initialisation, the prompt order and the sampling."""
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    """The allocator and its estimates."""
    eval_every: int = 25
    """Steps between validation measurements."""
    checkpoint_every: int = 100
    """Steps between checkpoints (one is always written at the end)."""
    min_allocated_share: float = 0.5
    """A method that allocates from estimates must do so in at least this share of its steps,
    or the run stops with an error (its tables are saved first)."""
    out: str = "runs/run"
    """Output folder: metrics.csv, final.csv, allocations.csv, config.json, checkpoint.pt."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {tuple(METHODS)}, got {self.method!r}")
        for name in ("n0", "batch_size", "steps", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_allocated_share <= 1:
            raise ValueError(f"min_allocated_share must lie in [0, 1], got "
                             f"{self.min_allocated_share}")

    def keys(self) -> dict:
        """What tells this run apart from the others of a study: every result row carries it.
        u_min is the threshold the run selected at, None (an empty cell in the tables) where it
        applied none: the selection off, or a method that does not select."""
        method = METHODS[self.method]
        values = {"method": self.method, "estimates": method.estimates,
                  "allocator": method.allocator, "seed": self.seed, "n0": self.n0,
                  "agg": self.aggregation,
                  "u_min": (self.allocator.for_method(method).u_min or None)
                  if method.allocator == "waterline" else None}
        return {name: values[name] for name in RUN_KEYS}

    @property
    def aggregation(self) -> str:
        """How the loss averages over responses (sequence trainers: over tokens)."""
        return "response-mean"


# Settings that may change between a run and its resumption without changing its results.
RESUMABLE = {"steps", "out", "progress", "device"}


def as_dict(config) -> dict:
    """A config as plain JSON-ready values (tuples as lists, nested configs as dicts)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def defaults(config) -> dict:
    """as_dict of the config's class with every field at its default."""
    return as_dict(type(config)())


def from_dict(cls, values: dict):
    """The config that as_dict turned into values (lists back to tuples, nested configs back)."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
            else f.default
        if dataclasses.is_dataclass(default):
            value = from_dict(type(default), value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def differences(saved: dict, current: dict, defaults: dict | None = None) -> list[str]:
    """Names of the settings (dotted for nested ones) that differ, RESUMABLE ones aside. With
    `defaults` (as_dict of the config class's defaults), a setting the saved run predates is no
    change while it keeps its default value."""
    changed = []
    defaults = defaults or {}
    for name in sorted(set(saved) | set(current)):
        if name in RESUMABLE:
            continue
        if name not in saved and name in defaults and current.get(name) == defaults[name]:
            continue
        a, b = saved.get(name), current.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            inner_defaults = defaults.get(name) if isinstance(defaults.get(name), dict) else None
            changed += [f"{name}.{inner}" for inner in differences(a, b, inner_defaults)]
        elif a != b:
            changed.append(name)
    return changed
