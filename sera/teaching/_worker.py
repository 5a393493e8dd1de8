"""The process that runs a student's definitions for the grader (sera.teaching.sandbox).

This file is read as text and run with `python -I -c`, inside the sandbox where the sera package
is not importable; it imports nothing but the standard library and numpy. It reads one JSON
request per line on standard input and answers on a copy of standard output taken before any
student code runs (standard output itself then goes to standard error, which the grader drops):

    {"op": "define", "code": "..."}            -> {"ok": null} or {"error": ..., "message": ...}
    {"op": "call", "name": "f", "args": [...]}  -> {"ok": value} or {"error": ..., "message": ...}

Values are plain JSON; an array travels as {"array": nested lists, "dtype": kind letter}.
"""

import json
import os
import sys
import warnings

_answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
warnings.simplefilter("ignore")  # a warning is the student's business, never a lost point

import numpy as np  # noqa: E402 - after the streams are set


def _decode(value):
    if isinstance(value, dict):
        return np.array(value["array"], dtype={"f": float, "i": int, "b": bool}[value["dtype"]])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _encode(value):
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiub":
            raise TypeError(f"an array of {value.dtype}, not of numbers")
        kind = "i" if value.dtype.kind == "u" else value.dtype.kind
        return {"array": value.tolist(), "dtype": kind}
    if isinstance(value, np.generic):
        return _encode(value.item())
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    raise TypeError(f"a {type(value).__name__}, not a number or an array")


def _answer(message):
    _answers.write(json.dumps(message) + "\n")
    _answers.flush()


_namespace = {"__name__": "submission"}
for _line in sys.stdin:
    _request = json.loads(_line)
    try:
        if _request["op"] == "define":
            exec(compile(_request["code"], "<submission>", "exec"), _namespace)  # noqa: S102
            _answer({"ok": None})
        else:
            _function = _namespace.get(_request["name"])
            if not callable(_function):
                _answer({"error": "Missing", "message": f"no function {_request['name']}"})
                continue
            _answer({"ok": _encode(_function(*_decode(_request["args"])))})
    except BaseException as _exc:  # noqa: BLE001 - every error of student code is an answer
        _answer({"error": type(_exc).__name__, "message": str(_exc)[:300]})
