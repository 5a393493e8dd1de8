"""Notebooks: clean in git, executed headless by papermill, every declared figure written, and
the package functions each one lists in its first cell are the ones it uses."""

import ast
import base64
import importlib
import json
import os
import re
import warnings
from pathlib import Path

import nbformat
import pytest

from sera.teaching import executions
from sera.teaching import notebooks as runner
from sera.teaching.notebook_files import KEPT_CELL_METADATA

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = runner.notebooks(ROOT / "notebooks")
ALLOWED_NOTEBOOK_METADATA = runner.KEPT_NOTEBOOK_METADATA


def test_notebooks_exist_in_order():
    names = [p.name for p in NOTEBOOKS]
    assert names[:5] == ["01_finite_rollout_fidelity.ipynb", "02_waterline_allocation.ipynb",
                         "03_allocation_vs_success.ipynb", "04_gradient_cosine_study.ipynb",
                         "05_maze_navigation.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_clean(path):
    nb = nbformat.read(path, as_version=4)
    assert set(nb.metadata) <= ALLOWED_NOTEBOOK_METADATA, set(nb.metadata)
    for i, cell in enumerate(nb.cells):
        assert set(cell.metadata) <= KEPT_CELL_METADATA, \
            f"cell {i} carries metadata {dict(cell.metadata)}"
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has stored outputs"
            assert cell.execution_count is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_follows_the_opening_cells(path):
    cells = nbformat.read(path, as_version=4).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    assert "Module functions used" in cells[0].source
    imports = [line for line in cells[1].source.splitlines() if line.strip()]
    assert all(line.startswith(("import ", "from ")) for line in imports), imports
    assert "parameters" in cells[2].metadata.get("tags", [])
    assert "profile = " in cells[2].source and "figures_dir = " in cells[2].source


def _aliases(source: str) -> dict:
    """Names bound to sera modules or objects by an imports cell."""
    aliases = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for name in node.names:
                if name.name.split(".")[0] == "sera":
                    aliases[name.asname or name.name.split(".")[0]] = \
                        name.name if name.asname else name.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sera"):
            for name in node.names:
                aliases[name.asname or name.name] = f"{node.module}.{name.name}"
    return aliases


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _resolve(dotted: str):
    """The object a dotted name refers to, importing modules on the way (None if none)."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            obj = getattr(obj, part, None)
        return obj
    return None


def used_functions(nb) -> set[str]:
    """Package functions and classes the code cells refer to (called or passed, e.g. to
    interact), by their full dotted names."""
    aliases = _aliases(nb.cells[1].source)
    found = set()
    for cell in nb.cells[2:]:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(tree):
            if id(node) in inner or not isinstance(node, ast.Attribute | ast.Name):
                continue
            chain = _dotted(node)
            if not chain or chain[0] not in aliases:
                continue
            for end in range(len(chain), 0, -1):  # the longest prefix that is a function
                dotted = ".".join([aliases[chain[0]], *chain[1:end]])
                obj = _resolve(dotted)
                if callable(obj) and not isinstance(obj, type(importlib)):
                    found.add(dotted)
                    break
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_lists_the_functions_it_uses(path):
    nb = nbformat.read(path, as_version=4)
    opening = nb.cells[0].source.split("Module functions used")[1]
    listed = set(re.findall(r"`(sera\.[\w.]+)`", opening))
    used = used_functions(nb)
    assert not used - listed, f"used but not listed: {sorted(used - listed)}"
    assert not listed - used, f"listed but not used: {sorted(listed - used)}"


def test_strip_removes_what_jupyter_saves(tmp_path):
    path = tmp_path / "n.ipynb"
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    nb.metadata["widgets"] = {"state": {}}
    code = next(cell for cell in nb.cells[3:] if cell.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", text="hello")]
    code.execution_count = 4
    code.metadata["collapsed"] = True
    nbformat.write(nb, path)
    assert runner.strip(path) and not runner.strip(path)
    assert path.read_text() == NOTEBOOKS[0].read_text()


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory) -> Path:
    """One run store for every notebook this session executes, as `make figures` keeps one in
    build/runs: a notebook reads back the runs and the warm-up another one trained with the same
    settings (05 and 06 share their maze warm-up and two maze runs, 04 and 06 three digits runs)
    instead of training them twice, and waits for one that the other is training. Under
    pytest-xdist the workers' temporary folders sit side by side, so the store is their parent."""
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    (root / "notebook-runs").mkdir(exist_ok=True)
    return root / "notebook-runs"


def _execute(path: Path, tmp_path: Path, runs: Path) -> executions.Execution:
    """The notebook executed at the fast profile: the execution `make figures` recorded for
    exactly these sources and this environment, every model trained in it (see
    sera.teaching.executions), else a run here that trains into the session's run store."""
    found = executions.reusable(path, "fast")
    if found is not None:
        return found
    # say why, so that a run after `make figures` that executes a notebook again is explained
    warnings.warn(f"{path.name} executed here, not reused: "
                  f"{executions.why_not(path, 'fast')}", stacklevel=1)
    parameters = nbformat.read(path, as_version=4).cells[2].source
    extra = {"runs_dir": str(runs / path.stem)} if "runs_dir" in parameters else None
    runner.run_notebook(path, "fast", figures=tmp_path / "figures", output=tmp_path / "out",
                        extra=extra)
    return executions.Execution(tmp_path / "out" / path.name, tmp_path / "figures")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_writes_its_figures(path, tmp_path, shared_runs):
    declared = runner.declared_figures(path)
    assert declared, f"{path.name} declares no figures"
    execution = _execute(path, tmp_path, shared_runs)
    for name in declared:
        for ext in ("png", "pdf"):
            written = execution.figures / f"{name}.{ext}"
            assert written.stat().st_size > 1000, written
    # What a reader sees: every cell that saves a figure or ends with one shows it as an image.
    executed = nbformat.read(execution.notebook, as_version=4)
    figure_cells = [(i, c) for i, c in enumerate(executed.cells) if c.cell_type == "code"
                    and (c.source.strip().splitlines()[-1].strip() == "fig"
                         or re.search(r"savefig\(\w+, \"\w+\"", c.source))]
    saved = {m for _, c in figure_cells for m in re.findall(r"savefig\(\w+, \"(\w+)\"",
                                                                  c.source)}
    assert set(declared) <= saved, f"saved outside a figure cell: {set(declared) - saved}"
    for i, cell in figure_cells:
        kinds = {kind for out in cell.outputs for kind in out.get("data", {})}
        assert "image/png" in kinds, f"{path.name} cell {i} shows {kinds or 'nothing'}"


def test_failing_cell_is_named(tmp_path):
    bad = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("profile = 'fast'\nfigures_dir = '.'",
                                  metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("raise ValueError('boom')"),
    ])
    bad.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                  "language": "python"}
    path = tmp_path / "99_broken.ipynb"
    nbformat.write(bad, path)
    with pytest.raises(RuntimeError, match=r"99_broken.ipynb: cell \d+ .*ValueError: boom"):
        runner.run_notebook(path, "fast", figures=tmp_path, output=tmp_path / "out")


