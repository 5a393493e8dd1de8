"""The values that cross between the grader (sera.teaching.sandbox) and the process that runs a
student's definitions (sera.teaching._worker), and the errors that process answers of its own.

One file for both sides, so that what one side writes is what the other reads. The grader
imports it. The worker cannot (the sera package is not importable in the sandbox): the grader
passes this file's text as the worker's one argument, and the worker runs it as a module of its
own once its limits and streams are set. It therefore imports nothing but numpy.

A plain value is None, a bool, an int, a float, a list of plain values, or an array of floats,
ints or bools, which travels as {"array": nested lists, "dtype": its kind letter}; the grader's
arguments may hold strings too (a path, a name), a function's answer never. Each side encodes
what it sends (`encode`, which refuses anything else) and decodes what it reads (`decode`, which
takes a plain value and nothing else: the worker's answers are not trusted).
"""

import numpy as np

DTYPES = {"f": float, "i": int, "b": bool}
"""The kind letter an array travels with, and the type it is rebuilt with on the other side."""

WORKER_ERRORS = {"Missing": "no function {name}", "unencodable": ""}
"""The errors the worker answers of its own, by kind, with their message ({name}: the function
asked for). Any other error is an exception of student code, answered with raised: true."""


class Unencodable(Exception):
    """A value that is not a plain one: not a number, an array of numbers or a list of them."""


def encode(value, text: bool = False):
    """value as plain JSON, strings too where `text` (the grader's arguments); Unencodable for
    anything else."""
    if text and isinstance(value, str):
        return str(value)  # np.str_ too
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiub":
            raise Unencodable
        if value.dtype.kind == "f":
            value = value.astype(float)  # np.longdouble too
        kind = "i" if value.dtype.kind == "u" else value.dtype.kind
        return {"array": value.tolist(), "dtype": kind}
    if isinstance(value, np.floating):
        return float(value)  # np.longdouble too, rounded to the nearest float
    if isinstance(value, (np.bool_, np.integer)):
        return value.item()
    if isinstance(value, np.generic):
        raise Unencodable  # complex numbers, strings, dates
    if isinstance(value, (bool, int, float)) or value is None:
        return value  # json writes a subclass as its base type's number
    if isinstance(value, (list, tuple)):
        return [encode(v, text) for v in value]
    raise Unencodable


def decode(value, text: bool = False):
    """The plain value that `encode` wrote as value (read back by json), strings too where
    `text` (the grader's arguments); ValueError for anything else."""
    if isinstance(value, dict) and set(value) == {"array", "dtype"} \
            and isinstance(value["dtype"], str) and value["dtype"] in DTYPES:
        return np.array(value["array"], dtype=DTYPES[value["dtype"]])
    if isinstance(value, list):
        return [decode(v, text) for v in value]
    if isinstance(value, (bool, int, float)) or value is None or text and isinstance(value, str):
        return value
    raise ValueError("not a plain value")
