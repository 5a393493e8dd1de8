"""Each optional extra of pyproject.toml declares what its code imports.

For every extra, the modules it serves are followed through their `sera` imports; each
third-party module they import (anywhere in the file, function bodies included, except imports
guarded by `except ImportError`) must come from a distribution the core dependencies or the extra
require, directly or through their own requirements. A missing declaration is what a user of
`pip install ".[scale]"` alone meets as a ModuleNotFoundError in a reward worker.

The check reads installed metadata, so an extra is checked where it is installed: notebooks and
train in the main environment, scale in .venv-scale (`make test-integrations`, which also runs
the plug-ins' tests in an environment built from the scale extra alone). The gpu extra needs CUDA
and is not installed on these machines.
"""

import ast
import importlib.metadata as metadata
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

SERVES = {
    "notebooks": ["sera.teaching.widgets", "sera.teaching.notebooks",
                  "sera.teaching.notebook_files", "sera.teaching.course", "sera.teaching.release",
                  "sera.plotting"],
    "train": ["sera.trainers.cli", "sera.trainers.classification", "sera.trainers.maze",
              "sera.trainers.math", "sera.trainers.engines", "sera.tasks.classification",
              "sera.tasks.maze", "sera.tasks.math", "sera.models"],
    "scale": ["sera.integrations.planner", "sera.integrations.verl", "sera.integrations.trl",
              "sera.integrations.gsm8k"],
}
"""The modules each extra exists for."""

CONDITIONAL = {
    ("sera._checks", "torch"): "imported only when an input already is a torch tensor",
    ("sera.trainers.engines", "vllm"): "after the engine's guarded import, which names the gpu "
                                       "extra",
    ("sera._toml", "tomli"): "tomllib's fallback on Python 3.10, where the core requires it",
}
"""Imports inside functions that run only where the module is already installed."""


def _path(module: str) -> Path | None:
    base = ROOT / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _guarded(tree: ast.AST) -> set[int]:
    """ids of import nodes inside a `try` whose handlers catch ImportError."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError",
                                                               "ModuleNotFoundError")
                for h in node.handlers):
            for part in node.body:
                guarded |= {id(n) for n in ast.walk(part)}
    return guarded


def third_party_imports(modules) -> dict[str, str]:
    """{top-level third-party module: a sera module importing it}, following sera's imports."""
    found, seen, todo = {}, set(), list(modules)
    while todo:
        module = todo.pop()
        path = _path(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        tree = ast.parse(path.read_text())
        guarded = _guarded(tree)
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "sera":
                    todo.append(name)
                elif top not in sys.stdlib_module_names and top != "__future__" \
                        and (module, top) not in CONDITIONAL:
                    found.setdefault(top, module)
    return found


def required(requirements, extras=("",)) -> set[str]:
    """Distributions the requirements pull in, closed over installed metadata."""
    names, todo = set(), [(Requirement(r), extras) for r in requirements]
    while todo:
        requirement, active = todo.pop()
        if requirement.marker and not any(requirement.marker.evaluate({"extra": e})
                                          for e in active):
            continue
        name = canonicalize_name(requirement.name)
        if name in names:
            continue
        names.add(name)
        try:
            more = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [(Requirement(r), ("", *requirement.extras)) for r in more]
    return names


@pytest.mark.parametrize("extra", sorted(SERVES))
def test_each_extra_declares_what_its_code_imports(extra):
    anchor = {"notebooks": "ipywidgets", "train": "tyro", "scale": "verl"}[extra]
    if importlib.util.find_spec(anchor) is None:
        if extra == "scale" and os.environ.get("SERA_REQUIRE_INTEGRATIONS"):
            pytest.fail("verl is missing from the scale environment")
        pytest.skip(f"the {extra} extra is not installed here")
    allowed = required(PROJECT["dependencies"]) | required(
        PROJECT["optional-dependencies"][extra], extras=("", extra))
    owners = metadata.packages_distributions()
    missing = {}
    for top, importer in sorted(third_party_imports(SERVES[extra]).items()):
        distributions = {canonicalize_name(d) for d in owners.get(top, [])}
        if not distributions:
            missing[top] = f"not installed (imported by {importer})"
        elif not distributions & allowed:
            missing[top] = f"from {sorted(distributions)}, imported by {importer}"
    assert not missing, f"the {extra} extra lacks: {missing}"


def test_the_check_finds_an_undeclared_import():
    """The oracle on a known case: the reward's math_verify is imported inside a function, and
    only the train and scale extras declare it."""
    found = third_party_imports(["sera.integrations.gsm8k"])
    assert found.get("math_verify") == "sera.tasks.math"
    assert "math-verify" not in required(PROJECT["dependencies"])
    for extra in ("train", "scale"):
        assert any(Requirement(r).name == "math-verify"
                   for r in PROJECT["optional-dependencies"][extra]), extra


def test_the_gpu_pins_of_the_plugins_are_verls_own():
    """scale-gpu pins the CUDA stack to what verl's `vllm` extra pins, at the verl version the
    scale extra pins (read from verl's installed metadata, so this runs in .venv-scale)."""
    try:
        declared = metadata.requires("verl") or []
    except metadata.PackageNotFoundError:
        if os.environ.get("SERA_REQUIRE_INTEGRATIONS"):
            pytest.fail("verl is missing from the scale environment")
        pytest.skip("verl is not installed here")
    verls = {Requirement(r).name: Requirement(r) for r in declared
             if Requirement(r).marker and Requirement(r).marker.evaluate({"extra": "vllm"})}
    ours = {Requirement(r).name: Requirement(r) for r in PROJECT["optional-dependencies"]
            ["scale-gpu"]}
    assert {"torch", "torchvision", "vllm", "transformers"} <= set(ours)
    for name in ("torch", "torchvision", "vllm", "transformers"):
        assert str(ours[name].specifier) == str(verls[name].specifier), name
    scale = {Requirement(r).name: Requirement(r) for r in PROJECT["optional-dependencies"]
             ["scale"]}
    assert scale["verl"].specifier.contains(metadata.version("verl"))
    pinned = next(iter(ours["transformers"].specifier)).version
    assert scale["transformers"].specifier.contains(pinned)  # the pins satisfy the scale extra
