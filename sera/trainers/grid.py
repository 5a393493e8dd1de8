"""The grid runner: a list of run configurations trained one folder a run (`run_label`).

`run_grid` trains them with `sera.trainers.loop.fit` and returns their tables, `work_through`
splits one list between several processes; each run is held through the run store's lock while
it trains. Everything about folders belongs to `sera.runstore`: the file names, the
folders' format, the locks, and the index of finished runs by their settings (with the links
that let one grid read back another's runs); this module only says which settings count.
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
             progress: bool = True, shared=None, desc: str = "runs") -> Results:
    """Fit every config (build(config) makes the study) and return the concatenated tables: the
    grid runner of the notebooks and the task grids. runs_dir: each run trains in
    runs_dir/<run_label>; None: in its config's own out. A finished run is read back from its
    folder unless rerun is True. Each run is held through a lock (sera.runstore.claim) while it
    trains.

    shared: a folder indexing finished runs by their settings (every setting but out, steps
    aside); a run that another grid already finished with the same settings is read back from
    that grid's folder instead of trained again. A run of the same settings that another grid
    is training right now (its lock in `shared`) is put off: this grid trains its other runs
    first and then reads that one back, rather than train it twice or wait with a core idle.
    (Several processes that split one list between them use `work_through`.)"""
    from tqdm.auto import tqdm

    parts, later = {}, []
    with tqdm(total=len(configs), desc=desc, disable=not progress) as bar:
        for index, config in enumerate(configs):
            result = _fit(config, build, runs_dir, rerun, shared, wait=False)
            if result is _ELSEWHERE:
                later.append((index, config))
                continue
            parts[index] = result
            bar.update()
        for index, config in later:  # by now mostly finished by the grid that held them
            parts[index] = _fit(config, build, runs_dir, rerun, shared, wait=True)
            bar.update()
    return Results.concat([parts[i] for i in sorted(parts)])


_ELSEWHERE = object()
"""What _fit returns for a run of the same settings that another grid is training."""


def _fit(config: RunConfig, build, runs_dir, rerun: bool, shared, wait: bool):
    """One run of run_grid: trained, resumed or read back; _ELSEWHERE where another grid holds
    its settings and wait is False."""
    import contextlib
    import shutil

    folder = Path(runs_dir) / run_label(config) if runs_dir is not None else Path(config.out)
    key = _settings_key(config)
    held = contextlib.nullcontext(True) if shared is None or rerun else \
        runstore.hold_claim(shared, key, wait=wait)
    with held as free:
        if not free:
            return _ELSEWHERE
        elsewhere = None if rerun or shared is None else _finished_elsewhere(config, shared, key)
        runstore.unlink_other(folder, elsewhere)
        with runstore.claim(folder, wait=True):
            if rerun:
                shutil.rmtree(folder, ignore_errors=True)
            elif elsewhere is not None and not (folder / runstore.FINAL).exists():
                runstore.link(folder, elsewhere)
                folder = elsewhere
            result = loop.fit(build(replace(config, out=str(folder), progress=False)))
        if shared is not None:
            runstore.index(shared, key, folder)
    return result


def work_through(configs: list[RunConfig], build, *, progress: bool = True, after_each=None,
                 desc: str = "runs") -> None:
    """Train every config in its own out that is not finished, as one of several processes (one
    per core) working through the same list: each trains the runs nobody holds (the run store's
    lock) and leaves the others to their owners. after_each() is called after every run this
    process trained (e.g. to store the finished runs' tables) and once at the end. Nothing is
    read back or returned: the caller reads the stored tables."""
    from tqdm.auto import tqdm

    for config in tqdm(configs, desc=desc, disable=not progress):
        folder = Path(config.out)
        if runstore.finished(folder):
            continue
        runstore.unlink_other(folder, None)
        with runstore.claim(folder, wait=False) as ours:
            if not ours:
                continue  # another process trains it
            trained = not runstore.finished(folder)
            loop.fit(build(replace(config, progress=False)))
        if after_each is not None and trained:
            after_each()
    if after_each is not None:
        after_each()


def _settings_key(config: RunConfig) -> str:
    return runstore.settings_key({k: v for k, v in as_dict(config).items()
                                  if k not in ("out", "progress")})


def _finished_elsewhere(config: RunConfig, shared, key: str) -> Path | None:
    """Another grid's finished run of these settings, where its saved configuration agrees."""
    folder = runstore.indexed(shared, key)
    if folder is None:
        return None
    saved = json.loads((folder / runstore.CONFIG).read_text())
    return folder if not checkpoint.differences(saved, as_dict(config), defaults(config)) else None


def run_label(config: RunConfig) -> str:
    """A folder name from the run's keys (the tables carry the keys; nothing parses this)."""
    keys = config.keys()
    parts = [keys["method"], f"n0-{keys['n0']}", keys["agg"], f"seed-{keys['seed']}"]
    # a threshold other than the method's own (None: none recorded)
    if keys["u_min"] != (METHODS[config.method].selection or None):
        parts.insert(1, f"umin-{keys['u_min'] or 0}")
    return "_".join(str(p) for p in parts)
