"""Self-check quizzes: a few multiple-choice questions per study notebook, in a markdown cell at
the notebook's end, after the review questions they would otherwise give away. The questions live
in notebooks/quizzes.toml; this module writes them into the notebooks.

    python -m sera.teaching.quizzes          # write the quiz cells
    python -m sera.teaching.quizzes --check  # exit 1 when a notebook's quiz is out of date

Each choice is an HTML <details> block, which JupyterLab, nbconvert's pages (the static site) and
nbgrader's releases all show folded with no kernel and no script: the reader commits to a choice
by opening it and reads the reply to that choice, "Right." with why, or "Not this one." with
what the choice gets wrong. The quizzes are for self-study; the review questions are graded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from sera import _toml
from sera.teaching.notebook_files import ROOT, notebooks

QUIZ_FILE = ROOT / "notebooks" / "quizzes.toml"
TAG = "quiz"
LETTERS = "abcd"


def load(path: Path | None = None) -> list[dict]:
    """The questions, each with notebook, question, choices, answer (a letter), why, replies (one
    per choice, "" for the right one) and an optional check; ValueError for a question whose
    answer is not one of its choices, or whose replies do not answer each wrong choice."""
    questions = _toml.load(path or QUIZ_FILE)["quiz"]
    for q in questions:
        letters = LETTERS[:len(q["choices"])]
        where = f"notebook {q['notebook']} ({q['question'][:60]})"
        if q["answer"] not in letters:
            raise ValueError(f"{where}: answer {q['answer']!r} is not one of {list(letters)}")
        replies = q.get("replies", [])
        if len(replies) != len(letters) or any(
                bool(reply) == (letter == q["answer"])
                for letter, reply in zip(letters, replies, strict=True)):
            raise ValueError(f"{where}: replies needs one reply per wrong choice and \"\" for "
                             f"the right one ({len(letters)} entries)")
    return questions


def cell_source(questions: list[dict]) -> str:
    """The markdown of one notebook's quiz."""
    parts = ["## Check yourself\n\nPick an answer and open it: each choice says whether it is "
             "right and why. Nothing here is graded."]
    for number, q in enumerate(questions, 1):
        choices = [f"<details><summary>({letter}) {choice}</summary>\n\n"
                   + (f"**Right.** {q['why']}" if letter == q["answer"] else
                      f"**Not this one.** {reply}") + "\n\n</details>"
                   for letter, choice, reply in zip(LETTERS, q["choices"], q["replies"],
                                                    strict=False)]
        parts.append(f"**{number}.** {q['question']}\n\n" + "\n".join(choices))
    return "\n\n".join(parts)


def with_quiz(nb, questions: list[dict]) -> bool:
    """Put the quiz cell at the notebook's end, after its review questions and their answer
    cell (replacing an older one), in place; True when the notebook changed."""
    old = [i for i, c in enumerate(nb.cells) if TAG in c.metadata.get("tags", [])]
    source = cell_source(questions)
    if old == [len(nb.cells) - 1] and nb.cells[old[0]].source == source:
        return False
    nb.cells = [c for c in nb.cells if TAG not in c.metadata.get("tags", [])]
    cell = nbformat.v4.new_markdown_cell(source, metadata={"tags": [TAG]})
    cell.id = f"quiz-{nb.cells[0].get('id', 'nb')[:8]}"
    nb.cells.append(cell)
    return True


def write(check: bool = False, source: Path | None = None) -> list[Path]:
    """Write (or with check=True only find) the study notebooks whose quiz is out of date."""
    from sera.teaching.notebook_files import strip

    questions = load()
    stale = []
    for path in notebooks(source or ROOT / "notebooks"):
        nb = nbformat.read(path, as_version=4)
        mine = [q for q in questions if q["notebook"] == path.name[:2]]
        if mine and with_quiz(nb, mine):
            stale.append(path)
            if not check:
                nbformat.write(nb, path)
                strip(path)
    return stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale notebooks")
    args = parser.parse_args(argv)
    stale = write(check=args.check)
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path.name}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
