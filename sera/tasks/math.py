"""Math word problems with a verifiable reward: GSM8K and sets made like it.

- `read(path)`: GSM8K files (jsonl, json or parquet with `question` and `answer` ending in
  `#### number`) and the parquet files MaxRL's preprocessors write (a chat `prompt` and
  `reward_model.ground_truth`), as one table: messages, ground truth, worked solution.
- `reward(response, answer)`: 1.0 when math-verify finds the response's final answer equal to the
  ground truth, as MaxRL's GSM8K reward decides it; never raises, safe in worker threads.
- `generate(n, seed, ...)`: multi-step arithmetic word problems from templates, with worked
  solutions ending in \\boxed{answer}, written in GSM8K's format by `write_jsonl`.
- `tiny_chat_model(texts, folder)`: a one-layer chat model and its tokenizer, saved for a
  framework to load (the plug-ins' CPU tests).
- `MathTask`: what the sequence trainer needs (token-id prompts through the chat template when
  the tokenizer has one, the reward on token ids, reference answers for a warm-up).

Used by sera.trainers.math and notebooks/07_math_reasoning.ipynb.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from sera import _checks

INSTRUCTION = " Let's think step by step and output the final answer within \\boxed{}."
"""Appended to every question (the SERA paper's and MaxRL's GSM8K prompt)."""

COLUMNS = ("messages", "answer", "solution")


# ----------------------------------------------------------------------------- reading files

def ground_truth(answer: str) -> str:
    """The number after GSM8K's `####`, commas removed."""
    if "####" not in answer:
        raise ValueError(f"a GSM8K answer ends in '#### number'; got {answer[-60:]!r}")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def worked_solution(answer: str) -> str:
    """A GSM8K answer as a response: the reasoning without calculator marks `<<...>>`, then the
    final number boxed."""
    reasoning = re.sub(r"<<[^>]*>>", "", answer.rsplit("####", 1)[0]).strip()
    return f"{reasoning}\nThe final answer is \\boxed{{{ground_truth(answer)}}}."


def load_file(path: Path) -> pd.DataFrame:
    """The raw table of a local jsonl, json or parquet file; a missing file raises an error."""
    if not path.exists():
        raise FileNotFoundError(f"no data file at {path} (GSM8K jsonl/parquet or a MaxRL "
                                f"parquet; download it and pass its path)")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return pd.read_parquet(path)
    if suffix in (".jsonl", ".json"):
        lines = suffix == ".jsonl" or path.read_text()[:1] != "["
        return pd.read_json(path, lines=lines, dtype=False)
    raise ValueError(f"{path}: expected a .jsonl, .json or .parquet file")


def read(path) -> pd.DataFrame:
    """Problems from a local GSM8K or MaxRL file as a table with columns messages (the chat to
    send: one user turn), answer (the ground truth) and solution (a worked solution, or None).
    A missing file or field raises an error naming both."""
    path = Path(path)
    return read_frame(load_file(path), path)


def read_frame(frame: pd.DataFrame, path) -> pd.DataFrame:
    """`read` on a table already loaded from `path` (named in errors)."""
    if "prompt" in frame.columns or "reward_model" in frame.columns:  # MaxRL / verl layout
        for field in ("prompt", "reward_model"):
            if field not in frame.columns:
                raise ValueError(f"{path}: a MaxRL file needs the field {field!r} "
                                 f"(has {list(frame.columns)})")
        truths = []
        for row, model in enumerate(frame["reward_model"]):
            if not isinstance(model, dict) or model.get("ground_truth") is None:
                raise ValueError(f"{path}: row {row} has no reward_model.ground_truth")
            truths.append(str(model["ground_truth"]))
        messages = [[{"role": str(m["role"]), "content": str(m["content"])} for m in chat]
                    for chat in frame["prompt"]]
        return pd.DataFrame({"messages": messages, "answer": truths, "solution": None})
    for field in ("question", "answer"):
        if field not in frame.columns:
            raise ValueError(f"{path}: a GSM8K file needs the field {field!r} "
                             f"(has {list(frame.columns)})")
    messages = [[{"role": "user", "content": q + INSTRUCTION}] for q in frame["question"]]
    try:
        truths = [ground_truth(a) for a in frame["answer"]]
    except ValueError as exc:
        raise ValueError(f"{path}: field 'answer': {exc}") from None
    return pd.DataFrame({"messages": messages, "answer": truths,
                         "solution": [worked_solution(a) for a in frame["answer"]]})


# ----------------------------------------------------------------------------- the reward

_config_lock = threading.Lock()
_configs = None


def _extraction():
    """math-verify's extraction settings of MaxRL's reward: LaTeX for the gold, expression and
    LaTeX for the response (so an un-boxed final number counts too)."""
    global _configs
    with _config_lock:
        if _configs is None:
            # It logs a warning on every call without timeouts, and on every timeout.
            logging.getLogger("math_verify").setLevel(logging.ERROR)
            from math_verify import ExprExtractionConfig, LatexExtractionConfig

            _configs = ((LatexExtractionConfig(),),
                        (ExprExtractionConfig(), LatexExtractionConfig()))
    return _configs


