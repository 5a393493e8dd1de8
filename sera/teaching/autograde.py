"""nbgrader's autograde with the student's code on the far side of a process boundary.

Stock nbgrader runs a submission top to bottom in one kernel, hidden tests included, with the
instructor's rights: a student cell can then reach the tests' tools, their expected values, the
course's source notebooks and the gradebook. The course's nbgrader_config.py (written by `make
course`, `config_lines`) swaps two of autograde's steps:

- `SandboxedExecute` replaces nbgrader's Execute. It reads the submission as data and sends the
  student's cells as the kernel read them (`definitions`: every top-level statement but calls of
  the kernel and imports outside ALLOWED_MODULES, run one at a time) to a fresh interpreter in a
  sandbox (sera.teaching.sandbox: bubblewrap, no network, no course
  folder, no sera package). Each graded cell's hidden region then runs here, in the grader,
  calling the student's functions through stand-ins that carry plain values across. Nothing a
  student cell does at run time reaches the comparison or the expected values, a warning the
  student's code prints costs nothing, and the graded cell's output is one line: a pass, or the
  hidden test's own message (the kind of case that failed and the likely mistake). The hidden
  region is then taken out of the graded notebook, so the feedback nbgrader writes from it
  never shows the cases or the reference.
- `OverwriteCells` is nbgrader's, quiet for a locked cell submitted as it was released (nbgrader
  keeps each locked cell's source *with* its hidden tests, so at autograde every untouched check
  cell looked edited, nbgrader issue 1961).

Without bubblewrap, grading stops with a message, unless the instructor sets
`c.SandboxedExecute.sandbox = "none"` (a separate process still, but one that can read and
write what the instructor can).
"""

from __future__ import annotations

import ast
import builtins
import copy
import math
import symtable
from pathlib import Path

import numpy as np
from nbformat.v4 import new_output
from nbgrader import utils
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from nbgrader.preprocessors import OverwriteCells as _NbgraderOverwriteCells
from traitlets import Enum, Float

from sera.teaching.import_rule import ALLOWED_MODULES
from sera.teaching.notebook_files import HIDDEN
from sera.teaching.sandbox import MODES, NOTEBOOK_SECONDS, Sandbox, StudentError

PASSED = "All hidden cases pass."
GRADED_PREFIX = "check-"
"""A graded cell's grade_id is this prefix and the name of the one function it grades."""
EXCEPTIONS = frozenset(name for name, value in vars(builtins).items()
                       if isinstance(value, type) and issubclass(value, BaseException))
"""The exception types a message may name: Python's own, never a name the submission made up
(a class named after a hidden input would carry it out)."""
_TAKEN_OUT = "# (the hidden tests ran in the grader and are not part of the feedback)\n"


def _module(node) -> list[str]:
    """The top-level modules an import statement reads from."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    return ["." if node.level else (node.module or "").split(".")[0]]


def _names(node) -> list[str]:
    return [(a.asname or a.name).split(".")[0] for a in node.names]


def definitions(sources: list[str]) -> tuple[str, dict[str, str]]:
    """What of a student's cells the grader's sandbox runs, and which functions cannot be graded.

    Each cell is read as the kernel reads it (IPython's input transformers turn its magics into
    calls of get_ipython; a %%time or %%capture cell runs its body), and every top-level
    statement of it is kept, in order (the worker runs them one at a time, so that one that
    fails costs only itself), except those that call get_ipython (magics, shell escapes, hooks
    of the kernel's: there is no kernel at grading) and imports from modules outside
    ALLOWED_MODULES. Returns the code and, for each function that imports from such a module or
    reads a global name bound by such an import (its own locals and parameters aside), why
    ("imports scipy"). A cell that does not parse is left out, as the kernel could not run it."""
    kept, dropped, refused = [], {}, {}
    for source in sources:
        for statement in _statements(_as_the_kernel_reads(source)):
            # one import statement may name modules on both sides of the allow-list
            split = [ast.Import(names=[alias]) for alias in statement.names] \
                if isinstance(statement, ast.Import) else [statement]
            for node in split:
                _define(node, kept, dropped, refused)
    return ast.unparse(ast.Module(body=kept, type_ignores=[])), refused


UNWRAPPED_MAGICS = ("time", "capture")
"""Cell magics whose body the kernel runs once in the notebook's namespace."""


def _as_the_kernel_reads(source: str) -> str:
    """The cell after IPython's input transformers (the cell as is where IPython is missing)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)


def _statements(source: str) -> list:
    """The cell's top-level statements, a %%time or %%capture cell's body in its place."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    if len(body) == 1 and isinstance(body[0], ast.Expr) and _cell_magic(body[0].value):
        return _statements(_as_the_kernel_reads(body[0].value.args[2].value))
    return body


def _cell_magic(call) -> bool:
    """Whether call is get_ipython().run_cell_magic('time' or 'capture', line, body)."""
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_cell_magic" and len(call.args) == 3
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
            and call.args[0].value in UNWRAPPED_MAGICS)


