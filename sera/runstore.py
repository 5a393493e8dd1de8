"""The run store: the one owner of a run folder's format, of stored runs, and of their locks.

A run folder (a RunConfig's `out`) holds

    config.json        the configuration, rewritten at every start or resume
    provenance.jsonl   one record per start or resume (versions, machine, command, warm-up), and
                       a last record {"finished": true, "wall_s": ...} once the run is done
    checkpoint.pt      everything the loop needs to resume (written by sera.trainers.checkpoint)
    metrics.csv, allocations.csv, final.csv   the loop's tables (final.csv once finished)
    rollouts.csv       a sequence task's responses, one row each (sera.tables.ROLLOUT_COLUMNS)

A sequence task's runs start from one supervised warm-up: a folder `warmup/` (WARMUP) beside a
grid's run folders, holding the model and tokenizer, `warmup.json` (its settings, its training
rows and the weights' fingerprint) and `evaluations/step0-<key>.json`, the step-0 evaluations the
runs starting from it share; a finished run keeps its final model in `model/` (MODEL). A
confirmation point keeps a copy of its warm-up in its stored folder.

A stored set of runs (data/study/<point>/, a sweep's folder) holds the same tables of many runs,
gzip-compressed without a time stamp so that equal tables give equal bytes, and provenance.json:
a summary plus each run's configuration and provenance records, enough to write the run folders
back (`write_finished`) on a fresh checkout.

An index folder maps a run's settings (`settings_key`) to the folder it finished in (`index`,
`indexed`), so that a grid of other runs reads it back through a link (`link`) instead of
training it twice; sera.trainers.grid says which settings count.

Every file is written beside its destination and renamed over it (`atomic`), so a reader or a
crash never sees half a file; a run being trained is held by a lock (`claim`, through filelock),
so several processes can work through one list of runs, each training the runs nobody holds.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.resources
import json
import os
import tempfile
from pathlib import Path

import pandas as pd

from sera.tables import RUN_KEYS, TABLES

HOME_VARIABLE = "SERA_HOME"
SHIPPED = Path(str(importlib.resources.files("sera").joinpath("_data"))).resolve()
"""The data shipped with the package, found through importlib.resources: the paper's reference
numbers, the difficulty profiles and the stored studies (in a checkout, a link to its data/
folder; in a wheel, a copy). Read as files, so the package must be installed unzipped, as pip
installs it."""


def _checkout() -> Path | None:
    """The source checkout this package is imported from, or None (an installed wheel)."""
    root = Path(__file__).resolve().parents[1]
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "sera"' in project.read_text():
        return root
    return None


def _home() -> Path:
    """$SERA_HOME when set; else the checkout the package is imported from; else the current
    directory."""
    if os.environ.get(HOME_VARIABLE):
        return Path(os.environ[HOME_VARIABLE]).expanduser().resolve()
    return _checkout() or Path.cwd()


ROOT = _home()
"""The folder whose data/ and build/ the package reads and writes (see `_home`)."""
DATA_DIR = ROOT / "data" if (ROOT / "data").is_dir() else SHIPPED
"""The stored data: ROOT's data/ folder where there is one, else the copy shipped with the
package."""
STUDY_DIR = DATA_DIR / "study"
"""Where the studies' stored runs live (one folder per confirmation point or sweep)."""
RUNS_ROOT = ROOT / "build" / "runs"
"""Where the studies train by default (the run folders, not committed)."""
CONFIG = "config.json"
PROVENANCE = "provenance.jsonl"
CHECKPOINT = "checkpoint.pt"
SUMMARY = "provenance.json"
WARMUP = "warmup"
"""The warm-up's folder, beside a grid's run folders and in a stored point's folder."""
WARMUP_STAMP = "warmup.json"
"""The warm-up folder's record: its settings, training rows and weights' fingerprint."""
WARMUP_FINGERPRINT = "warmup"
"""The key of the warm-up's weights fingerprint in a run's provenance records and in a stored
summary: runs of one stored set start from one warm-up."""
MODEL = "model"
"""The folder of a model saved with its tokenizer: a finished run's final model."""


def warmup_dir(parent) -> Path:
    """The warm-up folder of a grid's or a point's folder."""
    return Path(parent) / WARMUP


def warmup_stamp(folder) -> Path:
    """The record of the warm-up in `folder` (a warm-up folder)."""
    return Path(folder) / WARMUP_STAMP


def has_warmup(folder) -> bool:
    """Whether `folder` (a warm-up folder) holds a finished warm-up."""
    return warmup_stamp(folder).exists()


def stored_warmup(point: str) -> Path:
    """The warm-up a stored point keeps beside its runs (its weights, tokenizer and
    warmup.json), or FileNotFoundError where it keeps none."""
    folder = warmup_dir(STUDY_DIR / point)
    if not has_warmup(folder):
        kept = sorted(p.parents[1].name for p in STUDY_DIR.glob(f"*/{WARMUP}/{WARMUP_STAMP}"))
        raise FileNotFoundError(f"the stored point {point!r} keeps no warm-up in {folder}; "
                                f"these do: {', '.join(kept) or 'none'}")
    return folder


