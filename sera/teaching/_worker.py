"""The process that runs a student's definitions for the grader (sera.teaching.sandbox).

This file is read as text and run with `python -I -c`, inside the sandbox where the sera package
is not importable; it imports nothing but the standard library and numpy. Its one argument is the
text of sera/teaching/_wire.py, the value codec the grader uses too. It first lowers its own
limits (SERA_SANDBOX_LIMITS: processes, file size, address space), then reads one JSON request
per line on standard input and answers on a copy of standard output taken before any student code
runs (standard output itself then goes to standard error, which the grader drops):

    {"op": "define", "code": "..."}            -> {"failed": [[function or null, kind], ...]}
    {"op": "call", "name": "f", "args": [...]}  -> {"ok": value} or an error
    {"op": "status"}                            -> {"ok": [uid, effective capabilities]}

A definition runs its code's top-level statements one at a time, each within STATEMENT_SECONDS,
as the kernel ran the cells: a statement that raises is listed (with the function it defines,
if it is a def) and the next one runs. An error is {"error": kind, "message": ..., "raised":
true} for an exception of student code (kind: its type's name), else one of the worker's own
(_wire.WORKER_ERRORS: "Missing", "unencodable"). Values are plain ones, as _wire encodes them.
"""

import ast
import json
import os
import resource
import signal
import sys
import types
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

# The codec imports numpy: after the streams are set, as a module of its own (the sera package,
# where the grader imports it from, is not importable here)
_wire = types.ModuleType("_wire")
exec(compile(sys.argv[1], "_wire.py", "exec"), _wire.__dict__)  # noqa: S102 - the grader's file


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
                _answer({"error": "Missing",
                         "message": _wire.WORKER_ERRORS["Missing"].format(name=_request["name"])})
                continue
            _value = _function(*_wire.decode(_request["args"], text=True))
            try:
                _encoded = _wire.encode(_value)
            except (_wire.Unencodable, RecursionError):
                _answer({"error": "unencodable"})
                continue
            _answer({"ok": _encoded})
    except BaseException as _exc:  # noqa: BLE001 - every error of student code is an answer
        try:
            _message = str(_exc)[:300]
        except BaseException:  # noqa: BLE001 - a __str__ of the student's that raises
            _message = ""
        _answer({"error": str(type(_exc).__name__)[:60], "message": _message, "raised": True})
