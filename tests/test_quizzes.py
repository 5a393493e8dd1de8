"""The self-check quizzes: every study notebook has one, up to date with notebooks/quizzes.toml,
and every answer that is a number or a fact about the package is recomputed here."""

import numpy as np
import pytest
from scipy import stats

import sera
from sera.teaching import quizzes
from sera.teaching.notebook_files import ROOT, notebooks

QUESTIONS = quizzes.load()


def test_every_study_notebook_has_an_up_to_date_quiz():
    studied = {path.name[:2] for path in notebooks(ROOT / "notebooks")}
    assert {q["notebook"] for q in QUESTIONS} == studied
    assert all(sum(q["notebook"] == n for q in QUESTIONS) >= 2 for n in studied)
    assert quizzes.write(check=True) == [], "run python -m sera.teaching.quizzes"


@pytest.mark.parametrize("question", [q for q in QUESTIONS if "check" in q],
                         ids=lambda q: f"{q['notebook']}: {q['question'][:40]}")
def test_each_computed_answer_holds(question):
    assert eval(question["check"], {"np": np, "stats": stats, "sera": sera})  # noqa: S307


def test_the_quiz_cell_shows_each_answer_folded_under_its_question():
    q = QUESTIONS[0]
    source = quizzes.cell_source([q])
    assert source.index(q["question"]) < source.index("<details><summary>Check</summary>")
    assert source.index("<details>") < source.index(q["why"]) < source.index("</details>")
    assert all(f"- ({letter}) {choice}" in source
               for letter, choice in zip("abcd", q["choices"], strict=False))


def test_a_question_whose_answer_is_not_a_choice_is_refused(tmp_path):
    path = tmp_path / "quizzes.toml"
    path.write_text('[[quiz]]\nnotebook = "01"\nquestion = "?"\nchoices = ["x", "y"]\n'
                    'answer = "c"\nwhy = "."\n')
    with pytest.raises(ValueError, match="'c' is not one of"):
        quizzes.load(path)