def test_readme_gallery_lists_every_figure():
    readme = (ROOT / "docs" / "gallery.md").read_text()
    for path in NOTEBOOKS:
        for name in runner.declared_figures(path):
            assert f"figures/{name}.png" in readme, name
            assert (ROOT / "figures" / f"{name}.png").exists(), f"figures/{name}.png not committed"


EXERCISES = sorted((ROOT / "notebooks" / "exercises").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_exercise_notebook_is_clean_and_lists_what_it_uses(path):
    test_notebook_is_stored_clean(path)
    test_notebook_follows_the_opening_cells(path)
    test_notebook_lists_the_functions_it_uses(path)


def _printed(path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for out in cell.outputs)


@pytest.mark.slow
@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_exercises_run_with_and_without_solutions(path, tmp_path):
    # The source (the instructor's copy) passes every check; the student release, run as it is,
    # says "not done yet" at each.
    from sera.teaching import release

    student = tmp_path / "student" / path.name
    student.parent.mkdir()
    nb = nbformat.read(path, as_version=4)
    count = sum(cell.source.count("sera.teaching.course.check_") for cell in nb.cells[2:])
    nb.cells = [release.student_cell(cell) for cell in nb.cells]
    nbformat.write(nb, student)
    for source, solved in ((path, True), (student, False)):
        out = tmp_path / str(solved)
        runner.run_notebook(source, "fast", figures=tmp_path / "figures", output=out)
        printed = _printed(out / path.name)
        if solved:
            assert printed.count("PASS ") == count and "not yet" not in printed, printed
        else:
            assert printed.count("not done yet") == count, printed
        assert "Traceback" not in printed
        # Each check's message is shown once: no display output repeats it. In the instructor's
        # copy the hidden grading regions run too (the run would stop at a failed one) and
        # show nothing either.
        executed = nbformat.read(out / path.name, as_version=4)
        shown = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs
                 if o.output_type in ("display_data", "execute_result")]
        assert not shown, shown


