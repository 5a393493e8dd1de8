"""Notebooks: clean in git, executed headless by papermill, every declared figure written."""

from pathlib import Path

import nbformat
import pytest

from sera import notebooks as runner

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = runner.notebooks(ROOT / "notebooks")
ALLOWED_NOTEBOOK_METADATA = {"kernelspec", "language_info", "sera"}


def test_notebooks_exist_in_order():
    names = [p.name for p in NOTEBOOKS]
    assert names[:5] == ["01_finite_rollout_fidelity.ipynb", "02_waterline_allocation.ipynb",
                         "03_allocation_vs_success.ipynb", "04_gradient_cosine_study.ipynb",
                         "05_maze_navigation.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_clean(path):
    nb = nbformat.read(path, as_version=4)
    assert set(nb.metadata) <= ALLOWED_NOTEBOOK_METADATA, set(nb.metadata)
    for i, cell in enumerate(nb.cells):
        assert set(cell.metadata) <= {"tags"}, f"cell {i} carries metadata {dict(cell.metadata)}"
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has stored outputs"
            assert cell.execution_count is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_follows_the_opening_cells(path):
    cells = nbformat.read(path, as_version=4).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    assert "Module functions used" in cells[0].source
    imports = [line for line in cells[1].source.splitlines() if line.strip()]
    assert all(line.startswith(("import ", "from ")) for line in imports), imports
    assert "parameters" in cells[2].metadata.get("tags", [])
    assert "profile = " in cells[2].source and "figures_dir = " in cells[2].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_writes_its_figures(path, tmp_path):
    declared = runner.declared_figures(path)
    assert declared, f"{path.name} declares no figures"
    parameters = nbformat.read(path, as_version=4).cells[2].source
    extra = {"runs_dir": str(tmp_path / "runs")} if "runs_dir" in parameters else None
    runner.run_notebook(path, "fast", figures=tmp_path / "figures", output=tmp_path / "out",
                        extra=extra)
    for name in declared:
        for ext in ("png", "pdf"):
            written = tmp_path / "figures" / f"{name}.{ext}"
            assert written.stat().st_size > 1000, written


def test_failing_cell_is_named(tmp_path):
    bad = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("profile = 'fast'\nfigures_dir = '.'",
                                  metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("raise ValueError('boom')"),
    ])
    bad.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                  "language": "python"}
    path = tmp_path / "99_broken.ipynb"
    nbformat.write(bad, path)
    with pytest.raises(RuntimeError, match=r"99_broken.ipynb: cell \d+ .*ValueError: boom"):
        runner.run_notebook(path, "fast", figures=tmp_path, output=tmp_path / "out")


def test_readme_gallery_lists_every_figure():
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        for name in runner.declared_figures(path):
            assert f"figures/{name}.png" in readme, name
            assert (ROOT / "figures" / f"{name}.png").exists(), f"figures/{name}.png not committed"
