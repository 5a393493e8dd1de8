"""The study notebooks' quoted numbers: every quoted cell is its template filled from the stored
runs (python -m sera.teaching.quotes), no quoted cell writes a decimal by hand, and each field
kind reads the table it names (checked against the tables directly)."""

import nbformat
import pytest

from sera.studies import confirm, diagnosis
from sera.teaching import quotes
from sera.teaching.notebook_files import ROOT, notebooks

QUOTED = [(path, cell) for path in notebooks(ROOT / "notebooks")
          for cell in nbformat.read(path, as_version=4).cells
          if quotes.TAG in cell.metadata.get("tags", [])]


def test_the_results_notebooks_quote_from_the_stored_runs():
    assert {path.name[:2] for path, _ in QUOTED} >= {"05", "07"}
    assert quotes.stale() == [], "run python -m sera.teaching.quotes"


@pytest.mark.parametrize("path, cell", QUOTED, ids=[f"{p.name[:2]}: {c.source[:30]}"
                                                    for p, c in QUOTED])
def test_no_quoted_cell_writes_a_decimal_by_hand(path, cell):
    template, constants = cell.metadata["sera"]["template"], cell.metadata["sera"].get(
        "constants", [])
    assert quotes.FIELD.search(template), path.name
    assert quotes.loose_decimals(template, constants) == [], path.name
    assert all(c in template for c in constants), path.name  # each declared constant is used


@pytest.mark.parametrize("path", [p for p in notebooks(ROOT / "notebooks")
                                  if p.name[:2] in ("05", "07")], ids=lambda p: p.name[:2])
def test_no_prose_check_pins_a_decimal(path):
    checks = [c.source for c in nbformat.read(path, as_version=4).cells
              if "prose-check" in c.metadata.get("tags", [])]
    assert checks and all(quotes.loose_decimals(source) == [] for source in checks)


def test_each_field_kind_reads_its_table():
    table = confirm.compare("maze-n0-8-long").set_index(["arm", "k"])
    row = table.loc[("sera-rate", 32)]
    assert quotes.value("gain", "maze-n0-8-long", "sera-rate", 32) == \
        f"{100 * row['measured']:+.1f}"
    assert quotes.value("interval", "maze-n0-8-long", "sera-rate", 32) == \
        f"{100 * row['low']:+.1f} to {100 * row['high']:+.1f}"
    assert quotes.value("size", "maze-n0-8-long", "sera-rate", 1) == \
        f"{abs(100 * table.loc[('sera-rate', 1), 'measured']):.1f}"
    assert quotes.value("seeds", "maze-n0-8-long", "sera-rate") == f"{int(row['seeds'])}"
    guess = confirm.read_prediction("maze-hard-n0-16").set_index(["arm", "k"])
    assert quotes.value("predicted", "maze-hard-n0-16", "sera-rate", 1) == \
        f"{100 * guess.loc[('sera-rate', 1), 'gain']:+.1f}"  # a point with no runs yet
    drift = diagnosis.drift(confirm.load("math-n0-4-long").metrics).set_index("arm")
    below = round(drift.loc["sera-rate", "below"] * drift.loc["sera-rate", "seeds"])
    assert quotes.value("below", "math-n0-4-long", "sera-rate") == f"{below}"
    assert int(quotes.value("above", "math-n0-4-long", "sera-rate")) == \
        drift.loc["sera-rate", "seeds"] - below
    with pytest.raises(KeyError, match="the stored runs hold no"):
        quotes.fill("{gain|maze-n0-8-long|no-such-arm|32}")
    assert quotes.loose_decimals("{gain|a|b|1} and 0.5, not 12 or x1.5") == ["0.5"]


def test_no_release_carries_a_template(tmp_path):
    # an answer key's template holds the answers: the student copy and the site drop it
    from sera.teaching import release

    for path, cell in QUOTED:
        given = release.student_cell(cell)
        assert "sera" not in given.metadata, path.name
        if "### BEGIN SOLUTION" in cell.source:
            assert "BEGIN SOLUTION" not in str(given), path.name


def test_stripping_a_notebook_keeps_its_templates(tmp_path):
    # make figures strips every notebook it runs; a quoted cell's template must survive it
    from sera.teaching.notebook_files import strip

    path = next(p for p, _ in QUOTED)
    copy = tmp_path / path.name
    copy.write_text(path.read_text())
    strip(copy)
    kept = [c for c in nbformat.read(copy, as_version=4).cells
            if quotes.TAG in c.metadata.get("tags", [])]
    assert kept and all("template" in c.metadata.get("sera", {}) for c in kept)
