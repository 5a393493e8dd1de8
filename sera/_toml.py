"""Reading TOML files (confirmation points' registrations, the course's quizzes): tomllib from
Python 3.11, tomli, its fallback, on Python 3.10."""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def load(path) -> dict:
    """The TOML file at `path`, as a dict."""
    with open(path, "rb") as handle:
        return tomllib.load(handle)
