"""The process that runs a student's definitions for the grader (sera.teaching.sandbox).

This file is read as text and run with `python -I -c`, inside the sandbox where the sera package
is not importable; it imports nothing but the standard library and numpy. It first lowers its own
limits (SERA_SANDBOX_LIMITS: processes, file size, address space), then reads one JSON request
per line on standard input and answers on a copy of standard output taken before any student code
runs (standard output itself then goes to standard error, which the grader drops):

    {"op": "define", "code": "..."}            -> {"failed": [[function or null, kind], ...]}
    {"op": "call", "name": "f", "args": [...]}  -> {"ok": value} or an error
    {"op": "status"}                            -> {"ok": [uid, effective capabilities]}

A definition runs its code's top-level statements one at a time, each within STATEMENT_SECONDS,
as the kernel ran the cells: a statement that raises is listed (with the function it defines,
if it is a def) and the next one runs. An error is {"error": kind, "message": ..., "raised":
true} for an exception of student code (kind: its type's name), else {"error": "Missing" |
"unencodable"}. Values are plain JSON; an
array travels as {"array": nested lists, "dtype": kind letter}.
"""

import ast
import json
import os
import resource
import signal
import sys
import warnings

STATEMENT_SECONDS = 5

_limits = os.environ.pop("SERA_SANDBOX_LIMITS", "")
for _name, _value in zip(("RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_AS"),
                         _limits.split(",") if _limits else ["", "", ""], strict=True):
    if _value:
        resource.setrlimit(getattr(resource, _name), (int(_value), int(_value)))
_answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
warnings.simplefilter("ignore")  # a warning is the student's business, never a lost point

import numpy as np  # noqa: E402 - after the streams are set


class _Unencodable(Exception):
    """The function returned something that is not a number, an array or a list of them."""


def _decode(value):
    if isinstance(value, dict):
        return np.array(value["array"], dtype={"f": float, "i": int, "b": bool}[value["dtype"]])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _encode(value):
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiub":
            raise _Unencodable
        if value.dtype.kind == "f":
            value = value.astype(float)  # np.longdouble too
        kind = "i" if value.dtype.kind == "u" else value.dtype.kind
        return {"array": value.tolist(), "dtype": kind}
    if isinstance(value, np.floating):
        return float(value)  # np.longdouble too, rounded to the nearest float
    if isinstance(value, (np.bool_, np.integer)):
        return value.item()
    if isinstance(value, np.generic):
        raise _Unencodable  # complex numbers, strings, dates
    if isinstance(value, (bool, int, float)) or value is None:
        return value  # json writes a subclass as its base type's number
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    raise _Unencodable


def _late(signum, frame):
    raise TimeoutError(f"a statement ran past {STATEMENT_SECONDS} s")


def _define(code: str) -> list:
    """Run code's top-level statements one at a time; [function or None, error kind] for each
    that raised."""
    failed = []
    signal.signal(signal.SIGALRM, _late)
    for statement in ast.parse(code).body:
        name = statement.name if isinstance(statement, (ast.FunctionDef,
                                                        ast.AsyncFunctionDef)) else None
        try:
            signal.setitimer(signal.ITIMER_REAL, STATEMENT_SECONDS)
            exec(compile(ast.Module([statement], []), "<submission>", "exec"),  # noqa: S102
                 _namespace)
        except BaseException as exc:  # noqa: BLE001 - the student's statement, not ours
            failed.append([name, str(type(exc).__name__)[:60]])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return failed


def _capabilities() -> int:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("CapEff:"))
    return int(line.split()[1], 16)


def _answer(message):
    _answers.write(json.dumps(message) + "\n")
    _answers.flush()


_namespace = {"__name__": "submission"}
for _line in sys.stdin:
    _request = json.loads(_line)
    try:
        if _request["op"] == "status":
            _answer({"ok": [os.getuid(), _capabilities()]})
        elif _request["op"] == "define":
            _answer({"failed": _define(_request["code"])})
        else:
            _function = _namespace.get(_request["name"])
            if not callable(_function):
                _answer({"error": "Missing", "message": f"no function {_request['name']}"})
                continue
            _value = _function(*_decode(_request["args"]))
            try:
                _encoded = _encode(_value)
            except (_Unencodable, RecursionError):
                _answer({"error": "unencodable"})
                continue
            _answer({"ok": _encoded})
    except BaseException as _exc:  # noqa: BLE001 - every error of student code is an answer
        try:
            _message = str(_exc)[:300]
        except BaseException:  # noqa: BLE001 - a __str__ of the student's that raises
            _message = ""
        _answer({"error": str(type(_exc).__name__)[:60], "message": _message, "raised": True})
