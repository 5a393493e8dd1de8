"""Configuration shared by every trainer: the allocator, the run, and named presets.

Each trainer's config is a frozen dataclass that extends RunConfig with its task's fields; the
command line (sera.trainers.cli) and the notebooks build the same dataclass, and the final config
is saved beside the results it produced.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from typing import Literal

from sera.counts import WATERLINE
from sera.history import HISTORY_RULES, SuccessHistory
from sera.methods import METHODS
from sera.tables import RUN_KEYS


@dataclass(frozen=True)
class AllocatorConfig:
    """How a method that allocates spends the budget B * n0, and where its estimates come from."""

    n_min: int = 2
    """Fewest rollouts a retained prompt gets (>= 2: one rollout carries no centered signal)."""
    n_max: int | None = None
    """Most rollouts a prompt gets; None means n_max_factor * n0."""
    n_max_factor: int = 8
    """n_max as a multiple of n0 when n_max is None."""
    rounding: Literal["paper", "exact"] = "paper"
    """Which waterline rule a waterline method plans with (sera.counts.WATERLINE, a rule of
    sera.allocate): the paper's rounding or the exact integer max-min."""
    u_min: float | None = None
    """Observability-guided selection: keep the largest prefix with U(p, N_q) >= u_min; 0.0
    turns it off. None: the method's own (Method.selection; `sera`: sera.methods.U_MIN,
    `sera-rate`: 0.0)."""
    history_rule: Literal["rate", "counts"] | None = None
    """How an epoch's outcomes enter the historical estimate (sera.history.HISTORY_RULES). None:
    the method's own (`sera`: counts, the paper's; `sera-rate`: rate)."""
    history_gamma: float = 0.5
    """Discount per epoch of the historical evidence."""
    history_weight: float = 16.0
    """Weight of one epoch's success rate under history_rule 'rate'."""
    history_prior: tuple[float, float] = (1.0, 1.0)
    """Beta(alpha, beta) prior of the historical estimate."""

    def __post_init__(self):
        if self.n_min < 2:
            raise ValueError(f"n_min must be >= 2, got {self.n_min}")
        if self.n_max is not None and self.n_max < self.n_min:
            raise ValueError(f"n_max must be >= n_min = {self.n_min}, got {self.n_max}")
        if self.n_max_factor < 1:
            raise ValueError(f"n_max_factor must be >= 1, got {self.n_max_factor}")
        if self.rounding not in WATERLINE:
            raise ValueError(f"rounding must be one of {WATERLINE} (the waterline's rules), got "
                             f"{self.rounding!r}")
        if self.u_min is not None and not 0 <= self.u_min < 1:
            raise ValueError(f"u_min must lie in [0, 1), got {self.u_min}")
        if self.history_rule is not None and self.history_rule not in HISTORY_RULES:
            raise ValueError(f"history_rule must be one of {HISTORY_RULES} or None (the "
                             f"method's own), got {self.history_rule!r}")
        # the history's own checks, here so that a bad value fails where it is set
        prior = tuple(self.history_prior)
        if len(prior) != 2:
            raise ValueError(f"history_prior must be two numbers (alpha, beta), got {prior!r}")
        try:
            SuccessHistory(1, gamma=self.history_gamma, alpha=prior[0], beta=prior[1],
                           weight=self.history_weight)
        except (ValueError, TypeError) as exc:
            name, rest = str(exc).split(" ", 1)
            field = {"alpha": "history_prior's alpha", "beta": "history_prior's beta"}.get(
                name, f"history_{name}")
            raise ValueError(f"{field} {rest}") from exc
        # a tuple whatever sequence was given (a list from JSON or by hand): the config hashes
        object.__setattr__(self, "history_prior", tuple(self.history_prior))

    @functools.lru_cache(maxsize=64)  # noqa: B019 (frozen and small; called on every step)
    def for_method(self, method) -> AllocatorConfig:
        """This config with the method's own history rule and u_min where it leaves them to the
        method (None): after this call u_min is a number (0.0: the selection off)."""
        rule = self.history_rule or method.history_rule
        u_min = self.u_min if self.u_min is not None else method.selection
        return dataclasses.replace(self, history_rule=rule, u_min=u_min)

    def n_max_for(self, n0: int) -> int:
        """n_max resolved for a budget of n0 rollouts per prompt."""
        return self.n_max if self.n_max is not None else self.n_max_factor * n0

    def history(self, n_prompts: int) -> SuccessHistory:
        """The estimates' store, under this config's rule (resolve it with `for_method` first;
        unresolved, the paper's counts rule)."""
        alpha, beta = self.history_prior
        return SuccessHistory(n_prompts, gamma=self.history_gamma, alpha=alpha, beta=beta,
                              rule=self.history_rule or "counts", weight=self.history_weight)


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
