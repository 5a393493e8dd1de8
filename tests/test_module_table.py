"""The module table (docs/modules.md) names every public module of the package."""

import pkgutil
import re
from pathlib import Path

import sera

ROOT = Path(__file__).resolve().parents[1]


def _listed() -> set[str]:
    """Module names in the README's table rows, with `.name` shorthands expanded from the first
    full name of the row (`sera.trainers.sequence`, `.engines` lists sera.trainers.engines)."""
    names = set()
    for line in (ROOT / "docs" / "modules.md").read_text().splitlines():
        if not line.startswith("| `sera"):
            continue
        cell = line.split("|")[1]
        first, *rest = re.findall(r"`([^`]+)`", cell)
        # `sera.plotting` (`.style`, ...) lists submodules; `sera.trainers.sequence`, `.engines`
        # lists siblings.
        base = first if "(" in cell else first.rsplit(".", 1)[0]
        names.add(first)
        names.update(base + short if short.startswith(".") else short for short in rest)
    return names


def test_every_public_module_is_in_the_readme_table():
    modules = {m.name for m in pkgutil.walk_packages(sera.__path__, "sera.")
               if not m.ispkg and not any(part.startswith("_") for part in m.name.split("."))}
    missing = modules - _listed()
    assert not missing, f"add these to the README's module table: {sorted(missing)}"