def _fake_runs(folder: Path) -> Path:
    """Copies of the notebooks as if run (an execution count in every code cell), so the site
    can be built without running them."""
    folder.mkdir()
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            cell.execution_count = i + 1
        nbformat.write(nb, folder / path.name)
    return folder


def test_site_renders_every_notebook_offline_and_links_them(tmp_path):
    pages = runner.build_site(executed=_fake_runs(tmp_path / "runs"), output=tmp_path / "site")
    names = {p.relative_to(tmp_path / "site").as_posix() for p in pages}
    assert {f"{p.stem}.html" for p in NOTEBOOKS} <= names
    assert {f"exercises/{p.stem}.html" for p in EXERCISES} <= names
    index = (tmp_path / "site" / "index.html").read_text()
    for path in NOTEBOOKS:
        assert f'href="{path.stem}.html"' in index
    assert "live in JupyterLab" in index
    # The maintainer section of the guide stays out of the student index.
    assert "Keeping the repository clean" in (ROOT / "notebooks" / "README.md").read_text()
    assert "Keeping the repository clean" not in index and "maintainers" not in index
    for path in EXERCISES:  # the exercises as students get them
        page = (tmp_path / "site" / "exercises" / f"{path.stem}.html").read_text()
        assert "BEGIN SOLUTION" not in page and "NotImplementedError" in page
    for path in NOTEBOOKS:  # the study notebooks without their answer keys
        page = (tmp_path / "site" / f"{path.stem}.html").read_text()
        assert "BEGIN SOLUTION" not in page, path.name
    # Offline: formulas are MathML written at build time, no script comes from the network.
    for page in pages:
        html = page.read_text()
        assert not re.search(r"<script[^>]*src=\"https?://", html), page
        assert "SERAMATH" not in html and "$$" not in html, page
    assert "<math" in (tmp_path / "site" / "01_finite_rollout_fidelity.html").read_text()
    # a prose check shows its output only: its asserts stay off the page
    when = (tmp_path / "site" / "08_when_sera_helps.html").read_text()
    assert "statements about the map hold" not in when  # the print of a prose check