def seed_warmup(folder, source) -> bool:
    """Copy the warm-up folder `source` to the warm-up folder `folder` where that holds no
    finished warm-up (a crash's leftovers are replaced), under folder's lock; whether it
    copied. Runs that start from `folder` then start from source's weights on any machine."""
    import shutil

    if not has_warmup(source):
        raise FileNotFoundError(f"no warm-up to copy in {source} (no {WARMUP_STAMP})")
    with claim(folder, wait=True):
        if has_warmup(folder):
            return False
        shutil.rmtree(folder, ignore_errors=True)
        copy_folder(source, folder)
        return True


def first_evaluation(folder, key: str) -> Path:
    """Where a warm-up folder keeps the step-0 evaluation whose settings hash to `key`."""
    return Path(folder) / "evaluations" / f"step0-{key}.json"


def table_file(name: str) -> str:
    """The file of a run folder's table `name` (metrics, final, allocations)."""
    return f"{name}.csv"


FINAL = table_file("final")
REGISTRATION = "point.toml"
"""A stored point's registration: its preset, changes, seeds, arms and expectations."""
PREDICTION = "prediction.csv"
"""A confirmation point's prediction, written once before its runs."""
PROFILE = "profile.csv"
"""A confirmation point's difficulty profile, the input of its prediction."""


def read_registration(path) -> dict:
    """A registration file (REGISTRATION, TOML) as written."""
    from sera import _toml

    return _toml.load(path)


def stored_file(name: str) -> str:
    """The file of the stored table `name` (metrics, final, allocations) in a point's folder."""
    return f"{name}.csv.gz"


@contextlib.contextmanager
def atomic(path):
    """`with atomic(path) as scratch:` write to scratch, a new file beside path; when the block
    ends without an error it replaces path in one rename, otherwise it is removed. The scratch
    file is flushed to disk before the rename and the folder after it, so that a power cut leaves
    the old file or the new one, never an empty one under the new name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    os.chmod(scratch, 0o666 & ~_umask())  # as an ordinary new file (mkstemp makes it private)
    try:
        yield Path(scratch)
        _fsync(scratch)
        os.replace(scratch, path)
        _fsync(path.parent)
    finally:
        Path(scratch).unlink(missing_ok=True)


def _fsync(path) -> None:
    """Flush a file's or a folder's data to disk (a folder: its entries, the rename)."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path, text: str) -> None:
    with atomic(path) as scratch:
        scratch.write_text(text)


def write_json(path, value, indent: int | None = 1) -> None:
    write_text(path, json.dumps(value, indent=indent) + "\n")


def write_csv(table: pd.DataFrame, path, **options) -> None:
    """table to path, never half written; where path ends in .gz, gzip-compressed with neither
    a time stamp nor a file name in its header, so that equal tables give equal bytes."""
    with atomic(path) as scratch:
        if str(path).endswith(".gz"):
            scratch.write_bytes(gzip.compress(table.to_csv(index=False, **options).encode(),
                                              mtime=0))
        else:
            table.to_csv(scratch, index=False, **options)


def copy_folder(source, target) -> None:
    """A copy of the folder source at target, which appears whole or not at all."""
    import shutil

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    os.chmod(scratch, 0o777 & ~_umask())
    try:
        shutil.copytree(source, scratch, dirs_exist_ok=True)
        os.replace(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------------- one run folder

def begin(folder, config: dict, record: dict) -> None:
    """A run starts or resumes in folder: its configuration, and one more provenance record."""
    folder = Path(folder)
    write_json(folder / CONFIG, config, indent=2)
    with (folder / PROVENANCE).open("a") as log:  # appended: a resume may be on another machine
        log.write(json.dumps(record) + "\n")


def finish(folder, final: pd.DataFrame, record: dict) -> None:
    """The run is done: its final table, then the record that says so (last, so a folder counts
    as finished only once everything is in it)."""
    folder = Path(folder)
    write_csv(final, folder / FINAL)
    with (folder / PROVENANCE).open("a") as log:
        log.write(json.dumps({**record, "finished": True}) + "\n")


def records(folder) -> list[dict]:
    """The provenance records of the run in folder, oldest first."""
    log = Path(folder) / PROVENANCE
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def finished(folder) -> bool:
    """Whether the run in folder finished (its final table and the finish record)."""
    folder = Path(folder)
    return (folder / FINAL).exists() and any(r.get("finished") for r in records(folder))


def read_table(folder, name: str) -> pd.DataFrame | None:
    path = Path(folder) / table_file(name)
    return pd.read_csv(path) if path.exists() else None


def write_finished(folder, tables: dict[str, pd.DataFrame], config: dict,
                   provenance: list[dict]) -> None:
    """Write a finished run folder back from stored tables, configuration and records."""
    folder = Path(folder)
    for name, table in tables.items():
        if len(table):
            write_csv(table, folder / table_file(name))
    write_json(folder / CONFIG, config, indent=2)
    # last: a folder counts as finished once its provenance says so
    write_text(folder / PROVENANCE, "".join(json.dumps(r) + "\n" for r in provenance))


@contextlib.contextmanager
def claim(folder, wait: bool = False):
    """`with claim(folder) as ours:` ours is True when this process holds the run in folder
    (through folder.lock, by filelock) and False when another process holds it; wait=True waits
    for it instead. The operating system frees the lock of a process that dies, so a crashed
    run is taken over."""
    from filelock import FileLock, Timeout

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder.with_name(folder.name + ".lock"))
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


