"""constraints.txt, the versions `make` installs into .venv: it pins every package the main
environment asks for, each pin inside pyproject's range, and the environment make built holds
them."""

import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("notebooks", "train", "dev")  # what the Makefile installs into .venv


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = {}
    for line in lines:
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def _asked() -> list[Requirement]:
    """The requirements of the package and its EXTRAS, with sera[...] followed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    asked, todo, seen = [], list(EXTRAS), set()
    asked += [Requirement(r) for r in project["dependencies"]]
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in map(Requirement, extras[extra]):
            if canonicalize_name(requirement.name) == "sera":
                todo += sorted(requirement.extras)
            else:
                asked.append(requirement)
    return [r for r in asked if r.marker is None or r.marker.evaluate()]


def test_every_requirement_is_pinned_inside_its_range():
    pins = _pins()
    assert len(pins) == len(set(pins)) > 50
    for requirement in _asked():
        name = canonicalize_name(requirement.name)
        if name == "torch":  # pinned by the Makefile's TORCH (the CPU build)
            assert name not in pins
            continue
        assert name in pins, f"{requirement} has no pin in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (requirement,
                                                                              pins[name])


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="not running in the environment make builds")
def test_the_environment_make_built_holds_the_pins():
    # the environment's own site-packages only: an imported setuptools puts the copies of
    # packaging and platformdirs it vendors on sys.path too
    folders = sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})
    installed = {canonicalize_name(d.metadata["Name"]): d.version
                 for d in metadata.distributions(path=folders)}
    wrong = {name: (version, installed.get(name)) for name, version in _pins().items()
             if installed.get(name) != version}
    assert not wrong, f"pinned, installed: {wrong}"
