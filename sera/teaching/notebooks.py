"""Run the notebooks in order with papermill and regenerate every figure: `make figures`.

    python -m sera.teaching.notebooks [--profile fast|long] [--only 02] [--figures DIR]
    python -m sera.teaching.notebooks --strip   # remove outputs before committing
    python -m sera.teaching.notebooks --site    # the course as static HTML, no training

Executed copies go to build/notebooks/ (outside git); figures go to figures/. Each notebook
declares the figures it writes in its metadata (metadata.sera.figures: name and the
sera.plotting function that draws it); a notebook that fails,
or that does not write what it declares, stops the run with the notebook and cell named.
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
import time
from pathlib import Path

import nbformat

from sera.teaching import executions, machine
from sera.teaching.notebook_files import (  # noqa: F401 (the runner's public names)
    KEPT_NOTEBOOK_METADATA,
    ROOT,
    guide_for,
    notebooks,
    strip,
)


def declared_figures(path: Path) -> list[str]:
    """Figure names (file stems) a notebook promises to write (metadata.sera.figures: name, the
    sera.plotting function and a one-sentence take-away for the gallery)."""
    meta = nbformat.read(path, as_version=4).metadata.get("sera", {})
    return [figure["name"] for figure in meta.get("figures", [])]


def run_notebook(path: Path, profile: str = "fast", figures: Path | None = None,
                 output: Path | None = None, extra: dict | None = None) -> float:
    """Execute one notebook headless; return its wall time. Raises RuntimeError naming the
    notebook and the failing cell, or the figures it declared but did not write."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    figures = (figures or ROOT / "figures").resolve()
    output = (output or ROOT / "build" / "notebooks").resolve()
    output.mkdir(parents=True, exist_ok=True)
    parameters = {"profile": profile, "figures_dir": str(figures), **(extra or {})}
    start = time.perf_counter()
    try:
        # The kernel starts in the notebook's folder through nbclient's `resources`, not
        # papermill's `cwd`: that one calls os.chdir, process-wide, and two notebooks run side by
        # side in threads, so the restores raced and left the runner in another folder.
        papermill.execute_notebook(str(path), str(output / path.name), parameters=parameters,
                                   resources={"metadata": {"path": str(path.parent)}},
                                   progress_bar=False, kernel_name="python3", log_output=False)
    except PapermillExecutionError as exc:
        first_line = exc.source.strip().splitlines()[0] if exc.source.strip() else ""
        raise RuntimeError(f"{path.name}: cell {exc.cell_index} (execution count "
                           f"{exc.exec_count}, starting {first_line!r}) raised "
                           f"{exc.ename}: {exc.evalue}") from None
    missing = [f"{name}.{ext}" for name in declared_figures(path) for ext in ("png", "pdf")
               if not (figures / f"{name}.{ext}").exists()]
    if missing:
        raise RuntimeError(f"{path.name} ran but did not write {', '.join(missing)} "
                           f"into {figures}")
    return time.perf_counter() - start


