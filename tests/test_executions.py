"""The record of `make figures`' executions: a test reuses one only for the same sources, the
same environment and profile, models all trained in that invocation and files unchanged since."""

import json
import subprocess
from pathlib import Path

import pytest

from sera.teaching import executions


@pytest.fixture
def checkout(tmp_path):
    """A small git checkout with the folders the fingerprint covers."""
    root = tmp_path / "repo"
    for name, text in {"sera/a.py": "x = 1\n", "notebooks/01_a.ipynb": "{}\n",
                       "data/t.csv": "a\n1\n", "pyproject.toml": "[project]\n",
                       "tests/test_a.py": "\n", ".gitignore": "build/\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    return root


def test_the_fingerprint_follows_the_sources_and_nothing_else(checkout):
    first = executions.fingerprint(checkout)
    assert first is not None and executions.fingerprint(checkout) == first
    (checkout / "tests" / "test_a.py").write_text("# a test is not what a notebook runs\n")
    (checkout / "build").mkdir()
    (checkout / "build" / "out.txt").write_text("ignored")
    assert executions.fingerprint(checkout) == first
    for name in ("sera/a.py", "notebooks/01_a.ipynb", "data/t.csv", "pyproject.toml"):
        path = checkout / name
        before = path.read_text()
        path.write_text(before + " ")
        assert executions.fingerprint(checkout) != first, name
        path.write_text(before)
    (checkout / "sera" / "new.py").write_text("")  # untracked, not ignored: part of the source
    assert executions.fingerprint(checkout) != first


def test_no_fingerprint_outside_a_git_checkout(tmp_path):
    assert executions.fingerprint(tmp_path) is None


def _recorded(tmp_path, **changes):
    notebook = tmp_path / "notebooks" / "05_x.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text("{}")
    output, figures = tmp_path / "out", tmp_path / "figures"
    output.mkdir()
    figures.mkdir()
    (output / notebook.name).write_text('{"cells": []}')
    for ext in ("png", "pdf"):
        (figures / f"curve.{ext}").write_bytes(b"figure " + ext.encode())
    options = {"profile": "fast", "fresh": True, "source": "abc", **changes}
    executions.record(notebook, output=output, figures=figures, names=["curve"],
                      seconds=12.0, **options)
    return notebook, output, figures


def test_a_recorded_execution_is_reused_only_when_everything_still_holds(tmp_path, monkeypatch):
    monkeypatch.delenv(executions.RERUN_VARIABLE, raising=False)
    notebook, output, figures = _recorded(tmp_path)
    found = executions.reusable(notebook, "fast", output, source="abc")
    assert found == executions.Execution(output / notebook.name, figures.resolve())
    assert executions.reusable(notebook, "long", output, source="abc") is None
    assert executions.reusable(notebook, "fast", output, source="other sources") is None
    monkeypatch.setenv(executions.RERUN_VARIABLE, "1")
    assert executions.reusable(notebook, "fast", output, source="abc") is None
    monkeypatch.delenv(executions.RERUN_VARIABLE)
    (figures / "curve.pdf").write_bytes(b"another figure")
    assert executions.reusable(notebook, "fast", output, source="abc") is None


@pytest.mark.parametrize("change", ["read back", "executed copy", "no figure", "garbage"])
def test_an_execution_that_cannot_stand_for_a_run_is_not_reused(tmp_path, change):
    notebook, output, figures = _recorded(tmp_path, fresh=change != "read back")
    record = output / f"{notebook.stem}.run.json"
    if change == "executed copy":
        (output / notebook.name).write_text('{"cells": [1]}')
    elif change == "no figure":
        (figures / "curve.png").unlink()
    elif change == "garbage":
        record.write_text("{not json")
    assert executions.reusable(notebook, "fast", output, source="abc") is None
    if change == "read back":
        assert json.loads(record.read_text())["fresh"] is False


def test_runs_are_fresh_only_where_no_finished_run_lies(tmp_path):
    from sera import runstore

    assert executions.trained_nothing_yet(tmp_path / "none")
    run = tmp_path / "runs" / "05_maze" / "fast" / "sera_seed-0"
    run.mkdir(parents=True)
    assert executions.trained_nothing_yet(tmp_path / "runs")
    (run / runstore.FINAL).write_text("")
    assert not executions.trained_nothing_yet(tmp_path / "runs")


def test_the_checkout_has_a_fingerprint():
    assert executions.fingerprint(Path(__file__).resolve().parents[1]) is not None


def test_why_not_names_what_changed_since_the_record(checkout, tmp_path, monkeypatch):
    monkeypatch.setattr(executions.runstore, "ROOT", checkout)
    monkeypatch.delenv(executions.RERUN_VARIABLE, raising=False)
    notebook = checkout / "notebooks" / "01_a.ipynb"
    output, figures = tmp_path / "out", tmp_path / "figures"
    output.mkdir()
    figures.mkdir()
    (output / notebook.name).write_text('{"cells": []}')
    (figures / "f.png").write_bytes(b"png")
    listing = executions.manifest(checkout)
    executions.record(notebook, output=output, figures=figures, names=[], profile="fast",
                      fresh=True, seconds=1.0, source=executions.digest(listing),
                      listing=listing)
    assert executions.digest(listing) == executions.fingerprint(checkout)
    assert executions.why_not(notebook, "fast", output) == "reusable"
    assert "profile" in executions.why_not(notebook, "long", output)
    (checkout / "sera" / "a.py").write_text("x = 2\n")
    assert "files ['sera/a.py']" in executions.why_not(notebook, "fast", output)
    (checkout / "sera" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(executions, "_environment", lambda: ["3.11.7", "extra==1.0"])
    said = executions.why_not(notebook, "fast", output)
    assert "+['extra==1.0']" in said and "files []" in said


def test_the_environment_is_the_installed_one_whatever_sys_path_holds(tmp_path, monkeypatch):
    # an imported setuptools puts its vendored packages' folder on sys.path: the list must not
    # change with it, or a test process never matches what `make figures` recorded
    before = executions._environment()
    vendored = tmp_path / "_vendor"
    (vendored / "jaraco.text-4.0.0.dist-info").mkdir(parents=True)
    (vendored / "jaraco.text-4.0.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: jaraco.text\nVersion: 4.0.0\n")
    monkeypatch.syspath_prepend(str(vendored))
    from importlib.metadata import distributions

    assert any(d.metadata["Name"] == "jaraco.text" for d in distributions())  # sys.path sees it
    assert executions._environment() == before
    assert any(line.startswith("numpy==") for line in before)