def test_a_page_built_without_a_run_shows_the_committed_figures_and_the_stored_tables(tmp_path):
    # A fresh clone has no executed copy of 05: its page shows the committed figures and the
    # stored tables its prose quotes (its stored-result cells run now, nothing trains). The whole
    # site built this way is checked in a browser (tests/test_browser.py).
    path = next(p for p in NOTEBOOKS if p.name.startswith("05"))
    nb = runner.with_committed_figures(path, ROOT / "figures", tmp_path)
    assert nb.cells[1].source == runner.COMMITTED_NOTE
    stored = [c for c in nb.cells if runner.STORED in c.metadata.get("tags", [])]
    assert all(c.outputs for c in stored if "round(3)" in c.source)  # each table cell shows one
    tables = "\n".join(o.get("data", {}).get("text/html", "") for c in stored for o in c.outputs)
    assert tables.count("<table") >= sum("round(3)" in c.source for c in stored) > 0
    assert "sera-rate" in tables
    shown = {o["data"]["image/png"][:200] for c in nb.cells if c.cell_type == "code"
             for o in c.outputs if "image/png" in o.get("data", {})}
    for name in runner.declared_figures(path):  # every figure it declares, as committed
        png = base64.b64encode((ROOT / "figures" / f"{name}.png").read_bytes()).decode()
        assert png[:200] in shown, name


def test_site_refuses_an_executed_copy_that_was_not_run_to_the_end(tmp_path):
    runs = _fake_runs(tmp_path / "runs")
    nb = nbformat.read(runs / NOTEBOOKS[1].name, as_version=4)
    next(c for c in nb.cells if c.cell_type == "code").execution_count = None
    nbformat.write(nb, runs / NOTEBOOKS[1].name)
    with pytest.raises(RuntimeError, match="was not run to the end.*--only 02"):
        runner.build_site(executed=runs, output=tmp_path / "site")


def test_a_slider_cell_shows_its_initial_figure():
    png = "iVBORw0KGgo="
    view = {"output_type": "display_data", "metadata": {}, "data": {
        "application/vnd.jupyter.widget-view+json": {"model_id": "box", "version_major": 2,
                                                     "version_minor": 0},
        "text/plain": "interactive(children=...)"}}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("explorer()",
                                                                   outputs=[view])])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_out"]}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [
            {"output_type": "display_data", "metadata": {}, "data": {"image/png": png}}]}}}}}
    assert runner.static_sliders(nb) == 1 and "widgets" not in nb.metadata
    outputs = nb.cells[0].outputs
    assert outputs[0].data["image/png"] == png
    assert "live in JupyterLab" in outputs[-1].data["text/markdown"]


def test_an_explorer_cell_shows_the_figure_it_displayed():
    # a sera.teaching.widgets explorer displays its initial figure as a PNG beside its widget view
    png = "iVBORw0KGgo="
    view = {"output_type": "display_data", "metadata": {}, "data": {
        "application/vnd.jupyter.widget-view+json": {"model_id": "box", "version_major": 2,
                                                     "version_minor": 0},
        "image/png": png, "text/plain": "Explorer(children=...)"}}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("explorer()",
                                                                   outputs=[view])])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_image"]}},
        "image": {"model_name": "ImageModel", "state": {"format": "png"}}}}}
    assert runner.static_sliders(nb) == 1 and "widgets" not in nb.metadata
    outputs = nb.cells[0].outputs
    assert [o.data.get("image/png") for o in outputs[:-1]] == [png]
    assert "live in JupyterLab" in outputs[-1].data["text/markdown"]


def test_an_explorer_of_notebooks_01_to_03_works_on_the_site_with_no_kernel():
    pytest.importorskip("anywidget")
    view = {"output_type": "display_data", "metadata": {}, "data": {
        "application/vnd.jupyter.widget-view+json": {"model_id": "x", "version_major": 2,
                                                     "version_minor": 1},
        "image/png": "iVBORw0KGgo=", "text/plain": "Explorer(...)"}}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "sera.teaching.widgets.kappa_explorer()", outputs=[view])])
    assert runner.static_sliders(nb) == 1
    [shown] = nb.cells[0].outputs  # the explorer itself, its tracks in the page; no note
    page = shown.data["text/html"]
    assert "staticModel(" in page and '"tracks"' in page and "image/png" not in shown.data


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_has_objectives_a_summary_and_review_questions(path):
    cells = nbformat.read(path, as_version=4).cells
    assert cells[3].cell_type == "markdown" and cells[3].source.startswith("## Learning objectives")
    # The summary and review questions close the notebook, followed at most by their answer key
    # (instructor only: tests/test_course.py checks it and its release) and the self-check quiz
    # (tests/test_quizzes.py checks it comes last).
    cells = [c for c in cells if "quiz" not in c.metadata.get("tags", [])]
    closing = cells[-2] if cells[-1].source.startswith("## Answers to the review questions") \
        else cells[-1]
    assert "## Summary" in closing.source and "## Review questions" in closing.source


