"""What the README and the docs/ pages show, a test runs: every Python snippet executes as written.

The snippets that import TRL run in .venv-scale (tests/test_integration_trl.py, with a tiny model
and dataset); the verl command is composed through verl's own configuration check in
tests/test_integration_verl.py.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
"""The README and the pages it links to under docs/."""
FRAMEWORKS = ("from trl", "import trl", "from verl", "import verl", "from sera.integrations.trl",
              "from sera.integrations.verl")


def pages_text() -> str:
    """The README and every docs/ page, one after the other."""
    return "\n".join(page.read_text() for page in PAGES)


def python_snippets() -> list[str]:
    """Every ```python block of the README and the docs/ pages, in order."""
    return re.findall(r"```python\n(.*?)```", pages_text(), re.S)


def needs_a_framework(snippet: str) -> bool:
    return any(line.startswith(FRAMEWORKS) for line in snippet.splitlines())


SNIPPETS = [s for s in python_snippets() if not needs_a_framework(s)]


def test_the_readme_has_snippets_and_each_framework_one_is_run_elsewhere():
    framework = [s for s in python_snippets() if needs_a_framework(s)]
    assert SNIPPETS
    # The TRL snippet is run by tests/test_integration_trl.py::test_the_readme_trl_snippet_*, the
    # verl setup hook by tests/test_verl_launch.py::test_the_documented_setup_hook_*.
    assert len(framework) == 2
    assert sum("SeraGRPOTrainer" in s for s in framework) == 1
    assert sum("from sera.integrations.verl import chained" in s for s in framework) == 1


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.splitlines()[0][:40])
def test_readme_python_snippet_runs_as_written(snippet, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet, "README.md", "exec"), {"__name__": "readme"})


# The README's first shell blocks (the ten-minute path and the two commands) hold only these
# commands: the suite's own runs build .venv through `make install` (make test, make figures), and
# `make course` is run below, `make lab` by tests/test_browser.py (its JupyterLab is started that
# way). The later blocks are run by the trainers' and plug-ins' tests.
RUN_BY_THE_PROJECT = {"make install", "make course", "make figures", "make lab", "make test"}


def test_readme_quick_start_commands_are_ones_the_project_runs():
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[:2]
    commands = {line.split("#")[0].strip() for block in blocks for line in block.splitlines()}
    assert "make install" in commands and "make course" in commands
    assert commands - {""} <= RUN_BY_THE_PROJECT, commands - RUN_BY_THE_PROJECT


def test_make_course_writes_both_releases(built, monkeypatch, capsys):
    # `make course` runs release.main, which builds with release.release: the build itself is
    # the shared fixture (tests/conftest.py); here, that main builds where it is told and says so
    from sera.teaching import release

    makefile = (ROOT / "Makefile").read_text()
    assert "course: $(STAMP)\n\t$(BIN)/python -m sera.teaching.release build/course\n" in makefile
    root, written = built
    assert (root / "student" / "exercises" / "01_kappa_and_advantages.ipynb").exists()
    assert (root / "instructor" / "exercises" / "01_kappa_and_advantages.ipynb").exists()
    asked = []
    monkeypatch.setattr(release, "release", lambda output: asked.append(output) or written)
    assert release.main([str(root)]) == 0 and asked == [root]
    out = capsys.readouterr().out
    assert f"student: {len(written['student'])} files in {(root / 'student').resolve()}" in out


def test_readme_cpu_torch_command_resolves_the_cpu_build():
    # The README's way to the CPU build, resolved (not installed) by this environment's pip.
    import subprocess
    import sys

    command = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert f"`.venv/bin/{command}`" in pages_text()
    done = subprocess.run([sys.executable, "-m", *command.split(), "--dry-run", "--no-deps",
                           "--ignore-installed", "--retries", "0", "--timeout", "5"],
                          capture_output=True, text=True)
    if done.returncode != 0 and "No matching distribution" in done.stderr:
        pytest.skip("no route to the PyTorch CPU index or a local copy of its wheel")
    assert done.returncode == 0 and "torch-2.13.0+cpu" in done.stdout, done.stdout + done.stderr


def test_the_citation_files_name_the_paper_and_the_license():
    import tomllib
    import yaml

    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    paper = citation["preferred-citation"]
    readme = (ROOT / "README.md").read_text()
    assert paper["url"] in readme and paper["identifiers"][0]["value"] in readme
    assert paper["title"].split(":")[0] in readme and len(paper["authors"]) == 9
    assert citation["license"] == "MIT" and "MIT License" in (ROOT / "LICENSE").read_text()
    assert 'license = "MIT"' in (ROOT / "pyproject.toml").read_text()
    assert citation["version"] == tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"]["version"]


def test_the_readme_is_short_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in readme, page.name
        for target in re.findall(r"\]\((?!http|#)([^)#]+)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)
