"""The math task: readers, the math-verify reward, the generated set, and the task on token ids."""

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from sera.tasks import math as task_math

GSM8K_ROWS = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as "
                 "many clips in May. How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = "
               "<<48+24=72>>72 clips altogether in April and May.\n#### 72"},
    {"question": "A shop sells 1,000 pens a day. How many in 2 days?",
     "answer": "1,000 * 2 = <<1000*2=2000>>2,000\n#### 2,000"},
]


def _maxrl_frame():
    return pd.DataFrame({
        "data_source": ["openai/gsm8k"] * 2,
        "prompt": [[{"role": "user", "content": "What is 2 + 3?" + task_math.INSTRUCTION}],
                   [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is 10 / 4?"}]],
        "reward_model": [{"style": "rule", "ground_truth": "5"},
                         {"style": "rule", "ground_truth": "2.5"}]})


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_reads_gsm8k_files(tmp_path, suffix):
    path = tmp_path / f"train{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in GSM8K_ROWS))
    elif suffix == ".json":
        path.write_text(json.dumps(GSM8K_ROWS))
    else:
        pd.DataFrame(GSM8K_ROWS).to_parquet(path)
    table = task_math.read(path)
    assert list(table["answer"]) == ["72", "2000"]
    first = table["messages"].iloc[0]
    assert first == [{"role": "user", "content": GSM8K_ROWS[0]["question"]
                      + " Let's think step by step and output the final answer within "
                        "\\boxed{}."}]
    solution = table["solution"].iloc[0]
    assert "<<" not in solution and solution.endswith("\\boxed{72}.")
    assert task_math.reward(solution, "72") == 1.0


def test_reads_maxrl_parquet(tmp_path):
    path = tmp_path / "train.parquet"
    _maxrl_frame().to_parquet(path)
    table = task_math.read(path)
    assert list(table["answer"]) == ["5", "2.5"]
    assert table["messages"].iloc[1][0] == {"role": "system", "content": "Be brief."}
    assert table["solution"].isna().all()


def test_read_errors_name_the_path_and_the_field(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "none.jsonl"))):
        task_math.read(tmp_path / "none.jsonl")
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl.*'answer'"):
        task_math.read(path)
    path.write_text(json.dumps({"question": "q", "answer": "no marker"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl.*'answer'.*####"):
        task_math.read(path)
    frame = _maxrl_frame().drop(columns="reward_model")
    frame.to_parquet(tmp_path / "m.parquet")
    with pytest.raises(ValueError, match=r"m.parquet.*'reward_model'"):
        task_math.read(tmp_path / "m.parquet")
    frame = _maxrl_frame()
    frame["reward_model"] = [{"style": "rule", "ground_truth": "5"}, {"style": "rule"}]
    frame.to_parquet(tmp_path / "m.parquet")
    with pytest.raises(ValueError, match=r"m.parquet: row 1 has no reward_model.ground_truth"):
        task_math.read(tmp_path / "m.parquet")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="x.csv"):
        task_math.read(tmp_path / "x.csv")


@pytest.mark.parametrize("response, answer, expected", [
    ("So she has \\boxed{72} clips.", "72", 1.0),
    ("48 + 24 = 72. The answer is 72", "72", 1.0),  # un-boxed final number counts
    ("\\boxed{2,000}", "2000", 1.0),
    ("\\boxed{72.0}", "72", 1.0),
    ("\\boxed{\\frac{5}{2}}", "2.5", 1.0),
    ("\\boxed{71}", "72", 0.0),
    ("The answer is \\boxed{72", "72", 0.0),  # unbalanced: no boxed answer, and 72 is not last
    ("", "72", 0.0),
    ("\\boxed{\\boxed{72}}", "72", 1.0),
])
def test_reward(response, answer, expected):
    assert task_math.reward(response, answer) == expected


GARBAGE = ["}}}{{{", "\\boxed{", "\\boxed{}", "\\frac{1}{0}", "\x00\xff\ud800", "9" * 20_000,
           "\\boxed{10^{10^{10^{10}}}}", "\\boxed{(10^{10})!}", "\\boxed{2^{99999999}}",
           "\\boxed{\\binom{10^9}{10^5}}", "\\boxed{" * 300 + "1" + "}" * 300,
           "$$\\begin{pmatrix}1&2\\end{pmatrix}$$", "\\boxed{x = }", "nan", "inf", "-0"]


def test_reward_never_raises_and_never_hangs_in_threads():
    rng = np.random.default_rng(0)
    alphabet = list("0123456789{}\\^_!+-*/()=., boxedfrac$")
    noise = ["".join(rng.choice(alphabet, size=int(rng.integers(1, 60)))) for _ in range(200)]
    cases = [(text, answer) for text in GARBAGE + noise for answer in ("72", "1e400")]
    with ThreadPoolExecutor(4) as pool:  # no signal-based timeouts off the main thread
        scores = list(pool.map(lambda c: task_math.reward(*c), cases))
    assert set(scores) <= {0.0, 1.0}
    assert all(score == 0.0 for score in scores[:2 * len(GARBAGE)])
    assert threading.current_thread() is threading.main_thread()
    assert [task_math.reward(t, "72") for t in GARBAGE] == [0.0] * len(GARBAGE)


def test_generated_problems_are_seeded_distinct_and_solved():
    train, val = task_math.generated_splits(200, 50, seed=3, steps=3, max_number=12)
    again, _ = task_math.generated_splits(200, 50, seed=3, steps=3, max_number=12)
    pd.testing.assert_frame_equal(train, again)
    assert not set(train["question"]) & set(val["question"])
    assert train["question"].is_unique
    for question, answer in zip(train["question"], train["answer"], strict=True):
        lines = answer.split("\n")
        assert len(lines) == 3 + 2  # the start, one line per step, the result
        value = int(re.search(r"has (\d+)", question).group(1))
        for line in lines[1:-1]:  # each line's arithmetic is right and chains
            left, result = line.rstrip(".").split(" = ")
            a, op, k = left.split()
            assert int(a) == value
            value = {"+": int(a) + int(k), "-": int(a) - int(k), "*": int(a) * int(k)}[op]
            assert value == int(result) >= 0
        assert task_math.ground_truth(answer) == str(value)
    with pytest.raises(ValueError, match="distinct"):
        task_math.generate(10_000, steps=1, max_number=2)


def test_a_larger_final_set_keeps_the_splits_and_adds_unseen_problems():
    # n_final extends the held-out set without moving the training problems: the 40 held-out
    # problems come first, then problems drawn after the 200 training ones, none seen in either
    train, val = task_math.generated_splits(200, 40, seed=5, steps=2, max_number=6)
    final = task_math.generated_final(200, 40, 150, seed=5, steps=2, max_number=6)
    assert len(final) == 150 and final["question"].is_unique
    pd.testing.assert_frame_equal(final.iloc[:40], val)
    assert not set(final["question"]) & set(train["question"])
    longer, _ = task_math.generated_splits(200, 40, seed=5, steps=2, max_number=6)
    pd.testing.assert_frame_equal(longer, train)
    # brute force: the same problems as drawing everything at once and setting the split aside
    everything = task_math.generate(350, seed=5, steps=2, max_number=6)
    assert list(final["question"][40:]) == list(everything["question"][240:])
    with pytest.raises(ValueError, match="at least n_val"):
        task_math.generated_final(200, 40, 39)


def test_generated_set_round_trips_through_the_gsm8k_reader(tmp_path):
    train, _ = task_math.generated_splits(20, 5, seed=0)
    table = task_math.read(task_math.write_jsonl(train, tmp_path / "train.jsonl"))
    assert list(table["answer"]) == [task_math.ground_truth(a) for a in train["answer"]]
    assert all(task_math.reward(s, a) == 1.0
               for s, a in zip(table["solution"], table["answer"], strict=True))


@pytest.fixture(scope="module")
def task():
    train, val = task_math.generated_splits(64, 16, seed=1)
    train, val = task_math.as_problems(train), task_math.as_problems(val)
    texts = [m[0]["content"] for m in train["messages"]] + list(train["solution"])
    return task_math.MathTask(train, val, task_math.build_tokenizer(texts))


def test_task_rewards_token_ids_and_zeroes_truncated_responses(task):
    answer = task.answers([0])[0]
    assert answer[-1] == task.stop_token_id
    assert task.text(answer) == task.train["solution"].iloc[0]
    assert task.reward("train", 0, answer) == 1.0
    assert task.reward("train", 0, answer[:-1]) == 0.0  # cut at the length limit
    assert task.reward("train", 0, []) == 0.0
    wrong = [i for i in range(1, 64) if task.train["answer"].iloc[i]
             != task.train["answer"].iloc[0]][0]
    assert task.reward("train", wrong, answer) == 0.0


def test_tokenizer_spells_numbers_digit_by_digit(task):
    tokenizer = task.tokenizer
    pieces = tokenizer.convert_ids_to_tokens(tokenizer("1234 + 56")["input_ids"])
    assert [p for p in pieces if p.strip("Ġ").isdigit()] == ["1", "2", "3", "4", "5", "6"]
    text = "Ava has 12 coins.\n12 + 7 = 19.\nThe final answer is \\boxed{19}."
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_prompt_goes_through_the_chat_template_when_there_is_one(task):
    tokenizer = task.tokenizer
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    plain = task_math.prompt_ids(tokenizer, messages)
    assert tokenizer.decode(plain) == "What is 2 + 3?"
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
                               "{% endfor %}{% if add_generation_prompt %}<|assistant|>"
                               "{% endif %}")
    try:
        templated = task_math.prompt_ids(tokenizer, messages)
    finally:
        tokenizer.chat_template = None
    assert tokenizer.decode(templated) == "<|user|>What is 2 + 3?<|assistant|>"