def test_no_exercise_comes_before_its_material():
    # Each exercise sits in the guide's row of a notebook at or after the one that introduces
    # what it uses; exercises 3 need the multiplicity weights and Pass@K, introduced in 04.
    rows = [line for line in (ROOT / "notebooks" / "README.md").read_text().splitlines()
            if line.startswith("| ") and ".ipynb" in line]
    needs = {"01_kappa": ("κ(p, N)",), "02_waterline": ("water level",),
             "03_weights": ("multiplicity weights", "Pass@K")}
    for exercise, words in needs.items():
        row = next(i for i, line in enumerate(rows) if f"exercises/{exercise}" in line)
        first = min(i for i, path in enumerate(NOTEBOOKS) if all(
            w in "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                           if c.cell_type == "markdown" and not c.source.startswith(
                               ("## Learning objectives", "## Summary",
                                "## Answers to the review questions")))
            for w in words))
        assert row >= first, f"exercises {exercise} in row {row + 1}, before {NOTEBOOKS[first]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_has_a_one_sentence_takeaway_in_the_gallery(path):
    readme = (ROOT / "docs" / "gallery.md").read_text()
    for figure in nbformat.read(path, as_version=4).metadata["sera"]["figures"]:
        takeaway = figure.get("takeaway", "")
        assert takeaway.endswith(".") and takeaway.count(". ") == 0, figure["name"]
        assert f"**Take-away:** {takeaway}" in readme, figure["name"]


@pytest.mark.parametrize("jobs", [2, "auto"])
def test_notebooks_run_side_by_side_and_a_failure_is_reported(tmp_path, capsys, monkeypatch,
                                                              jobs):
    import argparse

    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # restored afterwards; run_all sets it to 1
    asked = []  # `--jobs auto` asks the machine for a count for the notebooks selected
    monkeypatch.setattr(runner.machine, "auto_jobs", lambda count: asked.append(count) or 2)

    def notebook(name, code):
        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("import sys"),
            nbformat.v4.new_code_cell("profile = 'fast'\nfigures_dir = '.'",
                                      metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell(code)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, tmp_path / name)
        return tmp_path / name

    # papermill's `cwd` moved the whole process into the notebook's folder from both threads at
    # once, and the two restores raced; papermill's writes step into the current folder and back
    start, moved, chdir = os.getcwd(), [], os.chdir
    monkeypatch.setattr(os, "chdir", lambda folder: moved.append(str(folder)) or chdir(folder))
    good = notebook("01_good.ipynb", "import os\nprint(os.environ['OMP_NUM_THREADS'])\n"
                                     "print(os.getcwd())")
    bad = notebook("02_bad.ipynb", "raise ValueError('boom')")
    args = argparse.Namespace(jobs=jobs, profile="fast", figures=tmp_path / "figures",
                              output=tmp_path / "out")
    assert runner.run_all([good, bad], args) == 1
    assert args.jobs == 2 and asked == ([2] if jobs == "auto" else [])
    err = capsys.readouterr().err
    assert "02_bad.ipynb" in err and "boom" in err
    executed = nbformat.read(tmp_path / "out" / "01_good.ipynb", as_version=4)
    cell = next(c for c in executed.cells if "OMP_NUM_THREADS" in c.source)
    threads, folder = cell.outputs[0]["text"].split()
    assert threads == "1"  # one thread per kernel
    assert folder == str(tmp_path)  # the kernel runs beside its notebook, the runner stays put
    assert set(moved) <= {start} and os.getcwd() == start
    # the finished notebook's execution is recorded for `make test`; the failed one's is not
    recorded = json.loads((tmp_path / "out" / "01_good.run.json").read_text())
    assert recorded["profile"] == "fast" and recorded["figures"] == {}
    assert recorded["fingerprint"] == executions.fingerprint()
    assert not (tmp_path / "out" / "02_bad.run.json").exists()