def executed_copy(path: Path, executed: Path):
    """The executed copy of a notebook, read; raises RuntimeError naming the notebook and the
    command that runs it when there is none or it was not run to the end."""
    run = executed / path.name
    command = f"python -m sera.teaching.notebooks --only {path.name[:2]}"
    if not run.exists():
        raise RuntimeError(f"{path.name} has not been run: no {run}. Run `make figures` (all "
                           f"notebooks) or `{command}`, then build the site again.")
    nb = nbformat.read(run, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code" and cell.source.strip()]
    if not code or any(cell.execution_count is None for cell in code):
        raise RuntimeError(f"{run} was not run to the end (a code cell has no execution count). "
                           f"Run `{command}`, then build the site again.")
    return nb


SLIDER_NOTE = ("*The sliders are live in JupyterLab; here is the figure at their initial "
               "values.*")
_EXPLORER_CALL = re.compile(r"widgets\.(\w+)_explorer\(\)")


def static_sliders(nb) -> int:
    """Replace each widget output: an explorer of sera.teaching.widgets that needs no data from
    the notebook (notebooks 01-03) by the same explorer working with no kernel (its tracks at
    the starting values in the page, see Explorer.static_html), any other by the figure its
    widget showed when the notebook ran (the PNG an explorer displays beside its widget, else
    the widget state papermill stores) and a note that the sliders are live in JupyterLab; drop
    the widget state. Returns the number of slider cells replaced."""
    from sera.teaching import widgets

    key = "application/vnd.jupyter.widget-state+json"
    state = nb.metadata.pop("widgets", {}).get(key, {}).get("state", {})

    def images(model_id, seen=()):
        model = state.get(model_id, {})
        if model_id in seen or not model:
            return []
        found = [out for out in model["state"].get("outputs", [])
                 if "image/png" in out.get("data", {})]
        for child in model["state"].get("children", []):
            found += images(child.removeprefix("IPY_MODEL_"), (*seen, model_id))
        return found

    replaced = 0
    for cell in nb.cells:
        views = [out for out in cell.get("outputs", [])
                 if "application/vnd.jupyter.widget-view+json" in out.get("data", {})]
        if not views:
            continue
        live = [name for name in _EXPLORER_CALL.findall(cell.source)
                if name in widgets.EXPLORERS]
        if live:
            shown = [nbformat.from_dict({"output_type": "display_data", "metadata": {}, "data": {
                "text/html": widgets.EXPLORERS[name]().static_html()}}) for name in live]
        else:
            shown = [nbformat.from_dict({"output_type": "display_data", "metadata": {},
                                         "data": {"image/png": out["data"]["image/png"]}})
                     for view in views
                     for out in ([view] if "image/png" in view["data"] else images(
                         view["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]))]
            shown.append(nbformat.from_dict({"output_type": "display_data", "metadata": {},
                                             "data": {"text/markdown": SLIDER_NOTE}}))
        cell.outputs = [out for out in cell.outputs if out not in views] + shown
        replaced += 1
    return replaced


_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)
_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.S)


def offline_math(nb) -> dict[str, str]:
    """Turn every $...$ and $$...$$ of the markdown cells into MathML now (latex2mathml), so a
    page shows formulas without MathJax or a network: the formula is replaced by a placeholder
    that markdown leaves alone; returns placeholder -> MathML for the page."""
    from latex2mathml.converter import convert

    found: dict[str, str] = {}

    def swap(match):
        tex, display = (match.group(1), "block") if match.group(1) else (match.group(2),
                                                                           "inline")
        token = f"SERAMATH{len(found):05d}X"
        found[token] = convert(tex.strip(), display=display)
        return token

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts = _CODE.split(cell.source)
            cell.source = "".join(part if i % 2 else _MATH.sub(swap, part)
                                  for i, part in enumerate(parts))
    return found


_REMOTE = re.compile(r"<script[^>]*\ssrc=\"https?://[^\"]*\"[^>]*>\s*</script>")
_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)


def output_math(nb) -> int:
    """Turn every LaTeX output of the code cells (sympy's results) into MathML now, in place, as
    offline_math does for the markdown; a formula latex2mathml cannot read keeps its plain text.
    Returns the number of formulas converted."""
    from latex2mathml.converter import convert

    converted = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            if "text/latex" not in data:
                continue
            tex = data.pop("text/latex").strip().strip("$").strip()
            try:
                data["text/html"] = convert(tex, display="block")
                converted += 1
            except Exception:  # noqa: BLE001 - an unreadable formula keeps its plain text
                pass
    return converted


def _page(exporter, nb) -> str:
    """One self-contained page: formulas as MathML (the markdown's and the outputs'), no script
    from the network."""
    output_math(nb)
    formulas = offline_math(nb)
    body, _ = exporter.from_notebook_node(nb)
    body = _REMOTE.sub("", _MATHJAX.sub("", body))
    for token, mathml in formulas.items():
        body = body.replace(token, mathml)
    return body


PROSE_CHECK = "prose-check"
"""The tag of a cell that checks a notebook's statements against its tables: stored collapsed
(`jupyter.source_hidden`), shown on the site by its output alone."""
QUICK = ("01", "02", "03")
"""The study notebooks that run in seconds (no training, no simulation): the site executes them
when they have no executed copy."""
COMMITTED_NOTE = ("*This page was built without running the notebook, which trains or simulates "
                  "for minutes: its figures are the committed ones in `figures/`, its tables of "
                  "stored runs were read when the page was built, and the other code cells show "
                  "no output. `make figures`, then `make site`, shows every output as it ran.*")
_SAVEFIG = re.compile(r"savefig\(\s*\w+\s*,\s*[\"']([^\"']+)[\"']")


STORED = "stored-result"
"""The tag of a cell that only reads the stored runs (no training, no simulation): a page built
without running its notebook still runs these cells, after the notebook's imports and
parameters, so the tables its prose quotes are shown beside the figures."""


def stored_outputs(path: Path, scratch: Path) -> dict[str, list]:
    """Run a notebook's imports, parameters and stored-result cells alone (in seconds); return
    cell id -> outputs of each stored-result cell. Raises RuntimeError as run_notebook does."""
    nb = nbformat.read(path, as_version=4)
    tags = [cell.metadata.get("tags", []) for cell in nb.cells]
    last_setup = next(i for i, t in enumerate(tags) if "parameters" in t)
    nb.cells = [cell for i, (cell, t) in enumerate(zip(nb.cells, tags, strict=True))
                if cell.cell_type == "code" and (i <= last_setup or STORED in t)]
    if not any(STORED in cell.metadata.get("tags", []) for cell in nb.cells):
        return {}
    nb.metadata.pop("sera", None)  # it promises the whole notebook's figures
    (scratch / "stored").mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, scratch / "stored" / path.name)
    run_notebook(scratch / "stored" / path.name, "fast", figures=scratch / "figures",
                 output=scratch / "ran")
    ran = nbformat.read(scratch / "ran" / path.name, as_version=4)
    return {cell.id: cell.outputs for cell in ran.cells
            if STORED in cell.metadata.get("tags", [])}


def with_committed_figures(path: Path, figures: Path, scratch: Path | None = None):
    """A study notebook as the site shows it without a run: each cell that saves a figure shows
    the committed PNG of that name, each stored-result cell its output (run now, when given a
    scratch folder), and a note under the title says so."""
    nb = nbformat.read(path, as_version=4)
    stored = stored_outputs(path, scratch) if scratch is not None else {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.id in stored:
            cell.outputs = stored[cell.id]
            continue
        cell.outputs = [nbformat.from_dict({
            "output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode((figures / f"{name}.png").read_bytes())
                     .decode()}})
            for name in _SAVEFIG.findall(cell.source) if (figures / f"{name}.png").exists()]
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(COMMITTED_NOTE))
    return nb


