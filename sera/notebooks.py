"""Run the notebooks in order with papermill and regenerate every figure: `make figures`.

    python -m sera.notebooks [--profile fast|long] [--only 02] [--figures DIR]
    python -m sera.notebooks --strip      # remove outputs before committing (make clean-notebooks)
    python -m sera.notebooks --site       # static HTML of the executed notebooks (make site)

Executed copies go to build/notebooks/ (outside git); figures go to figures/. Each notebook
declares the figures it writes in its metadata (metadata.sera.figures: name and the
sera.plotting function that draws it); a notebook that fails,
or that does not write what it declares, stops the run with the notebook and cell named.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path.cwd()


def notebooks(folder: Path | None = None) -> list[Path]:
    """The numbered notebooks, in order."""
    folder = folder or ROOT / "notebooks"
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


def declared_figures(path: Path) -> list[str]:
    """Figure names (file stems) a notebook promises to write."""
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
        papermill.execute_notebook(str(path), str(output / path.name), parameters=parameters,
                                   cwd=str(path.parent), progress_bar=False, kernel_name="python3",
                                   log_output=False)
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


# What a stored notebook may keep: outputs, execution counts and editor metadata go.
KEPT_NOTEBOOK_METADATA = {"kernelspec", "language_info", "sera"}
KEPT_CELL_METADATA = {"tags"}


def strip(path: Path) -> bool:
    """Remove outputs, execution counts and machine-specific metadata in place (what JupyterLab
    saves while a notebook is used); True when the file changed."""
    before = path.read_text()
    nb = nbformat.reads(before, as_version=4)
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in KEPT_NOTEBOOK_METADATA}
    for cell in nb.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in KEPT_CELL_METADATA}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    after = nbformat.writes(nb) + "\n"
    if after != before:
        path.write_text(after)
    return after != before


def build_site(executed: Path | None = None, output: Path | None = None,
               source: Path | None = None) -> list[Path]:
    """A static HTML copy of the course (nbconvert): the executed notebooks with their figures,
    the exercise notebooks as students get them, the guide and the notation page as the index
    and a page of their own. Returns the written pages."""
    from nbconvert import HTMLExporter

    source = source or ROOT / "notebooks"
    executed = executed or ROOT / "build" / "notebooks"
    output = output or ROOT / "build" / "site"
    (output / "exercises").mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter()
    pages = []
    for path in notebooks(source):
        run = executed / path.name
        body, _ = exporter.from_filename(str(run if run.exists() else path))
        pages.append(output / f"{path.stem}.html")
        pages[-1].write_text(body)
    from sera.release import student_cell

    for path in sorted((source / "exercises").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)  # as students get it: no solutions
        nb.cells = [student_cell(cell) for cell in nb.cells]
        body, _ = exporter.from_notebook_node(nb)
        pages.append(output / "exercises" / f"{path.stem}.html")
        pages[-1].write_text(body)
    for name, page in (("README.md", "index.html"), ("NOTATION.md", "NOTATION.html")):
        text = (source / name).read_text().replace(".ipynb)", ".html)").replace(".md)", ".html)")
        note = ("\n\n*A static copy: the sliders of notebooks 01-03 need a live kernel "
                "(JupyterLab); everything else is here as it ran.*")
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text + note)])
        body, _ = exporter.from_notebook_node(nb)
        pages.append(output / page)
        pages[-1].write_text(body)
    return pages


def gallery(folder: Path | None = None) -> str:
    """The README's figure table, built from the notebooks' metadata and the plotting module."""
    import sera.plotting

    rows = ["| figure | what it shows | notebook | drawn by |", "| --- | --- | --- | --- |"]
    for path in notebooks(folder):
        meta = nbformat.read(path, as_version=4).metadata.get("sera", {})
        for figure in meta.get("figures", []):
            name, function = figure["name"], figure["function"]
            doc = getattr(sera.plotting, function).__doc__.strip().split("\n\n")[0]
            doc = " ".join(doc.split())
            rows.append(f"| <img src=\"figures/{name}.png\" width=\"220\"> | {doc} | "
                        f"[{path.stem}](notebooks/{path.name}) | `sera.plotting.{function}` |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=["fast", "long"], default="fast",
                        help="fast: minutes on a CPU; long: more steps, seeds and draws")
    parser.add_argument("--only", default="", help="run notebooks whose name contains this")
    parser.add_argument("--figures", type=Path, default=ROOT / "figures")
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "notebooks")
    parser.add_argument("--gallery", action="store_true", help="print the README figure table")
    parser.add_argument("--strip", action="store_true",
                        help="remove outputs and editor metadata from notebooks/ (no run)")
    parser.add_argument("--site", action="store_true",
                        help="write build/site/: static HTML of the executed notebooks")
    args = parser.parse_args(argv)
    if args.site:
        pages = build_site(args.output)
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
    total = time.perf_counter()
    for i, path in enumerate(selected, 1):
        print(f"[{i}/{len(selected)}] {path.name} (profile {args.profile}) ...", flush=True)
        try:
            seconds = run_notebook(path, args.profile, args.figures, args.output)
        except RuntimeError as exc:
            print(f"FAILED {exc}", file=sys.stderr)
            print(f"the executed notebook is in {args.output.resolve() / path.name}",
                  file=sys.stderr)
            return 1
        print(f"[{i}/{len(selected)}] {path.name} done in {seconds:.1f} s, figures: "
              f"{', '.join(declared_figures(path))}", flush=True)
    print(f"all {len(selected)} notebooks done in {time.perf_counter() - total:.1f} s; "
          f"figures in {args.figures.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