def _calls_the_kernel(node) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "get_ipython" for n in ast.walk(node))


def _define(node, kept: list, dropped: dict, refused: dict) -> None:
    """definitions' step for one top-level statement."""
    if _calls_the_kernel(node):
        return
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        outside = [m for m in _module(node) if m not in ALLOWED_MODULES]
        if outside:
            dropped.update({name: outside[0] for name in _names(node)})
            return
        kept.append(node)
        for name in _names(node):
            dropped.pop(name, None)
        return
    kept.append(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        why = [f"imports {m}" for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))
               for m in _module(n) if m not in ALLOWED_MODULES]
        why += [f"uses {name}, imported from {dropped[name]}" for name in _globals_read(node)
                if name in dropped]
        if why:
            refused[node.name] = _reason("import", why[0])
        else:
            refused.pop(node.name, None)
        dropped.pop(node.name, None)
    else:  # a name bound again at the top level is the notebook's own from here on
        for target in ast.walk(node):
            if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                dropped.pop(target.id, None)


def _globals_read(function) -> list[str]:
    """The global names a function (and the functions and comprehensions inside it) reads: its
    parameters and local names are its own (a `comb = math.comb` inside it is not the notebook's
    `comb`)."""
    table = symtable.symtable(ast.unparse(function), "<submission>", "exec")
    names, scopes = [], list(table.get_children())
    while scopes:
        scope = scopes.pop()
        names += [s.get_name() for s in scope.get_symbols()
                  if s.is_referenced() and s.is_global()]
        scopes += scope.get_children()
    return sorted(set(names))


def run_cells(box: Sandbox, code: str, refused: dict[str, str]) -> str | None:
    """Run definitions' code in box; a function whose def raised joins `refused` with why.
    Returns None, or the message for every check when the cells stopped the process itself
    (it hung past the notebook's budget, or died)."""
    try:
        failed = box.define(code)
    except StudentError as exc:
        return (f"Your cells stopped the grader's process ({exc.kind}: {exc.message[:300]}): "
                f"run your notebook from the top to find it.")
    for name, kind in failed:
        if name:
            refused.setdefault(name, _reason("definition", kind))
    return None


REFUSALS = (
    ("definition", "could not be defined when your cells ran ({detail})", "{name} {reason}."),
    ("import", "{detail}", "{name} {reason}, but these exercises are numpy and math only."),
)
"""Why the grader does not call a student's function, kind by kind: the reason `refused` holds
for it ({detail}: the type of the exception its def raised, from `run_cells`; the import rule's
reason, "imports scipy", from `definitions`) and what the student reads ({name}: the function).
A reason is of the first kind whose wording it has; an import rule's, any text, comes last."""


def _reason(kind: str, detail: str) -> str:
    """The reason `refused` holds for a function of this kind of refusal."""
    return next(reason for k, reason, _ in REFUSALS if k == kind).format(detail=detail)


def _refusal(name: str, reason: str) -> str:
    """What the student reads of their function `name`, refused for `reason`."""
    says = next(says for _, wording, says in REFUSALS if _worded(reason, wording))
    return says.format(name=name, reason=reason)


def _worded(reason: str, wording: str) -> bool:
    """Whether reason is `wording` with some detail in its place."""
    before, _, after = wording.partition("{detail}")
    return len(reason) >= len(before) + len(after) and reason.startswith(before) \
        and reason.endswith(after)


def hidden_region(source: str) -> str | None:
    """The hidden tests of a graded cell's source, without their markers; None if it has none."""
    match = HIDDEN.search(source)
    return None if match is None else "\n".join(match.group(0).splitlines()[1:-1])


REPLIES = {
    "refused": "{message}",
    "timeout": "Your function took too long on a hidden case ({message}).",
    "budget": "Your notebook's time for grading was spent before this check ran (its functions "
              "are far slower than they need to be).",
    "Missing": "{message} in your notebook: define it with `def` in its cell (the grader runs "
               "only your definitions and imports).",
    "unencodable": "Your function returned something that is not a number, an array of numbers "
                   "or a list of them.",
    "ended": "Your function's process stopped answering: {message}.",
    "malformed": "Your function's process stopped answering: {message}.",
}
"""What the student reads for each kind of StudentError that is not an exception of their own
code (the sandbox's and the worker's kinds, and an import the rule refused); {message} is the
grader's own text, never the student's."""


def explain(exc: BaseException) -> str:
    """What a student reads when a graded cell gives no points: never a hidden case, an expected
    value or the reference."""
    if isinstance(exc, AssertionError):
        return str(exc) or "A hidden case failed."
    if isinstance(exc, StudentError) and exc.raised:
        return _raised(exc)
    if isinstance(exc, StudentError) and exc.kind in REPLIES:
        return REPLIES[exc.kind].format(message=exc.message)
    if isinstance(exc, NameError):
        return (f"{exc}: define it with `def` in its cell (the grader runs only your definitions "
                f"and imports).")
    return (f"The grader could not use your function's values ({type(exc).__name__}): check "
            f"that it returns what the exercise asks for, in its shape.")