def _site_copy(path: Path, executed: Path, scratch: Path, figures: Path):
    """What the site shows for one study notebook: its executed copy where there is one (refused
    if it was not run to the end), else a run made now for the quick ones, else the source with
    the committed figures."""
    if (executed / path.name).exists():
        return executed_copy(path, executed)
    if path.name[:2] in QUICK:
        run_notebook(path, "fast", figures=scratch / "figures", output=scratch)
        return executed_copy(path, scratch)
    return with_committed_figures(path, figures, scratch)


def _executed_exercise(path: Path, scratch: Path):
    """An exercise notebook as students get it (no solutions), run: every check says it is not
    done yet."""
    from sera.teaching.release import student_notebook

    folder = scratch / "exercises"
    folder.mkdir(parents=True, exist_ok=True)
    nb = student_notebook(nbformat.read(path, as_version=4))
    nbformat.write(nb, folder / path.name)
    run_notebook(folder / path.name, "fast", figures=scratch / "figures", output=scratch / "run")
    return nbformat.read(scratch / "run" / path.name, as_version=4)


def build_site(executed: Path | None = None, output: Path | None = None,
               source: Path | None = None, figures: Path | None = None) -> list[Path]:
    """A static HTML copy of the course (nbconvert) that works offline and needs no training: the
    study notebooks as run (their executed copies where `make figures` left them; 01-03 run now
    otherwise, in seconds; 04-08 otherwise show the committed figures) without their answer keys,
    each slider cell with its initial figure, the exercise notebooks as students get them, run, the
    guide (without its maintainer sections) as the index, the notation page and the key equations.
    Formulas are MathML written at build time. Refuses an executed copy that was not run to the end
    (RuntimeError naming it and the command). Returns the written pages."""
    import tempfile

    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    from sera.teaching.release import student_notebook

    source = source or ROOT / "notebooks"
    executed = executed or ROOT / "build" / "notebooks"
    output = output or ROOT / "build" / "site"
    figures = figures or ROOT / "figures"
    (output / "exercises").mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter()
    # a prose check (the asserts behind a notebook's statements) shows its verdict, not its code
    # and papermill's injected parameters (the build machine's paths) are left out: the
    # notebook's own parameters cell shows the values a reader would use
    exporter.register_preprocessor(TagRemovePreprocessor(
        remove_input_tags={PROSE_CHECK}, remove_cell_tags={"injected-parameters"}), enabled=True)
    pages = []
    with tempfile.TemporaryDirectory(prefix="sera-site-") as scratch:
        scratch = Path(scratch)
        for path in notebooks(source):
            nb = student_notebook(_site_copy(path, executed, scratch, figures))  # no answer key
            static_sliders(nb)
            pages.append(output / f"{path.stem}.html")
            pages[-1].write_text(_page(exporter, nb))
        for path in notebooks(source / "exercises"):
            nb = _executed_exercise(path, scratch)
            pages.append(output / "exercises" / f"{path.stem}.html")
            pages[-1].write_text(_page(exporter, nb))
    for name, page in (("README.md", "index.html"), ("NOTATION.md", "NOTATION.html"),
                       ("KEY_EQUATIONS.md", "KEY_EQUATIONS.html")):
        text = (source / name).read_text().replace(".ipynb)", ".html)").replace(".md)", ".html)")
        note = ("\n\n*A static copy that works offline: the explorers of notebooks 01-03 work "
                "here too, one slider at a time (the sliders are live in JupyterLab, where they "
                "combine); a notebook page built without a run says so and shows the committed "
                "figures.*")
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
            guide_for(text, "student") + note)])
        pages.append(output / page)
        pages[-1].write_text(_page(exporter, nb))
    return pages


