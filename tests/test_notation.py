"""One notation: the symbols notebooks/NOTATION.md defines for the clashes it names (K, c, q,
kappa) are used with that meaning in every notebook's text and code."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTATION = (ROOT / "notebooks" / "NOTATION.md").read_text()
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("[0-9][0-9]_*.ipynb"))


def _rows() -> dict[str, str]:
    """NOTATION's table: symbol cell -> meaning cell."""
    rows = {}
    for line in NOTATION.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] not in ("symbol", "---"):
            rows[cells[0]] = cells[1]
    return rows


def _prose(source: str) -> str:
    """A markdown cell without its code spans and formulas."""
    source = re.sub(r"`[^`]*`", "", source)
    return re.sub(r"\$\$.*?\$\$|\$[^$]*\$", "", source, flags=re.S)


def test_notation_defines_each_symbol_once_with_the_meaning_the_test_checks():
    rows = _rows()
    assert "successes" in rows["r_i, c"] and "correct" in rows["r_i, c"]
    assert "K samples" in rows["Pass@K, n"] and "c correct" in rows["Pass@K, n"]
    assert "common fidelity" in rows["κ*"]
    assert rows["q, B"].startswith("a prompt")
    assert "κ(p, N)" in rows and not any("kappa" in symbol for symbol in rows)
    assert not any(re.search(r"\bK\b", symbol) for symbol in rows if symbol != "Pass@K, n")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_uses_the_notation(path):
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        text = cell.source
        where = f"{path.name} cell {i}"
        # K is Pass@K's sample count, never a group's successes (those are c).
        assert not re.search(r"\bK successes|r_i\s*/\s*K\b|\bK\s*/\s*N\b|\bN\s*/\s*K\b|"
                             r"\(N - K\)|when K = 0|K ~ Binomial", text), where
        # c is a number of correct responses, never the common fidelity (that is κ*).
        assert not re.search(r"\bc = 1 - e|level c\b|κ\(p, N\) = c\b|log\(1 ?- ?c\)", text), where
        # q is a prompt, never 1 - p.
        assert not re.search(r"\bq = 1 - p|\bq\s*=\s*1\s*-\s*p\b", text), where
        # κ in text, \kappa in formulas, sera.kappa in code: never the bare word in prose.
        if cell.cell_type == "markdown":
            assert not re.search(r"\bkappa\b", _prose(text)), where


def test_the_key_equations_page_names_real_functions_and_its_step_runs():
    # notebooks/KEY_EQUATIONS.md: every `sera.` name of its table exists, and its one-step
    # snippet runs as written and spends the budget exactly.
    import sera

    page = (ROOT / "notebooks" / "KEY_EQUATIONS.md").read_text()
    names = set(re.findall(r"`(sera\.[A-Za-z_.]+)", page))
    assert {"sera.kappa", "sera.allocate", "sera.SuccessHistory", "sera.policy_loss"} <= names
    for name in names:
        target = sera
        for part in name.split(".")[1:]:
            target = getattr(target, part)  # AttributeError names the missing function
    snippet = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(snippet) == 1
    namespace: dict = {}
    exec(snippet[0], namespace)  # noqa: S102 - the page's own snippet
    plan = namespace["plan"]
    assert plan.counts.sum() == 24 and plan.level > 0
    # the page's counts rule is the one SuccessHistory applies: 1 success in 8 -> 2 / 10
    assert namespace["p_hat"][1] == (1 + 1) / (8 + 2)
