"""nbgrader's autograde without its false alarm on hidden tests.

nbgrader keeps each locked cell's source *with* its hidden tests in the gradebook and releases it
without them, so at autograde every untouched check cell looks edited ("Attribute 'checksum'
for cell ... has changed!", nbgrader issue 1961) before nbgrader puts the hidden tests back. The
course's nbgrader_config.py (written by `make course`) swaps in OverwriteCells below, which puts
them back first when the submitted cell is exactly the released one, so the warning is left for
a cell that was really changed. What is graded is the same either way: nbgrader's own
OverwriteCells still replaces every locked cell with the gradebook's source.
"""

from __future__ import annotations

import copy

from nbgrader import utils
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.preprocessors import OverwriteCells as _NbgraderOverwriteCells


class OverwriteCells(_NbgraderOverwriteCells):
    """nbgrader's OverwriteCells, quiet for a locked cell submitted as it was released."""

    def preprocess_cell(self, cell, resources, cell_index):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and utils.is_locked(cell):
            try:
                source = self.gradebook.find_source_cell(grade_id, self.notebook_id,
                                                         self.assignment_id)
            except MissingEntry:
                source = None
            if source is not None and source.cell_type == cell.cell_type:
                released = copy.deepcopy(cell)
                released.source = source.source
                ClearHiddenTests()._remove_hidden_test_region(released)
                if released.source.rstrip() == cell.source.rstrip():
                    cell.source = source.source
        return super().preprocess_cell(cell, resources, cell_index)


def config_lines() -> str:
    """The lines of a course's nbgrader_config.py that swap this OverwriteCells in."""
    return ("from nbgrader.converters import Autograde\n"
            "from sera.teaching.autograde import OverwriteCells\n"
            "c.Autograde.sanitize_preprocessors = [\n"
            "    OverwriteCells if p.__name__ == 'OverwriteCells' else p\n"
            "    for p in Autograde.class_traits()['sanitize_preprocessors'].default()]\n")
