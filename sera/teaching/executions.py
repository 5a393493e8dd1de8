"""What `make figures` executed, recorded so that `make test` checks those executions instead of
running the same notebooks on the same sources a second time.

After each notebook runs to the end, the runner writes `<output>/<stem>.run.json`: the
fingerprint of everything the run depended on, the profile, whether the run trained every model
it read (no finished run lay in build/runs when the invocation started), the SHA-256 of the
executed copy and of each figure it wrote, and its wall time. `reusable` hands a test that
execution only when all of these hold now; anything else (another profile, an edited module,
notebook or stored table, another library version, runs read back from an earlier invocation, a
figure or executed copy changed since) makes the test execute the notebook itself.

The fingerprint covers the checkout's tracked and untracked-but-not-ignored files under sera/,
notebooks/ and data/ and pyproject.toml (paths and contents), the Python version and the name
and version of every installed distribution. Outside a git checkout (an installed wheel) there
is no fingerprint and nothing is reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sera import runstore

SOURCES = ("sera", "notebooks", "data", "pyproject.toml")
RERUN_VARIABLE = "SERA_RERUN_NOTEBOOKS"
"""Set to 1 to make the tests execute every notebook themselves."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _environment() -> list[str]:
    from importlib.metadata import distributions

    names = {f"{d.metadata['Name']}=={d.version}" for d in distributions()}
    return [platform.python_version(), *sorted(names)]


def fingerprint(root: Path | None = None) -> str | None:
    """SHA-256 of the sources a notebook run depends on and of the environment it ran in, or
    None outside a git checkout."""
    root = Path(root or runstore.ROOT)
    try:
        listed = subprocess.run(["git", "ls-files", "-c", "-o", "--exclude-standard", "-z",
                                 "--", *SOURCES], cwd=root, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    digest = hashlib.sha256()
    for name in sorted(set(filter(None, listed.stdout.decode().split("\0")))):
        path = root / name
        if path.is_file() and not path.is_symlink():
            digest.update(name.encode() + b"\0" + _sha256(path).encode() + b"\0")
    for line in _environment():
        digest.update(line.encode() + b"\0")
    return digest.hexdigest()


def trained_nothing_yet(runs_root: Path | None = None) -> bool:
    """Whether no finished run lies under runs_root (build/runs): every run a notebook then
    reads is trained by that invocation."""
    runs_root = Path(runs_root or runstore.RUNS_ROOT)
    return not any(runs_root.rglob(runstore.FINAL)) if runs_root.exists() else True


def _record_file(output: Path, notebook: Path) -> Path:
    return Path(output) / f"{Path(notebook).stem}.run.json"


def record(notebook: Path, *, output: Path, figures: Path, names: list[str], profile: str,
           fresh: bool, seconds: float, source: str | None) -> Path:
    """Write the record of one finished execution (see the module's text) beside its copy."""
    executed = Path(output) / Path(notebook).name
    files = {f"{n}.{ext}": _sha256(Path(figures) / f"{n}.{ext}")
             for n in names for ext in ("png", "pdf")}
    entry = {"fingerprint": source, "profile": profile, "fresh": fresh,
             "seconds": round(seconds, 1), "executed": _sha256(executed),
             "figures_dir": str(Path(figures).resolve()), "figures": files}
    path = _record_file(output, notebook)
    runstore.write_json(path, entry)
    return path


@dataclass(frozen=True)
class Execution:
    """An execution a test may check in place of running the notebook: the executed copy and
    the folder of the figures it wrote."""

    notebook: Path
    figures: Path


def reusable(notebook: Path, profile: str, output: Path | None = None,
             source: str | None = None) -> Execution | None:
    """The recorded execution of `notebook` at `profile` in output (build/notebooks) when every
    condition of the module's text holds, else None. source: the current fingerprint (computed
    when not given)."""
    if os.environ.get(RERUN_VARIABLE, "") not in ("", "0"):
        return None
    output = Path(output or runstore.ROOT / "build" / "notebooks")
    path = _record_file(output, notebook)
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text())
        executed = output / Path(notebook).name
        figures = Path(entry["figures_dir"])
        current = source or fingerprint()
        intact = executed.exists() and _sha256(executed) == entry["executed"] and all(
            (figures / name).exists() and _sha256(figures / name) == digest
            for name, digest in entry["figures"].items())
        valid = (current is not None and entry["fingerprint"] == current
                 and entry["profile"] == profile and entry["fresh"] is True and intact)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Execution(executed, figures) if valid else None
