"""What every course check shares: the Feedback it returns, the Hint a check gives for a
mistake, and the report that runs a student's function and prints the outcome once.

The checks teach; they do not grade. Grades come from the hidden test regions of the exercise
notebooks, which compute their own expectations at grading time and never call this package:
nothing patched here changes a grade. No message shows an expected value or a formula."""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Feedback:
    """The outcome of a check: done (the stub was filled in), passed, and the message shown."""

    done: bool
    passed: bool
    message: str
    named: bool = False
    """True when the message names a typical mistake (not only "your values differ")."""

    def _ipython_display_(self) -> None:
        """Nothing: the check printed its message already, and a check ending a cell would
        otherwise show it twice."""

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Hint:
    """What is wrong, and whether it names a typical mistake (False for an answer the check can
    only call different or malformed)."""

    wrong: str
    named: bool = True


def _from_sera(value) -> bool:
    """True for the sera package, one of its modules, or anything defined in one."""
    if isinstance(value, types.ModuleType):
        return value.__name__.split(".")[0] == "sera"
    return (getattr(value, "__module__", None) or "").split(".")[0] == "sera"


def _calls_sera(fn) -> bool:
    """True when fn is sera's own function or its code reads a global that is sera or comes from
    it, under any name (kappa = sera.kappa, lambda p, n: sera.kappa(p, n), or
    `from sera.fidelity import kappa as K` and a function that calls K)."""
    if _from_sera(fn):
        return True
    code = getattr(fn, "__code__", None)
    namespace = getattr(fn, "__globals__", {})
    stack = [code] if code is not None else []
    while stack:
        code = stack.pop()
        if "sera" in code.co_names or any(_from_sera(namespace.get(name))
                                          for name in code.co_names):
            return True
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return False


def _report(name: str, fn, run) -> Feedback:
    """Call run(fn) -> None (passed) or a Hint; a stub or an error becomes a message."""
    if _calls_sera(fn):
        feedback = Feedback(True, False, f"{name}: not yet. Your function calls sera's own "
                                         f"code; write it with numpy and math only.")
        print("---- " + feedback.message)
        return feedback
    try:
        hint = run(fn)
    except NotImplementedError:
        feedback = Feedback(False, False, f"{name}: not done yet (fill in the stub, then run "
                                          f"this cell again).")
    except Exception as exc:  # noqa: BLE001 - any error in student code becomes a message
        feedback = Feedback(True, False, f"{name}: your function raised {type(exc).__name__}: "
                                         f"{exc}. Check it on one small case by hand.")
    else:
        if isinstance(hint, Hint):
            feedback = Feedback(True, False, f"{name}: not yet. {hint.wrong}", hint.named)
        else:
            feedback = Feedback(True, True, f"{name}: correct." + (f" {hint}" if hint else ""))
    print(("PASS " if feedback.passed else "---- ") + feedback.message)
    return feedback


def _close(a, b, rtol=1e-6, atol=1e-9) -> bool:
    """Equal to about six digits: an answer right to rounding (or to a 1e-8 guard) passes."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))

