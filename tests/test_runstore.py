"""The run store: atomic writes, locks between processes, stored runs written back whole."""

import dataclasses
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sera import runstore
from sera.trainers import grid, loop, maze


def test_an_atomic_write_replaces_the_file_whole_or_not_at_all(tmp_path):
    path = tmp_path / "table.csv"
    runstore.write_text(path, "old\n")
    with pytest.raises(RuntimeError), runstore.atomic(path) as scratch:
        scratch.write_text("half")
        raise RuntimeError("crash while writing")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]  # no scratch file left
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert path.stat().st_mode == plain.stat().st_mode  # the permissions of any new file


def test_a_compressed_table_gives_the_same_bytes_each_time(tmp_path):
    table = pd.DataFrame({"step": [0, 1], "value": [0.1234567891, 2.0]})
    runstore.write_csv(table, tmp_path / "a.csv.gz", float_format="%.6g")
    runstore.write_csv(table, tmp_path / "sub" / "b.csv.gz", float_format="%.6g")
    first, second = (tmp_path / "a.csv.gz").read_bytes(), (tmp_path / "sub" / "b.csv.gz")\
        .read_bytes()
    assert first == second
    assert gzip.decompress(first).decode() == "step,value\n0,0.123457\n1,2\n"


def test_a_run_is_held_by_one_process_and_freed_when_that_process_dies(tmp_path):
    folder = tmp_path / "runs" / "maxrl_seed-0"
    with runstore.claim(folder) as first:
        assert first
        with runstore.claim(folder) as second:  # held (by this process, another lock object)
            assert not second
    with runstore.claim(folder) as again:
        assert again
    lock = folder.with_name(folder.name + ".lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from filelock import FileLock; "
         f"held = FileLock({str(lock)!r}); held.acquire(); print('held', flush=True); "
         "time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with runstore.claim(folder) as taken:
            assert not taken
    finally:
        holder.kill()
        holder.wait()
    with runstore.claim(folder) as taken:  # the killed process's lock is gone with it
        assert taken


def test_a_shared_grid_leaves_held_runs_to_their_owner(tmp_path, monkeypatch):
    configs = [dataclasses.replace(maze.MazeConfig(), out=str(tmp_path / f"run-{i}"))
               for i in range(3)]
    fitted, stores = [], []
    monkeypatch.setattr(loop, "fit", lambda study: fitted.append(study))
    with runstore.claim(tmp_path / "run-1"):
        assert grid.work_through(configs, lambda c: c.out, progress=False,
                                 after_each=lambda: stores.append(1)) is None
    assert fitted == [str(tmp_path / "run-0"), str(tmp_path / "run-2")] and len(stores) == 3


def test_stored_runs_are_written_back_as_the_same_finished_folders(tmp_path):
    folders = []
    for seed in (0, 1):
        folder = tmp_path / "runs" / f"run-{seed}"
        runstore.begin(folder, {"seed": seed}, {"step": 0, "torch": "x"})
        assert not runstore.finished(folder)
        runstore.write_csv(pd.DataFrame({"seed": [seed] * 2, "step": [0, 1],
                                         "value": [0.5, 0.25]}), folder / "metrics.csv")
        runstore.finish(folder, pd.DataFrame({"seed": [seed], "p": [0.75]}),
                        {"step": 2, "wall_s": 1.5})
        assert runstore.finished(folder)
        folders.append(folder)
    assert runstore.store_runs(folders, tmp_path / "study", {"point": "t"},
                               tables=("metrics", "final")) == 2
    summary = runstore.stored_summary(tmp_path / "study")
    assert summary["runs_stored"] == 2 and summary["wall_s"] == 3.0
    tables = runstore.stored_tables(tmp_path / "study")
    assert set(tables) == {"metrics", "final"} and len(tables["metrics"]) == 4
    record = summary["runs"][1]
    rows = {name: t[t["seed"] == 1] for name, t in tables.items()}
    runstore.write_finished(tmp_path / "back", rows, record["config"], record["provenance"])
    assert runstore.finished(tmp_path / "back")
    assert runstore.records(tmp_path / "back") == runstore.records(folders[1])
    assert json.loads((tmp_path / "back" / "config.json").read_text()) == {"seed": 1}
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "back" / "final.csv"),
                                  pd.read_csv(folders[1] / "final.csv"))


@pytest.mark.parametrize("name", ["04_gradient_cosine_study", "05_maze_navigation",
                                  "06_allocators_compared", "07_math_reasoning"])
def test_a_study_notebook_finds_its_runs_through_the_package_from_any_folder(name, tmp_path):
    # The student release sits in build/course/student/, a JupyterHub home anywhere: a path
    # relative to the notebook ("../build/runs") would miss the finished runs there.
    import nbformat

    path = runstore.ROOT / "notebooks" / f"{name}.ipynb"
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert not [c for c in cells if '"../build' in c or '"../data' in c]
    # the imports, the parameters and the line that resolves runs_dir, run from another folder
    resolve = next(line for cell in cells[2:] for line in cell.splitlines()
                   if line.startswith("runs_dir = Path("))
    script = "\n".join([cells[0], cells[1], resolve, "print(runs_dir)"])
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert Path(out).parent == runstore.RUNS_ROOT and Path(out).name.startswith(name[:3])