def reward(response: str, answer: str) -> float:
    """1.0 if math-verify finds the response's answer equal to `answer`, else 0.0; anything it
    cannot parse scores 0.0. Its timeouts use signals, which work only in the main thread, so
    other threads run without them."""
    from math_verify import parse, verify

    gold_config, pred_config = _extraction()
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse("\\boxed{" + str(answer) + "}", gold_config, parsing_timeout=timeout)
        pred = parse(str(response), pred_config, parsing_timeout=timeout)
        if not gold or not pred or not all(map(_tame, pred)):
            return 0.0
        return 1.0 if verify(gold, pred, timeout_seconds=timeout) else 0.0
    except Exception:  # noqa: BLE001 - a reward scores text it cannot read as wrong
        return 0.0


LIMIT = 10_000
"""Largest exponent or factorial argument a response's answer may carry (larger ones score 0)."""


def _tame(value) -> bool:
    """False for an answer sympy could spend minutes evaluating: a power with an exponent above
    LIMIT or a tower of integer powers, a factorial or binomial of such a number. Checked before
    the comparison, which has no timeout outside the main thread."""
    import sympy

    def huge(expr) -> bool:
        if expr.is_Number:
            return abs(expr) > LIMIT
        return any(isinstance(node, sympy.Pow) and node.base.is_Integer and node.exp.is_Integer
                   and node.exp >= 2 for node in sympy.preorder_traversal(expr))

    if not isinstance(value, sympy.Basic):
        return True
    for node in sympy.preorder_traversal(value):
        if isinstance(node, sympy.Pow) and huge(node.exp):
            return False
        if isinstance(node, sympy.factorial | sympy.factorial2 | sympy.subfactorial
                      | sympy.binomial) and any(huge(arg) for arg in node.args):
            return False
    return True


# ----------------------------------------------------------------------------- generated set

NAMES = ("Ava", "Ben", "Cleo", "Dan", "Eli", "Fay", "Gus", "Ida", "Jon", "Kim", "Leo", "Mia",
         "Ned", "Ola", "Pia", "Raj", "Sam", "Tess", "Uma", "Vic")
ITEMS = ("apples", "books", "coins", "cards", "eggs", "pens", "shells", "stamps", "marbles",
         "cookies", "stickers", "plums")
# Each step: a sentence of the story, the arithmetic it asks for, and whether it may apply.
STEPS = {
    "add": ("{name} finds {k} more {item}.", "{a} + {k} = {r}"),
    "buy": ("Then {name} buys {k} more {item}.", "{a} + {k} = {r}"),
    "give": ("{name} gives {k} {item} to a friend.", "{a} - {k} = {r}"),
    "lose": ("{name} loses {k} {item}.", "{a} - {k} = {r}"),
    "times": ("Then the number of {item} becomes {k} times as many.", "{a} * {k} = {r}"),
}


def _problem(rng: np.random.Generator, steps: int, max_number: int) -> dict:
    name = NAMES[rng.integers(len(NAMES))]
    item = ITEMS[rng.integers(len(ITEMS))]
    amount = int(rng.integers(1, max_number + 1))
    story = [f"{name} has {amount} {item}."]
    work = [f"{name} starts with {amount} {item}."]
    for _ in range(steps):
        choices = ["add", "buy"] + (["give", "lose"] if amount > 1 else []) \
            + (["times"] if amount <= max_number else [])
        kind = choices[rng.integers(len(choices))]
        if kind == "times":
            k = int(rng.integers(2, 4))
            result = amount * k
        elif kind in ("give", "lose"):
            k = int(rng.integers(1, amount))
            result = amount - k
        else:
            k = int(rng.integers(1, max_number + 1))
            result = amount + k
        sentence, arithmetic = STEPS[kind]
        story.append(sentence.format(name=name, k=k, item=item))
        work.append(arithmetic.format(a=amount, k=k, r=result) + ".")
        amount = result
    question = " ".join(story) + f" How many {item} does {name} have now?"
    return {"question": question,
            "answer": "\n".join(work) + f"\n#### {amount}"}


def generate(n: int, seed: int = 0, steps: int = 2, max_number: int = 9) -> pd.DataFrame:
    """n distinct GSM8K-style problems (columns question and answer, as in GSM8K's files), each
    a story of `steps` operations (add, subtract, multiply by 2 or 3) on numbers up to
    `max_number`: more steps and larger numbers are harder."""
    n = _checks.integer(n, "n", minimum=1)
    steps = _checks.integer(steps, "steps", minimum=1)
    max_number = _checks.integer(max_number, "max_number", minimum=2)
    rng = np.random.default_rng(seed)
    seen, rows = set(), []
    for _ in range(50 * n + 1000):
        row = _problem(rng, steps, max_number)
        if row["question"] not in seen:
            seen.add(row["question"])
            rows.append(row)
            if len(rows) == n:
                return pd.DataFrame(rows)
    raise ValueError(f"only {len(rows)} distinct problems with steps={steps}, "
                     f"max_number={max_number}; ask for fewer or make them harder")