def test_every_formula_becomes_mathml_without_raw_tex():
    # The site writes formulas as MathML at build time: a TeX command the converter does not
    # know (or a stray backslash, as "\ \" before a line break once was) shows as raw text.
    import nbformat as nbf

    checked = 0
    for path in [*NOTEBOOKS, *EXERCISES]:
        nb = nbf.read(path, as_version=4)
        formulas = runner.offline_math(nb)
        for mathml in formulas.values():
            texts = re.findall(r">([^<]+)<", mathml)
            assert not [t for t in texts if "\\" in t], (path.name, mathml)
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_prose_checks_are_collapsed_out_of_the_readers_way(path):
    # A cell of several asserts checks the text above it against the tables: tagged, stored
    # collapsed for JupyterLab, and shown on the site by its output only.
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tagged = runner.PROSE_CHECK in cell.metadata.get("tags", [])
        assert tagged == (cell.source.count("assert ") >= 2), (path.name, i)
        if tagged:
            assert cell.metadata["jupyter"] == {"source_hidden": True}, (path.name, i)
    assert not runner.strip(path)  # stored as it is: strip keeps the collapse


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_study_notebook_reads_in_at_most_3000_words_of_markdown(path):
    # prose that retells the stored tables grows with every run; the tables and
    # docs/results.md carry the numbers, the text what they mean
    # (the self-check quiz, its choices and their replies, is not prose and is not counted)
    nb = nbformat.read(path, as_version=4)
    words = sum(len(c.source.split()) for c in nb.cells if c.cell_type == "markdown"
                and "quiz" not in c.metadata.get("tags", []))
    assert words <= 3000, (path.name, words)


def test_06_starts_before_the_notebooks_that_read_back_its_runs(tmp_path, monkeypatch):
    """make figures starts 06 first: 04 and 05 read back the runs 06 trains (one run store)."""
    import argparse

    started = []
    monkeypatch.setattr(runner, "run_notebook",
                        lambda path, *args, **kwargs: started.append(path.name[:2]) or 0.0)
    monkeypatch.setattr(executions, "record", lambda *args, **kwargs: None)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    args = argparse.Namespace(jobs=1, profile="fast", figures=tmp_path, output=tmp_path)
    assert runner.run_all(list(NOTEBOOKS), args) == 0
    assert started == ["06", "07", "04", "05", "08", "03", "02", "01"]



@pytest.mark.slow
def test_the_figures_that_train_nothing_are_the_same_bytes_with_avx2_code(tmp_path):
    # Notebooks 01-03 draw sera's formulas, no training: a laptop with AVX2 only must redraw the
    # committed figures byte for byte, or a newcomer's tree is dirty after the first notebook.
    # On a machine with AVX-512, machine.avx2_limits() makes numpy and torch run their AVX2 code.
    import subprocess
    import sys

    from sera.teaching import machine

    limits = machine.avx2_limits()
    env = {**os.environ, **limits}
    for path in NOTEBOOKS[:3]:
        done = subprocess.run([sys.executable, "-m", "sera.teaching.notebooks", "--only",
                               path.name, "--figures", str(tmp_path / "figures"),
                               "--output", str(tmp_path / "out")],
                              env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        for name in runner.declared_figures(path):
            for ext in ("png", "pdf"):
                drawn = (tmp_path / "figures" / f"{name}.{ext}").read_bytes()
                assert drawn == (ROOT / "figures" / f"{name}.{ext}").read_bytes(), \
                    f"{name}.{ext} differs under {limits}"
