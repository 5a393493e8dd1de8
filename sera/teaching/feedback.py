"""What every course check shares: the Feedback it returns, the Hint a check gives for a
mistake, and the report that runs a student's function and prints the outcome once.

The checks teach; they do not grade. Grades come from the hidden test regions of the exercise
notebooks, which compute their own expectations at grading time and never call this package:
nothing patched here changes a grade. No message shows an expected value or a formula."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sera.teaching import import_rule


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


_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep


class _Watched:
    """fn, recording whether a call of it ran code of this package (under any name: an alias, an
    import inside the function, importlib, a closure, functools.partial, np.vectorize)."""

    def __init__(self, fn):
        self.fn, self.ran_sera = fn, False

    def _watch(self, frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(_PACKAGE):
            self.ran_sera = True

    def __call__(self, *args):
        outer = sys.getprofile()
        sys.setprofile(self._watch)
        try:
            return self.fn(*args)
        finally:
            sys.setprofile(outer)


FRESH_CASES = 4
"""How many new random cases a check draws after its own cases pass."""
_FRESH = np.random.default_rng()


def _report(name: str, fn, run, fresh=None) -> Feedback:
    """Call run(fn) -> None (passed) or a Hint; a stub or an error becomes a message, and so does
    a function that runs this package's own code. `fresh(fn, rng)` -> bool, if given, tries fn
    on new random cases once run passes, so that a function that looks its answers up in a
    table of the check's own cases is not told it is right."""
    why = import_rule.refusal(fn)
    if why is not None:  # what the grader says of it, from the same rule
        feedback = Feedback(True, False, f"{name}: not yet. Your function {why}, but these "
                                         f"exercises are numpy and math only: it gets no points "
                                         f"at grading.")
        print("---- " + feedback.message)
        return feedback
    watched = _Watched(fn)
    try:
        hint = run(watched)
        if not isinstance(hint, Hint) and fresh is not None and not fresh(watched, _FRESH):
            hint = Hint("Right on the check's own cases but off on new random ones: does your "
                        "function compute its answer for any input?", named=False)
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
    if watched.ran_sera:
        feedback = Feedback(True, False, f"{name}: not yet. Your function runs sera's own code; "
                                         f"write it with numpy and math only.")
    print(("PASS " if feedback.passed else "---- ") + feedback.message)
    return feedback


def _close(a, b, rtol=1e-6, atol=1e-9) -> bool:
    """Equal to about six digits: an answer right to rounding (or to a 1e-8 guard) passes."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))

