"""Grids of runs and where their folders live: the grid runner, each run's folder name, and the
index of finished runs by their settings that lets one grid read back another's runs.

`run_grid` trains a list of configurations with `sera.trainers.loop.fit`, one folder a run
(`run_label`), each held through the run store's lock while it trains; the file names and the
folders' format belong to `sera.runstore`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sera import runstore
from sera.methods import METHODS
from sera.tables import Results
from sera.trainers import checkpoint, loop
from sera.trainers.config import RunConfig, as_dict, defaults


def run_grid(configs: list[RunConfig], build, *, runs_dir=None, rerun: bool = False,
             progress: bool = True, shared=None, after_each=None, share: bool = False,
             desc: str = "runs") -> Results | None:
    """Fit every config (build(config) makes the study) and return the concatenated tables: the
    one grid runner of the package. runs_dir: each run trains in runs_dir/<run_label>; None: in
    its config's own out. A finished run is read back from its folder unless rerun is True.
    Each run is held through a lock (sera.runstore.claim) while it trains; after_each() is
    called after every run this process trained (e.g. to store the finished runs' tables).

    shared: a folder indexing finished runs by their settings (every setting but out, steps
    aside); a run that another grid already finished with the same settings is read back from
    that grid's folder instead of trained again. A run of the same settings that another grid
    is training right now (its lock in `shared`) is put off: this grid trains its other runs
    first and then reads that one back, rather than train it twice or wait with a core idle.

    share=True: several processes work through the same list, one per core: each trains the
    runs nobody holds and leaves the others to their owners; finished runs are not read back
    and nothing is returned."""
    from tqdm.auto import tqdm

    parts, later = {}, []
    with tqdm(total=len(configs), desc=desc, disable=not progress) as bar:
        for index, config in enumerate(configs):
            result = _fit(config, build, runs_dir, rerun, shared, after_each, share, wait=False)
            if result is _ELSEWHERE:
                later.append((index, config))
                continue
            parts[index] = result
            bar.update()
        for index, config in later:  # by now mostly finished by the grid that held them
            parts[index] = _fit(config, build, runs_dir, rerun, shared, after_each, share,
                                wait=True)
            bar.update()
    if after_each is not None:
        after_each()
    return None if share else Results.concat([parts[i] for i in sorted(parts)])


_ELSEWHERE = object()
"""What _fit returns for a run of the same settings that another grid is training."""


def _fit(config: RunConfig, build, runs_dir, rerun: bool, shared, after_each, share: bool,
         wait: bool):
    """One run of run_grid: trained, resumed or read back (None where share leaves it to
    another process); _ELSEWHERE where another grid holds its settings and wait is False."""
    import contextlib
    import shutil

    folder = Path(runs_dir) / run_label(config) if runs_dir is not None else Path(config.out)
    if share and not rerun and runstore.finished(folder):
        return None
    held = contextlib.nullcontext(True) if shared is None or rerun else \
        runstore.claim(Path(shared) / _settings_key(config), wait=wait and not share)
    with held as free:
        if not free:
            return None if share else _ELSEWHERE
        elsewhere = None if rerun or shared is None else _finished_elsewhere(config, shared)
        if folder.is_symlink() and (elsewhere is None
                                    or folder.resolve() != elsewhere.resolve()):
            folder.unlink()  # a link to another grid's run of other settings: not this run's
        with runstore.claim(folder, wait=not share) as ours:
            if not ours:
                return None  # another process trains it
            if rerun:
                shutil.rmtree(folder, ignore_errors=True)
            elif elsewhere is not None and not (folder / runstore.FINAL).exists():
                if not folder.exists():  # this grid's folder name leads there too
                    folder.parent.mkdir(parents=True, exist_ok=True)
                    folder.symlink_to(elsewhere.resolve(), target_is_directory=True)
                folder = elsewhere
            trained = not runstore.finished(folder)
            result = loop.fit(build(replace(config, out=str(folder), progress=False)))
        if shared is not None:
            _index(config, folder, shared)
    if after_each is not None and trained:
        after_each()
    return None if share else result


def _settings_key(config: RunConfig) -> str:
    import hashlib

    settings = {k: v for k, v in as_dict(config).items() if k not in ("out", "progress")}
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _finished_elsewhere(config: RunConfig, shared) -> Path | None:
    entry = Path(shared) / f"{_settings_key(config)}.json"
    if not entry.exists():
        return None
    folder = Path(json.loads(entry.read_text())["out"])
    if not (runstore.finished(folder) and (folder / runstore.CHECKPOINT).exists()):
        return None
    saved = json.loads((folder / runstore.CONFIG).read_text())
    return folder if not checkpoint.differences(saved, as_dict(config), defaults(config)) else None


def _index(config: RunConfig, folder: Path, shared) -> None:
    Path(shared).mkdir(parents=True, exist_ok=True)
    runstore.write_json(Path(shared) / f"{_settings_key(config)}.json",
                        {"out": str(Path(folder).resolve())}, indent=None)


def run_label(config: RunConfig) -> str:
    """A folder name from the run's keys (the tables carry the keys; nothing parses this)."""
    keys = config.keys()
    parts = [keys["method"], f"n0-{keys['n0']}", keys["agg"], f"seed-{keys['seed']}"]
    # a threshold other than the method's own (None: none recorded)
    if keys["u_min"] != (METHODS[config.method].selection or None):
        parts.insert(1, f"umin-{keys['u_min'] or 0}")
    return "_".join(str(p) for p in parts)