def gallery(folder: Path | None = None) -> str:
    """The figure table of docs/gallery.md, from the notebooks' metadata and the plotting
    module."""
    import sera.plotting

    rows = ["| figure | what it shows | notebook | drawn by |", "| --- | --- | --- | --- |"]
    for path in notebooks(folder):
        meta = nbformat.read(path, as_version=4).metadata.get("sera", {})
        for figure in meta.get("figures", []):
            name, function = figure["name"], figure["function"]
            doc = getattr(sera.plotting, function).__doc__.strip().split("\n\n")[0]
            doc = " ".join(doc.split())
            if figure.get("takeaway"):  # what to conclude, after what is drawn
                doc += f" **Take-away:** {figure['takeaway']}"
            # paths relative to docs/, where the table lives
            rows.append(f"| <img src=\"../figures/{name}.png\" width=\"220\"> | {doc} | "
                        f"[{path.stem}](../notebooks/{path.name}) | `sera.plotting.{function}` |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=["fast", "long"], default="fast",
                        help="fast: minutes on a CPU; long: more steps, seeds and draws")
    parser.add_argument("--only", default="", help="run notebooks whose name contains this")
    parser.add_argument("--figures", type=Path, default=ROOT / "figures")
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "notebooks")
    parser.add_argument("--jobs", type=machine.jobs_option, default=1,
                        help="notebooks run side by side (each kernel then uses one torch "
                             "thread); auto: as many as the cores and the free memory allow")
    parser.add_argument("--gallery", action="store_true",
                        help="print the figure table of docs/gallery.md")
    parser.add_argument("--strip", action="store_true",
                        help="remove outputs and editor metadata from notebooks/ (no run)")
    parser.add_argument("--site", action="store_true",
                        help="write build/site/: the course as static HTML (no training)")
    args = parser.parse_args(argv)
    if args.site:
        try:
            pages = build_site(args.output)
        except RuntimeError as exc:
            print(f"no site written: {exc}", file=sys.stderr)
            return 1
        print(f"{len(pages)} pages in {pages[-1].parent.resolve()}; open index.html")
        return 0
    if args.gallery:
        print(gallery())
        return 0
    if args.strip:
        changed = [p.name for p in ROOT.joinpath("notebooks").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts and strip(p)]
        print(f"stripped {len(changed)} notebook(s)" + (f": {', '.join(changed)}" if changed
                                                        else ""))
        return 0
    selected = [p for p in notebooks() if args.only in p.name]
    if not selected:
        print(f"no notebook matches {args.only!r} in {ROOT / 'notebooks'}", file=sys.stderr)
        return 2
    return run_all(selected, args)


