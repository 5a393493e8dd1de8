"""The exercises' import rule, one for the public checks and the grader: numpy and math only
(typing and __future__ for annotations).

The grader reads it from the cells' text (sera.teaching.autograde.definitions); a check in the
student's kernel reads it from the function itself (`refusal`): the modules its code imports and
the global names it reads, its own locals and parameters aside, each traced to the module that
made it. Both say "uses comb, imported from scipy" or "imports scipy" of the same function.
"""

from __future__ import annotations

import dis
import types

ALLOWED_MODULES = frozenset({"numpy", "math", "typing", "__future__"})
"""The modules the exercises may import from, in any form."""
NOTEBOOK_MODULES = ("__main__", "submission", "solutions")
"""Where a notebook's own functions live: the kernel's namespace, the grader's worker, and the
reference solutions' (sera.teaching.release.solutions)."""


def allowed(module: str | None) -> bool:
    """Whether a module (dotted or not) is one the exercises may use."""
    return module is not None and module.split(".")[0] in ALLOWED_MODULES


def refusal(fn) -> str | None:
    """Why the rule refuses the student's function fn ("imports scipy", "uses comb, imported
    from scipy"), or None. Functions the notebook defines are followed, each once."""
    own = {*NOTEBOOK_MODULES, getattr(fn, "__module__", None)}  # where fn itself was written
    seen: set = set()
    todo = [fn]
    while todo:
        function = todo.pop()
        code = getattr(function, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        for module in _imports(code):
            if not allowed(module):
                return f"imports {module.split('.')[0] or '.'}"
        namespace = dict(getattr(function, "__globals__", {}))
        cells = getattr(function, "__closure__", None) or ()
        enclosed = set()
        for name, cell in zip(code.co_freevars, cells, strict=True):  # an enclosing scope's
            try:
                namespace[name] = cell.cell_contents
                enclosed.add(name)
            except ValueError:  # not bound yet
                pass
        for name in [*_globals_read(code), *code.co_freevars]:
            if name not in namespace:
                continue
            value = namespace[name]
            home = value.__name__ if isinstance(value, types.ModuleType) else \
                getattr(value, "__module__", None)
            if isinstance(value, types.FunctionType) and home in own:
                todo.append(value)  # the notebook's own helper: its reads count too
            elif (isinstance(value, types.ModuleType) or callable(value)) and home is not None \
                    and home not in own and not allowed(home) \
                    and home != "builtins":
                return f"uses {name}, imported from {home.split('.')[0]}"
    return None


def _codes(code):
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _codes(constant)


def _imports(code) -> list[str]:
    return [i.argval for c in _codes(code) for i in dis.get_instructions(c)
            if i.opname == "IMPORT_NAME"]


def _globals_read(code) -> list[str]:
    return sorted({i.argval for c in _codes(code) for i in dis.get_instructions(c)
                   if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")})
