"""Input validation shared by the public functions: errors name the argument, value and range."""

from __future__ import annotations

import numbers

import numpy as np


def is_torch(x) -> bool:
    """True for a torch tensor, checked without importing torch."""
    return type(x).__module__.startswith("torch")


def namespace(*xs):
    """The array module (numpy or torch) that the inputs call for; torch wins if any is a tensor."""
    for x in xs:
        if is_torch(x):
            import torch

            return torch
    return np


def describe(x) -> str:
    """A short text of a value for an error message."""
    arr = np.asarray(x.detach().cpu()) if is_torch(x) else np.asarray(x)
    if arr.size > 6:
        return f"array of shape {arr.shape}"
    return repr(arr.tolist()) if arr.ndim else repr(arr.item())


def probabilities(p, name: str = "p"):
    """Return p as a float array (numpy or torch kept) after checking 0 <= p <= 1 and no NaN."""
    if is_torch(p):
        values = p if p.is_floating_point() else p.double()
        bad = ~((values >= 0) & (values <= 1))  # NaN fails both comparisons
    else:
        try:
            values = np.asarray(p, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be numbers in [0, 1], got {describe_safe(p)}") from exc
        # Two reductions, no temporaries; NaN makes both comparisons false.
        if values.size and values.min() >= 0 and values.max() <= 1:
            return values
        bad = ~((values >= 0) & (values <= 1))
    if bool(bad.any()):
        first = values[bad].reshape(-1)[0]
        raise ValueError(
            f"{name} must lie in [0, 1] with no NaN; got {float(first)!r} "
            f"({int(bad.sum())} bad value(s))"
        )
    return values


def describe_safe(x) -> str:
    try:
        return describe(x)
    except Exception:  # noqa: BLE001 - only used inside an error message
        return repr(x)


def batch_probabilities(p, name: str = "p") -> np.ndarray:
    """A non-empty 1-D float64 numpy array of probabilities (the allocator's input)."""
    values = probabilities(np.asarray(p.detach().cpu()) if is_torch(p) else p, name)
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per prompt); got shape "
                         f"{values.shape}")
    if values.size == 0:
        raise ValueError(f"{name} is empty; give at least one prompt")
    return values


def integer(value, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer-valued scalar as int, checked against [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if not float(value).is_integer():
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def real(value, name: str, low: float, high: float, low_open: bool = False) -> float:
    """A finite real scalar in [low, high] (or (low, high] with low_open)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    below = value <= low if low_open else value < low
    if np.isnan(value) or below or value > high:
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must lie in {bracket}{low}, {high}], got {value!r}")
    return value


def registry(entries, what: str) -> dict:
    """name -> entry from (name, entry) pairs, in order; a name given twice is refused, so that
    a table never keeps the last of two entries without a word."""
    table: dict = {}
    for name, entry in entries:
        if name in table:
            raise ValueError(f"{what} {name!r} is registered twice")
        table[name] = entry
    return table
