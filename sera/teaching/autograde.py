"""nbgrader's autograde without its false alarm on hidden tests.

nbgrader keeps each locked cell's source *with* its hidden tests in the gradebook and releases it
without them, so at autograde every untouched check cell looks edited ("Attribute 'checksum'
for cell ... has changed!", nbgrader issue 1961) before nbgrader puts the hidden tests back. The
course's nbgrader_config.py (written by `make course`) swaps in OverwriteCells below, which puts
them back first when the submitted cell is exactly the released one, so the warning is left for
a cell that was really changed. What is graded is the same either way: nbgrader's own
OverwriteCells still replaces every locked cell with the gradebook's source.

A student's code runs in the kernel that runs the hidden tests, so a student cell could change
what the tests call: rebind a library function (`math.isclose = lambda *a, **k: True`), shadow a
builtin (`zip = ...` at the top of a cell) or reach the same through `setattr`, `exec` or
`builtins`. No check inside that kernel can be final, so OverwriteCells also reads every cell a
student could edit before the notebook runs, in the instructor's process (`tampering`), and where
one does any of that, each graded test cell fails first with a message that names the line.
"""

from __future__ import annotations

import ast
import builtins
import copy

from nbgrader import utils
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.preprocessors import OverwriteCells as _NbgraderOverwriteCells

FORBIDDEN_CALLS = frozenset({"setattr", "delattr", "exec", "eval", "compile", "__import__",
                             "globals", "vars"})
"""Calls that change or reach names indirectly; no exercise needs them."""
FORBIDDEN_MODULES = frozenset({"builtins", "ctypes", "gc", "importlib", "inspect"})
"""Modules that reach the interpreter's own objects; no exercise imports them."""
FORBIDDEN_NAMES = frozenset({"__builtins__", "modules"})
"""Names and attributes through which a library's functions can be swapped (and any other
double-underscore attribute but READABLE_DUNDERS: __dict__, __setattr__, __code__, ...)."""
READABLE_DUNDERS = frozenset({"__name__", "__doc__"})
_BUILTINS = frozenset(dir(builtins))


def _root(node):
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _unpacked(targets):
    """Assignment targets with tuples, lists and starred targets opened."""
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from _unpacked(target.elts)
        elif isinstance(target, ast.Starred):
            yield from _unpacked([target.value])
        else:
            yield target


def _bound(node, targets) -> list[str]:
    """The names a statement binds in the namespace it runs in."""
    bound = [t.id for t in _unpacked(targets) if isinstance(t, ast.Name)]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        bound.append(node.name)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        bound += [(a.asname or a.name).split(".")[0] for a in node.names]
    loops = [node.target] if isinstance(node, ast.For) else \
        [i.optional_vars for i in node.items if i.optional_vars] \
        if isinstance(node, ast.With) else []
    bound += [n.id for target in loops for n in ast.walk(target) if isinstance(n, ast.Name)]
    return bound


def tampering(source: str) -> list[str]:
    """What in a student's cell could change the hidden tests' own tools, one line each
    ("line 3: rebinds math.isclose"); [] for a cell that only defines and computes. Flags an
    attribute assigned or deleted on anything but a function's own objects (its arguments, and
    names it assigns from a computed value rather than as an alias of a name or attribute), a
    builtin's name bound at the top of the cell, the calls of FORBIDDEN_CALLS, imports of
    FORBIDDEN_MODULES, the names of FORBIDDEN_NAMES and double-underscore attributes
    (READABLE_DUNDERS aside). A cell that does not parse is left to the kernel to report."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []

    def flag(node, what):
        found.append(f"line {node.lineno}: {what}")

    top = {id(n) for n in ast.iter_child_nodes(tree)}
    local = set()  # a function's arguments and the values it computes: its own objects
    for func in (n for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
        local |= {t.id for n in ast.walk(func) if isinstance(n, ast.Assign)
                  and not isinstance(n.value, (ast.Name, ast.Attribute))  # not an alias
                  for t in n.targets if isinstance(t, ast.Name)}
        local |= {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in _unpacked(targets):
            root = _root(target)
            mine = isinstance(root, ast.Name) and root.id in local
            if isinstance(target, ast.Attribute) and not mine or \
                    isinstance(target, ast.Subscript) and isinstance(root, ast.Name) \
                    and root.id in _BUILTINS | {"sys", "builtins"}:
                flag(node, f"rebinds {ast.unparse(target)}")
        if id(node) in top:
            for name in _bound(node, targets):
                if name in _BUILTINS:
                    flag(node, f"shadows the builtin {name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in FORBIDDEN_CALLS:
            flag(node, f"calls {node.func.id}")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    flag(node, f"imports {alias.name}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] \
                in FORBIDDEN_MODULES:
            flag(node, f"imports from {node.module}")
        dunder = isinstance(node, ast.Attribute) and node.attr.startswith("__") \
            and node.attr.endswith("__") and node.attr not in READABLE_DUNDERS
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES or dunder \
                or isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_NAMES:
            flag(node, f"reaches {ast.unparse(node)}")
    return list(dict.fromkeys(found))


class OverwriteCells(_NbgraderOverwriteCells):
    """nbgrader's OverwriteCells, quiet for a locked cell submitted as it was released, and
    failing every graded test cell of a notebook whose student cells tamper (`tampering`)."""

    def preprocess(self, nb, resources):
        found = [f"{cell.metadata.get('nbgrader', {}).get('grade_id', f'cell {i}')}, {what}"
                 for i, cell in enumerate(nb.cells)
                 if cell.cell_type == "code" and not utils.is_locked(cell)
                 for what in tampering(cell.source)]
        nb, resources = super().preprocess(nb, resources)
        if found:
            message = ("no points: a student cell changes what the tests use ("
                       + "; ".join(found) + ")")
            for cell in nb.cells:
                if cell.cell_type == "code" and utils.is_grade(cell) and utils.is_locked(cell):
                    cell.source = f"raise AssertionError({message!r})\n{cell.source}"
        return nb, resources

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