def generated_splits(n_train: int, n_val: int, seed: int = 0, steps: int = 2,
                     max_number: int = 9) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, held-out) problem tables, disjoint by question text."""
    frame = generate(n_train + n_val, seed, steps, max_number)
    return frame.iloc[n_val:].reset_index(drop=True), frame.iloc[:n_val].reset_index(drop=True)


def generated_final(n_train: int, n_val: int, n_final: int, seed: int = 0, steps: int = 2,
                    max_number: int = 9) -> pd.DataFrame:
    """n_final held-out problems for a final evaluation: generated_splits' n_val held-out
    problems first, then new ones drawn after its training problems (generate keeps the order
    of what it drew, so those two are the same as generated_splits gives), all distinct."""
    if n_final < n_val:
        raise ValueError(f"n_final ({n_final}) must be at least n_val ({n_val})")
    frame = generate(n_train + n_final, seed, steps, max_number)
    return pd.concat([frame.iloc[:n_val], frame.iloc[n_val + n_train:]], ignore_index=True)


def write_jsonl(frame: pd.DataFrame, path) -> Path:
    """A problem table in GSM8K's jsonl format (one {"question", "answer"} object a line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for question, answer in zip(frame["question"], frame["answer"], strict=True):
            handle.write(json.dumps({"question": question, "answer": answer}) + "\n")
    return path


# ----------------------------------------------------------------------------- the task

def prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The chat through the tokenizer's chat template (with the assistant turn opened), or the
    user text as it is when the tokenizer has no template."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    text = "\n".join(m["content"] for m in messages)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class MathTask:
    """Problem tables as token-id prompts with the math-verify reward. A response that did not
    end with the stop token was cut at the length limit and earns 0, as in MaxRL's GSM8K runs."""

    def __init__(self, train: pd.DataFrame, val: pd.DataFrame, tokenizer,
                 final: pd.DataFrame | None = None):
        """final: the held-out problems of the final evaluation when they are more than val's
        (split "final"); None: the final evaluation reads val."""
        self.tokenizer = tokenizer
        self.train, self.val = as_problems(train), as_problems(val)
        self.train_prompts = [prompt_ids(tokenizer, m) for m in self.train["messages"]]
        self.val_prompts = [prompt_ids(tokenizer, m) for m in self.val["messages"]]
        self.final = None if final is None else as_problems(final)
        self.final_prompts = None if final is None else \
            [prompt_ids(tokenizer, m) for m in self.final["messages"]]
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token to stop responses at")
        self.stop_token_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else tokenizer.eos_token_id)

    def text(self, response: list[int]) -> str:
        return self.tokenizer.decode(response, skip_special_tokens=True)

    def reward(self, split: str, index: int, response: list[int]) -> float:
        if not response or response[-1] != self.stop_token_id:
            return 0.0
        table = {"train": self.train, "val": self.val, "final": self.final}[split]
        return reward(self.text(response), table["answer"].iloc[index])

    def answers(self, indices) -> list[list[int]]:
        """Worked solutions of training problems as token ids, ending with the stop token."""
        solutions = self.train["solution"]
        out = []
        for i in indices:
            if solutions.iloc[i] is None:
                raise ValueError(f"training problem {i} has no worked solution to warm up on")
            ids = self.tokenizer(solutions.iloc[i], add_special_tokens=False)["input_ids"]
            out.append(list(ids) + [self.stop_token_id])
        return out


def as_problems(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as read() returns it (messages, answer, solution): one already in that layout
    as it is, a GSM8K-layout table (question, answer) converted."""
    if set(COLUMNS) <= set(frame.columns):
        return frame.reset_index(drop=True)
    return pd.DataFrame({
        "messages": [[{"role": "user", "content": q + INSTRUCTION}] for q in frame["question"]],
        "answer": [ground_truth(a) for a in frame["answer"]],
        "solution": [worked_solution(a) for a in frame["answer"]]})


def build_tokenizer(texts, vocab_size: int = 320, folder=None):
    """A byte-level BPE tokenizer learned from `texts` (digits kept one per token, so numbers
    are spelled out), as a Hugging Face fast tokenizer that transformers and vLLM load alike;
    saved to folder if given. For the tiny models the CPU study trains."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>",
                                        eos_token="<eos>")
    if folder is not None:
        tokenizer.save_pretrained(str(folder))
    return tokenizer


PLAIN_CHAT = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
"""A chat template that joins the messages' texts, for the tiny models."""


def tiny_chat_model(texts, folder, max_positions: int = 512):
    """A one-layer chat model (sera.models.decoder, randomly initialised) and its tokenizer
    learned from `texts` (build_tokenizer, PLAIN_CHAT), saved to folder for a framework to load
    from a path: what the verl and TRL plug-ins' CPU tests and the GPU check's verl part launch
    without downloading a model. Returns the tokenizer."""
    from sera.models import decoder

    tokenizer = build_tokenizer(texts, vocab_size=300, folder=folder)
    tokenizer.chat_template = PLAIN_CHAT
    tokenizer.save_pretrained(str(folder))
    decoder(len(tokenizer), width=32, layers=1, heads=2, kv_heads=1, max_positions=max_positions,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id).save_pretrained(str(folder))
    return tokenizer
