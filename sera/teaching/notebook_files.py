"""The project's notebooks on disk: which there are, in order, and their stored copies kept clean.

Below the runner (sera.teaching.notebooks) and the course release (sera.teaching.release), which
both read them.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path.cwd()
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*\n?",
                    re.M | re.S)
"""A code cell's hidden tests, with their markers: the grade, which only the instructor sees."""


def notebooks(folder: Path | None = None) -> list[Path]:
    """The numbered notebooks, in order."""
    folder = folder or ROOT / "notebooks"
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


READERS = {"student": "instructor", "instructor": "student"}  # each reader and the blocks it skips


def guide_for(text: str, reader: str) -> str:
    """The course guide (notebooks/README.md) as `reader` gets it: without its maintainer
    sections (each follows a `<!-- maintainers -->` line and runs to the next level-2 heading)
    and without the blocks marked for the other reader (`<!-- instructor -->` ...
    `<!-- /instructor -->`: recipes, grading and the self-study switch, which the student copy
    leaves out; `<!-- student -->` ... `<!-- /student -->`: what the student copy adds)."""
    if reader not in READERS:
        raise ValueError(f"reader must be one of {sorted(READERS)}, got {reader!r}")
    text = re.sub(r"<!-- maintainers -->\n## .*?(?=^## |\Z)", "", text, flags=re.S | re.M)
    other = READERS[reader]
    text = re.sub(rf"<!-- {other} -->\n.*?<!-- /{other} -->\n", "", text, flags=re.S)
    return re.sub(rf"<!-- /?{reader} -->\n", "", text)


# What a stored notebook may keep: outputs, execution counts and editor metadata go. A cell's
# nbgrader metadata stays: it is written by hand (what is graded, for how many points), and nbgrader
# needs it in both releases. A prose check's `jupyter.source_hidden` stays too: JupyterLab shows
# it collapsed, out of the reader's way.
KEPT_NOTEBOOK_METADATA = {"kernelspec", "language_info", "sera"}
KEPT_CELL_METADATA = {"tags", "nbgrader", "jupyter", "sera"}  # sera: a quoted cell's template


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
