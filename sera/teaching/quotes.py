"""Numbers the study notebooks' prose quotes from the stored runs, filled in from the tables.

A markdown cell tagged `quoted` keeps its text as a template in `metadata["sera"]["template"]`,
with a field wherever it quotes a stored result; the cell's source is the template filled from
data/study/. A field is `{kind|point|arm|k}` (k where the kind has one):

    gain        the arm's paired gain over MaxRL in points, signed       {gain|maze-n0-8|grpo|32}
    size        the same without its sign ("4.1 points behind")
    interval    its 95% interval over seeds, "-6.1 to -2.2"
    bracket     gain and interval, "-6.6 [-9.8, -3.3]"
    predicted   the simulator's prediction written before the runs, signed
    predicted_size  the same without its sign
    predicted_bracket  the prediction with its interval over the simulator's repetitions
    seeds_needed    the seeds the power calculation asked for, from the same prediction
    seeds       the seeds of the comparison                                {seeds|point|arm}
    below       the arm's seeds whose held-out Pass@1 ended below its start    {below|point|arm}
    above       the rest of its seeds
    start, end  the arm's held-out Pass@1 over its runs' first and last evaluations
    length_start, length_end  the arm's mean response length, in tokens, over the same windows

    python -m sera.teaching.quotes          # fill every quoted cell from the stored runs
    python -m sera.teaching.quotes --check  # exit 1 when a cell's numbers differ from the runs

tests/test_quotes.py checks the notebooks are filled from the runs as stored and that no quoted
cell holds a decimal number outside a field.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

import nbformat

from sera.teaching.notebook_files import ROOT, notebooks, strip

TAG = "quoted"
FIELD = re.compile(r"\{(\w+)\|([^{}|]+)\|([^{}|]+)(?:\|(\d+))?\}")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+")


@functools.cache
def _compared(point: str):
    from sera.studies import confirm

    return confirm.compare(point).set_index(["arm", "k"])


@functools.cache
def _predicted(point: str):
    from sera.studies import confirm

    return confirm.read_prediction(point).set_index(["arm", "k"])


@functools.cache
def _drift(point: str, metric: str):
    from sera.studies import confirm, diagnosis

    metrics = confirm.load(point).metrics
    if metric == "val_pass":
        return diagnosis.drift(metrics).set_index("arm")
    return diagnosis.drift(metrics, metric, None).set_index("arm")


def _signed(value: float) -> str:
    return f"{100 * value:+.1f}"


def value(kind: str, point: str, arm: str, k: int | None = None) -> str:
    """One field's text (KeyError naming the field when the runs do not hold it)."""
    if kind in ("predicted", "predicted_size", "predicted_bracket", "seeds_needed"):
        row = _predicted(point).loc[(arm, k or 1)]  # written before any run
        return {"predicted": lambda: _signed(float(row["gain"])),
                "predicted_bracket": lambda: f"{_signed(float(row['gain']))} "
                                             f"[{_signed(float(row['low']))}, "
                                             f"{_signed(float(row['high']))}]",
                "predicted_size": lambda: f"{abs(100 * float(row['gain'])):.1f}",
                "seeds_needed": lambda: f"{int(row['seeds_needed'])}"}[kind]()
    if kind in ("gain", "size", "interval", "bracket", "seeds"):
        row = _compared(point).loc[(arm, k or 1)]
        gain, low, high = (float(row[c]) for c in ("measured", "low", "high"))
        return {"gain": lambda: _signed(gain),
                "size": lambda: f"{abs(100 * gain):.1f}",
                "interval": lambda: f"{_signed(low)} to {_signed(high)}",
                "bracket": lambda: f"{_signed(gain)} [{_signed(low)}, {_signed(high)}]",
                "seeds": lambda: f"{int(row['seeds'])}"}[kind]()
    if kind in ("below", "above", "start", "end"):
        row = _drift(point, "val_pass").loc[arm]
        below = round(float(row["below"]) * int(row["seeds"]))
        if kind in ("below", "above"):
            return f"{below if kind == 'below' else int(row['seeds']) - below}"
        return f"{float(row[kind]):.2f}"
    if kind in ("length_start", "length_end"):
        return f"{float(_drift(point, 'response_length').loc[arm, kind.split('_')[1]]):.0f}"
    raise KeyError(f"unknown field kind {kind!r}")


def fill(template: str) -> str:
    """The template with every field replaced by its value from the stored runs."""
    def one(match):
        kind, point, arm, k = match.groups()
        try:
            return value(kind, point, arm, int(k) if k else None)
        except KeyError as exc:
            raise KeyError(f"{match.group(0)}: the stored runs hold no {exc}") from None

    return FIELD.sub(one, template)


def loose_decimals(template: str, constants=()) -> list[str]:
    """Decimal numbers a template writes by hand, outside its fields, other than `constants`
    (a method's fixed numbers a cell declares in metadata["sera"]["constants"], such as the
    power calculation's 2.5 standard errors: not results)."""
    return [x for x in DECIMAL.findall(FIELD.sub("", template)) if x not in constants]


def stale(source: Path | None = None) -> list[Path]:
    """Notebooks with a quoted cell whose text differs from its filled template."""
    return [path for path in notebooks(source or ROOT / "notebooks") if _fill_notebook(path, False)]


def _fill_notebook(path: Path, write: bool) -> bool:
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if TAG in cell.metadata.get("tags", []):
            text = fill(cell.metadata["sera"]["template"])
            if cell.source != text:
                cell.source, changed = text, True
    if changed and write:
        nbformat.write(nb, path)
        strip(path)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale notebooks")
    args = parser.parse_args(argv)
    found = [path for path in notebooks(ROOT / "notebooks")
             if _fill_notebook(path, write=not args.check)]
    for path in found:
        print(f"{'out of date' if args.check else 'filled'}: {path.name}")
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
