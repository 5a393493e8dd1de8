"""The project's notebooks on disk: which there are, in order, and their stored copies kept clean.

Below the runner (sera.teaching.notebooks) and the course release (sera.teaching.release), which
both read them.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path.cwd()


def notebooks(folder: Path | None = None) -> list[Path]:
    """The numbered notebooks, in order."""
    folder = folder or ROOT / "notebooks"
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


# What a stored notebook may keep: outputs, execution counts and editor metadata go. A cell's
# nbgrader metadata stays: it is written by hand (what is graded, for how many points), and nbgrader
# needs it in both releases. A prose check's `jupyter.source_hidden` stays too: JupyterLab shows
# it collapsed, out of the reader's way.
KEPT_NOTEBOOK_METADATA = {"kernelspec", "language_info", "sera"}
KEPT_CELL_METADATA = {"tags", "nbgrader", "jupyter"}


def strip(path: Path) -> bool:
    """Remove outputs, execution counts and machine-specific metadata in place (what JupyterLab
    saves while a notebook is used); True when the file changed."""
    before = path.read_text()
    nb = nbformat.reads(before, as_version=4)
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in KEPT_NOTEBOOK_METADATA}
    for cell in nb.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in KEPT_CELL_METADATA}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    after = nbformat.writes(nb) + "\n"
    if after != before:
        path.write_text(after)
    return after != before
