"""What the README shows, a test runs: every Python snippet of README.md executes as written.

The snippets that import TRL run in .venv-scale (tests/test_integration_trl.py, with a tiny model
and dataset); the verl command is composed through verl's own configuration check in
tests/test_integration_verl.py.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("from trl", "import trl", "from verl", "import verl")


def python_snippets() -> list[str]:
    """Every ```python block of README.md, in order."""
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def needs_a_framework(snippet: str) -> bool:
    return any(line.startswith(FRAMEWORKS) for line in snippet.splitlines())


SNIPPETS = [s for s in python_snippets() if not needs_a_framework(s)]


def test_the_readme_has_snippets_and_each_framework_one_is_run_elsewhere():
    framework = [s for s in python_snippets() if needs_a_framework(s)]
    assert SNIPPETS
    # The one TRL snippet is run by tests/test_integration_trl.py::test_the_readme_trl_snippet_*.
    assert len(framework) == 1 and "SeraGRPOTrainer" in framework[0]


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.splitlines()[0][:40])
def test_readme_python_snippet_runs_as_written(snippet, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet, "README.md", "exec"), {"__name__": "readme"})