TRAINING_ORDER = ("06", "07", "04", "05")
"""The order the training notebooks start in: 06 first, since 04 reads back the digits runs and
05 the maze runs that 06 trains (one run store, build/runs; both copy the maze warm-up from the
stored study); with two at a time, 04 and 05 start once 07 and 06 are done (`make figures`
prints each notebook's time) and read them back rather than train them beside it."""


def run_all(selected: list[Path], args) -> int:
    """Run the selected notebooks, `args.jobs` at a time: the ones that train first (the longest),
    each kernel with one torch thread when several run side by side (two notebooks on two cores
    finish sooner than one with two threads). Returns the exit status."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    if args.jobs == "auto":
        args.jobs = machine.auto_jobs(len(selected))
    if args.jobs > 1:
        os.environ["OMP_NUM_THREADS"] = "1"  # the kernels inherit it
    trains = {p: "runs_dir" in nbformat.read(p, as_version=4).cells[2].source for p in selected}
    first = TRAINING_ORDER
    order = sorted(selected, key=lambda p: (
        not trains[p], first.index(p.name[:2]) if p.name[:2] in first else len(first),
        -int(p.name[:2])))
    total = time.perf_counter()
    # what `make test` needs to check these executions rather than repeat them
    listing, fresh = executions.manifest(), executions.trained_nothing_yet()
    source = executions.digest(listing)

    def one(path: Path):
        print(f"{path.name} (profile {args.profile}) ...", flush=True)
        try:
            seconds = run_notebook(path, args.profile, args.figures, args.output)
        except RuntimeError as exc:
            return path, exc
        executions.record(path, output=args.output, figures=args.figures,
                          names=declared_figures(path), profile=args.profile, fresh=fresh,
                          seconds=seconds, source=source, listing=listing)
        print(f"{path.name} done in {seconds:.1f} s, figures: "
              f"{', '.join(declared_figures(path))}", flush=True)
        return path, None

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        failures = [(path, exc) for path, exc in pool.map(one, order) if exc is not None]
    for path, exc in failures:
        print(f"FAILED {exc}", file=sys.stderr)
        print(f"the executed notebook is in {args.output.resolve() / path.name}", file=sys.stderr)
    if failures:
        return 1
    print(f"all {len(selected)} notebooks done in {time.perf_counter() - total:.1f} s "
          f"({args.jobs} at a time); figures in {args.figures.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