def test_the_settings_index_reads_back_only_finished_resumable_runs(tmp_path):
    shared, folder = tmp_path / "index", tmp_path / "a" / "run"
    key = runstore.settings_key({"method": "sera", "seed": 0})
    assert key == runstore.settings_key({"seed": 0, "method": "sera"})  # order-free
    assert key != runstore.settings_key({"method": "sera", "seed": 1})
    assert runstore.indexed(shared, key) is None  # nothing recorded
    runstore.index(shared, key, folder)
    assert runstore.indexed(shared, key) is None  # recorded, not finished
    runstore.begin(folder, {"seed": 0}, {"start": 1})
    runstore.finish(folder, pd.DataFrame({"x": [1]}), {"wall_s": 1.0})
    assert runstore.indexed(shared, key) is None  # finished, but no checkpoint to resume from
    (folder / runstore.CHECKPOINT).write_bytes(b"")
    assert runstore.indexed(shared, key) == folder.resolve()


def test_a_link_is_made_once_and_a_link_elsewhere_is_removed(tmp_path):
    target, other, folder = tmp_path / "a", tmp_path / "c", tmp_path / "b" / "run"
    target.mkdir()
    other.mkdir()
    runstore.link(folder, target)
    assert folder.is_symlink() and folder.resolve() == target.resolve()
    runstore.link(folder, other)  # something is there already: left as it is
    assert folder.resolve() == target.resolve()
    runstore.unlink_other(folder, target)
    assert folder.is_symlink()
    runstore.unlink_other(folder, other)
    assert not folder.exists() and target.is_dir()


# How the package's modules outside the run store could spell a run or warm-up folder's names.
SPELLINGS = re.compile(r'/ "(?:warmup|model|evaluations)"|"warmup\.json"|step0-'
                       r'|\.get\("warmup"\)|summary\["warmup"\]')


def test_the_warm_up_folder_names_are_spelled_in_the_run_store_only():
    """The warm-up's folder, record, fingerprint key and step-0 evaluations, and a run's model
    folder, are named by sera.runstore alone, so a change of layout is one module's change."""
    package = Path(runstore.__file__).parent
    found = [f"{path.relative_to(package)}:{number}: {line.strip()}"
             for path in sorted(package.rglob("*.py")) if path.name != "runstore.py"
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if SPELLINGS.search(line)]
    assert not found, "\n".join(found)
    warmup = runstore.warmup_dir("grid")
    assert warmup == Path("grid") / runstore.WARMUP
    assert runstore.warmup_stamp(warmup).parent == warmup
    assert runstore.first_evaluation(warmup, "ab12").parent.parent == warmup


def _warmup(folder: Path, marker: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_text(marker)
    runstore.write_json(runstore.warmup_stamp(folder), {"settings": {}, "fingerprint": marker})
    return folder


def test_a_warm_up_is_seeded_where_there_is_none_and_never_over_a_finished_one(tmp_path):
    source = _warmup(tmp_path / "stored", "stored")
    target = tmp_path / "runs" / runstore.WARMUP
    target.mkdir(parents=True)
    (target / "model.safetensors").write_text("half written")  # a crash before its stamp
    assert runstore.seed_warmup(target, source)
    assert (target / "model.safetensors").read_text() == "stored"
    assert runstore.has_warmup(target)
    trained = _warmup(tmp_path / "trained" / runstore.WARMUP, "trained here")
    assert not runstore.seed_warmup(trained, source)
    assert (trained / "model.safetensors").read_text() == "trained here"
    with pytest.raises(FileNotFoundError, match="no warm-up to copy"):
        runstore.seed_warmup(tmp_path / "other", tmp_path / "nowhere")
    assert not (tmp_path / "other").exists()


def test_a_stored_point_names_its_warm_up_or_says_which_points_keep_one(tmp_path, monkeypatch):
    stamps = sorted(runstore.STUDY_DIR.glob(f"*/{runstore.WARMUP}/{runstore.WARMUP_STAMP}"))
    assert stamps  # the stored study keeps warm-ups, the notebooks' among them
    for stamp in stamps:
        assert runstore.stored_warmup(stamp.parents[1].name) == stamp.parent
    monkeypatch.setattr(runstore, "STUDY_DIR", tmp_path)
    _warmup(runstore.warmup_dir(tmp_path / "kept"), "kept")
    (tmp_path / "bare").mkdir()
    assert runstore.stored_warmup("kept") == tmp_path / "kept" / runstore.WARMUP
    with pytest.raises(FileNotFoundError, match="these do: kept"):
        runstore.stored_warmup("bare")