def _raised(exc: StudentError) -> str:
    """The message for an exception of the student's code on a hidden case: its type if it is
    one of Python's, never its text (which could carry the case out)."""
    if exc.kind == "NotImplementedError":
        return "Not done yet: the function still raises NotImplementedError."
    if exc.kind in ("ModuleNotFoundError", "ImportError", "NameError") and "sera" in exc.message:
        return ("Your function uses the sera package, which is not there when grading: "
                "write it with numpy and math only.")
    kind = exc.kind if exc.kind in EXCEPTIONS else "an exception of its own"
    return f"Your function raised {kind} on a hidden case."


def graded_function(grade_id: str) -> str:
    """The function a graded cell grades, from its grade_id (`check-<function>`)."""
    if not grade_id.startswith(GRADED_PREFIX) or not grade_id[len(GRADED_PREFIX):].isidentifier():
        raise ValueError(f"graded cell {grade_id!r}: a graded cell's id must be "
                         f"{GRADED_PREFIX}<the function it grades>")
    return grade_id[len(GRADED_PREFIX):]


def grade_cell(hidden: str, box: Sandbox, functions: list[str],
               refused: dict[str, str]) -> str | None:
    """Run one graded cell's hidden tests in this process against `functions`, the student's
    functions it grades, in `box`; None when every case passes, else the message for the
    student. The hidden tests see those functions, numpy and math, and nothing else of the
    submission: a student's `sum` or `min` never stands in for Python's."""

    def stand_in(name):
        if name in refused:
            why = _refusal(name, refused[name])

            def call(*args):
                raise StudentError("refused", why)
            return call
        return box.function(name)

    namespace = {"__name__": "grader", "np": np, "math": math,
                 **{name: stand_in(name) for name in functions}}
    try:
        with np.errstate(all="ignore"):
            exec(compile(hidden, "<hidden tests>", "exec"), namespace)  # noqa: S102
    except Exception as exc:  # noqa: BLE001 - every failure becomes the student's message
        return explain(exc)
    return None


class SandboxedExecute(NbGraderPreprocessor):
    """Autograde's execution step with the student's code in a sandbox and the hidden tests in
    the grader (see the module's docstring)."""

    sandbox = Enum(list(MODES), default_value="bubblewrap",
                   help="'bubblewrap' (no network, no course folder, no sera package), or 'none' "
                        "(another process, with the grader's rights: only where student code "
                        "may run so)").tag(config=True)

    budget = Float(NOTEBOOK_SECONDS,
                   help="seconds all of one notebook's definitions and calls may take; once "
                        "spent, its later checks score 0").tag(config=True)

    def preprocess(self, nb, resources):
        student = [cell.source for cell in nb.cells
                   if cell.cell_type == "code" and not utils.is_locked(cell)]
        code, refused = definitions(student)
        graded = [cell for cell in nb.cells if cell.cell_type == "code"
                  and utils.is_grade(cell) and utils.is_locked(cell)]
        who = resources.get("nbgrader", {}).get("student", "?")
        self.log.info("Grading %s's %s in a sandbox: %s", who,
                      resources.get("nbgrader", {}).get("notebook", "notebook"), self.sandbox)
        with Sandbox(self.sandbox, hide=[Path.cwd()], budget=self.budget) as box:
            if self.sandbox == "bubblewrap" and not box.caps_processes:
                self.log.warning("The grader runs as root and cannot make a cgroup here: a "
                                 "submission's process count is not capped (its time, memory "
                                 "per process and files are)")
            broken = run_cells(box, code, refused)
            for cell in graded:
                hidden = hidden_region(cell.source)
                if hidden is None:
                    raise ValueError(f"graded cell {cell.metadata['nbgrader']['grade_id']} has "
                                     f"no hidden tests to grade it by")
                name = graded_function(cell.metadata["nbgrader"]["grade_id"])
                why = broken or grade_cell(hidden, box, [name], refused)
                cell.outputs = [new_output("stream", name="stdout", text=PASSED + "\n")
                                if why is None else
                                new_output("error", ename="Not yet", evalue=why,
                                           traceback=[why])]
                cell.source = HIDDEN.sub(_TAKEN_OUT, cell.source)
        return nb, resources


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
    """The lines of a course's nbgrader_config.py that swap OverwriteCells and SandboxedExecute
    in for nbgrader's own."""
    return ("from nbgrader.converters import Autograde\n"
            "from sera.teaching.autograde import OverwriteCells, SandboxedExecute\n"
            "_ours = {'OverwriteCells': OverwriteCells, 'Execute': SandboxedExecute}\n"
            + "".join(f"c.Autograde.{steps} = [_ours.get(p.__name__, p) for p in "
                      f"Autograde.class_traits()['{steps}'].default()]\n"
                      for steps in ("sanitize_preprocessors", "autograde_preprocessors"))
            + "# Student code runs in bubblewrap; 'none' runs it unfenced, with your rights:\n"
              "c.SandboxedExecute.sandbox = 'bubblewrap'\n")

