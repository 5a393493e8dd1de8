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
and version of every distribution installed in the environment's site-packages. Outside a git
checkout (an installed wheel) there is no fingerprint and nothing is reused.
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
    """The Python version and the distributions installed in this environment's own
    site-packages: not whatever else sys.path holds at the moment (an imported setuptools puts
    the copies of the packages it vendors there, which made a test process's list differ from
    the runner's and every notebook run again)."""
    import sysconfig
    from importlib.metadata import distributions

    folders = sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})
    names = {f"{d.metadata['Name']}=={d.version}" for d in distributions(path=folders)}
    return [platform.python_version(), *sorted(names)]


def manifest(root: Path | None = None) -> dict | None:
    """What a notebook run depends on: {"files": {path: SHA-256} of the sources, "environment":
    the Python version and every installed distribution}, or None outside a git checkout."""
    root = Path(root or runstore.ROOT)
    try:
        listed = subprocess.run(["git", "ls-files", "-c", "-o", "--exclude-standard", "-z",
                                 "--", *SOURCES], cwd=root, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    files = {}
    for name in sorted(set(filter(None, listed.stdout.decode().split("\0")))):
        path = root / name
        if path.is_file() and not path.is_symlink():
            files[name] = _sha256(path)
    return {"files": files, "environment": _environment()}


def digest(listing: dict | None) -> str | None:
    """The fingerprint of a manifest (None for none)."""
    if listing is None:
        return None
    hashed = hashlib.sha256()
    for name, sha in listing["files"].items():
        hashed.update(name.encode() + b"\0" + sha.encode() + b"\0")
    for line in listing["environment"]:
        hashed.update(line.encode() + b"\0")
    return hashed.hexdigest()


def fingerprint(root: Path | None = None) -> str | None:
    """SHA-256 of the sources a notebook run depends on and of the environment it ran in, or
    None outside a git checkout."""
    return digest(manifest(root))


def trained_nothing_yet(runs_root: Path | None = None) -> bool:
    """Whether no finished run lies under runs_root (build/runs): every run a notebook then
    reads is trained by that invocation."""
    runs_root = Path(runs_root or runstore.RUNS_ROOT)
    return not any(runs_root.rglob(runstore.FINAL)) if runs_root.exists() else True


def _record_file(output: Path, notebook: Path) -> Path:
    return Path(output) / f"{Path(notebook).stem}.run.json"


def record(notebook: Path, *, output: Path, figures: Path, names: list[str], profile: str,
           fresh: bool, seconds: float, source: str | None, listing: dict | None = None) -> Path:
    """Write the record of one finished execution (see the module's text) beside its copy;
    listing: the manifest whose digest source is, kept so that `why_not` can name what
    changed."""
    executed = Path(output) / Path(notebook).name
    files = {f"{n}.{ext}": _sha256(Path(figures) / f"{n}.{ext}")
             for n in names for ext in ("png", "pdf")}
    entry = {"fingerprint": source, "profile": profile, "fresh": fresh,
             "seconds": round(seconds, 1), "executed": _sha256(executed),
             "figures_dir": str(Path(figures).resolve()), "figures": files,
             "manifest": listing}
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


def why_not(notebook: Path, profile: str, output: Path | None = None) -> str:
    """Why `reusable` hands no execution of `notebook` at `profile`: the first condition that
    fails, and for changed sources or environment what changed (a test prints it when it runs
    the notebook itself)."""
    if os.environ.get(RERUN_VARIABLE, "") not in ("", "0"):
        return f"{RERUN_VARIABLE} is set"
    output = Path(output or runstore.ROOT / "build" / "notebooks")
    path = _record_file(output, notebook)
    if not path.exists():
        return f"no record {path}"
    try:
        entry = json.loads(path.read_text())
    except ValueError:
        return f"{path} is not JSON"
    if entry.get("profile") != profile:
        return f"recorded at profile {entry.get('profile')!r}, not {profile!r}"
    if entry.get("fresh") is not True:
        return "the recorded run read back runs an earlier invocation trained"
    now = manifest()
    if now is None:
        return "not a git checkout"
    if entry.get("fingerprint") != digest(now):
        before = entry.get("manifest")
        if not before:
            return "the sources or the environment changed (the record keeps no manifest)"
        files = sorted({n for n in set(before["files"]) | set(now["files"])
                        if before["files"].get(n) != now["files"].get(n)})
        gone = sorted(set(before["environment"]) - set(now["environment"]))
        new = sorted(set(now["environment"]) - set(before["environment"]))
        return (f"changed since the record: files {files[:6]}, environment -{gone[:6]} "
                f"+{new[:6]}")
    executed = output / Path(notebook).name
    if not executed.exists() or _sha256(executed) != entry.get("executed"):
        return f"the executed copy {executed} changed or is missing"
    figures = Path(entry.get("figures_dir", ""))
    changed = [name for name, sha in entry.get("figures", {}).items()
               if not (figures / name).exists() or _sha256(figures / name) != sha]
    return f"figures changed since the record: {changed[:6]}" if changed else "reusable"
