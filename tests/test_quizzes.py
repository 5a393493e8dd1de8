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


def test_each_choice_folds_open_to_its_own_reply():
    for q in QUESTIONS:
        source = quizzes.cell_source([q])
        folds = source.split("<details>")[1:]
        assert len(folds) == len(q["choices"]) and source.index(q["question"]) < source.index(
            "<details>")
        for letter, choice, reply, fold in zip("abcd", q["choices"], q["replies"], folds,
                                               strict=False):
            assert fold.startswith(f"<summary>({letter}) {choice}</summary>")
            shown = fold.split("</summary>", 1)[1]
            if letter == q["answer"]:
                assert "**Right.**" in shown and q["why"] in shown
            else:  # a reply of its own, not the right answer's explanation
                assert "**Not this one.**" in shown and reply in shown and q["why"] not in shown


def test_the_quiz_comes_after_the_graded_review_questions():
    import nbformat

    for path in notebooks(ROOT / "notebooks"):
        cells = nbformat.read(path, as_version=4).cells
        review = max(i for i, c in enumerate(cells) if "## Review questions" in c.source)
        quiz = [i for i, c in enumerate(cells) if quizzes.TAG in c.metadata.get("tags", [])]
        assert quiz == [len(cells) - 1] and review < quiz[0], path.name


def test_a_question_whose_answer_is_not_a_choice_is_refused(tmp_path):
    path = tmp_path / "quizzes.toml"
    path.write_text('[[quiz]]\nnotebook = "01"\nquestion = "?"\nchoices = ["x", "y"]\n'
                    'answer = "c"\nwhy = "."\nreplies = ["no", ""]\n')
    with pytest.raises(ValueError, match="'c' is not one of"):
        quizzes.load(path)
    for replies in ('["no"]', '["", ""]', '["no", "yes"]', '["", "no"]'):  # answer "b"
        path.write_text('[[quiz]]\nnotebook = "01"\nquestion = "?"\nchoices = ["x", "y"]\n'
                        f'answer = "b"\nwhy = "."\nreplies = {replies}\n')
        with pytest.raises(ValueError, match="one reply per wrong choice"):
            quizzes.load(path)