# ---------------------------------------------------------------------- the settings index

def settings_key(settings: dict) -> str:
    """The index key of a run's settings (every setting that changes what it trains)."""
    import hashlib

    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def index(shared, key: str, folder) -> None:
    """Record in the index folder `shared` that the run of settings `key` lives in folder."""
    Path(shared).mkdir(parents=True, exist_ok=True)
    write_json(Path(shared) / f"{key}.json", {"out": str(Path(folder).resolve())}, indent=None)


def indexed(shared, key: str) -> Path | None:
    """The folder the index `shared` records for settings `key`, where that run finished and can
    be resumed from (its checkpoint is there); else None."""
    entry = Path(shared) / f"{key}.json"
    if not entry.exists():
        return None
    folder = Path(json.loads(entry.read_text())["out"])
    return folder if finished(folder) and (folder / CHECKPOINT).exists() else None


def hold_claim(shared, key: str, wait: bool = False):
    """`claim` on the settings `key` in the index `shared`: held while a run of those settings
    trains, whichever grid's folder it trains in."""
    return claim(Path(shared) / key, wait=wait)


def unlink_other(folder, target: Path | None) -> None:
    """Remove folder where it is a link that does not lead to target (a link to another grid's
    run of other settings is not this run's)."""
    folder = Path(folder)
    if folder.is_symlink() and (target is None or folder.resolve() != target.resolve()):
        folder.unlink()


def link(folder, target) -> None:
    """Make folder (where nothing is yet) a link to another grid's finished run folder, so that
    this grid's run label leads there too."""
    folder = Path(folder)
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.symlink_to(Path(target).resolve(), target_is_directory=True)


# ---------------------------------------------------------------------- stored runs

def store_runs(folders, out, summary: dict, tables=TABLES, metrics=None,
               columns: dict | None = None) -> int:
    """Write the runs' tables to out/<table>.csv.gz and out/provenance.json: `summary`, plus each
    run's configuration, provenance records and wall time; returns how many runs. metrics: keep
    only these metric names; columns: folder -> extra columns for its rows (e.g. an arm)."""
    folders = [Path(f) for f in folders]
    if not folders:
        return 0
    out = Path(out)
    if _checkout() is None and out.resolve().is_relative_to(SHIPPED):
        raise ValueError(f"{out} is inside the installed package's shipped data; set "
                         f"{HOME_VARIABLE} to a folder with a data/study/ of its own to store runs")
    for name in tables:
        parts = []
        for folder in folders:
            table = read_table(folder, name)
            if table is None:
                continue
            if name == "metrics" and metrics is not None:
                table = table[table["metric"].isin(metrics)]
            table = _with_run_keys(table, folder)
            parts.append(table.assign(**(columns or {}).get(folder, {})))
        if not parts:
            continue
        write_csv(pd.concat(parts, ignore_index=True), out / stored_file(name),
                  float_format="%.6g")
    runs = []
    for folder in folders:
        kept = records(folder)
        runs.append({"run": "/".join(folder.parts[-2:]),
                     "config": json.loads((folder / CONFIG).read_text()),
                     "wall_s": round(sum(r.get("wall_s", 0.0) for r in kept), 1),
                     "provenance": kept})
    write_json(out / SUMMARY, {**summary, "runs_stored": len(runs),
                               "wall_s": round(sum(r["wall_s"] for r in runs), 1), "runs": runs})
    return len(runs)


def _with_run_keys(table: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """A run's table with the run keys in front, taken from the run's metrics table where the
    table lacks them (rollouts.csv has one row per response and no keys of its own)."""
    if any(key in table.columns for key in RUN_KEYS):
        return table
    metrics = read_table(folder, "metrics")
    if metrics is None or metrics.empty:
        raise ValueError(f"{folder} has a table without run keys and no metrics table to take "
                         f"them from")
    keys = {key: metrics[key].iloc[0] for key in RUN_KEYS if key in metrics.columns}
    return pd.concat([pd.DataFrame(keys, index=table.index), table], axis=1)


def stored_summary(folder) -> dict:
    """The summary a store wrote (provenance.json), {} where there is none."""
    path = Path(folder) / SUMMARY
    return json.loads(path.read_text()) if path.exists() else {}


def stored_tables(folder, tables=TABLES) -> dict[str, pd.DataFrame]:
    """The stored tables of a set of runs that exist, by name."""
    folder = Path(folder)
    return {name: pd.read_csv(folder / stored_file(name)) for name in tables
            if (folder / stored_file(name)).exists()}
