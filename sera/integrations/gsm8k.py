"""The math study's success reward (sera.tasks.math.reward: math-verify, MaxRL's extraction) in
the call forms verl and TRL expect. Imports neither framework, so verl can load this file by path
(`reward.custom_reward_function.path`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sera.tasks import math as math_task


def success_rewards(completions, answers) -> list[float]:
    """1.0 where a completion's final answer equals the ground truth, else 0.0."""
    if len(completions) != len(answers):
        raise ValueError(f"completions and answers must have the same length; got "
                         f"{len(completions)} and {len(answers)}")
    pairs = zip(completions, answers, strict=True)
    return [math_task.reward(text, str(answer)) for text, answer in pairs]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **_) -> float:
    """verl's custom reward function: `reward.custom_reward_function.path=<this file>
    reward.custom_reward_function.name=compute_score`. ground_truth is the final number (as
    verl's and MaxRL's GSM8K preprocessing store it)."""
    return math_task.reward(solution_str, str(ground_truth))


def trl_reward(completions, answer, **_) -> list[float]:
    """TRL reward function for a dataset with an `answer` column (the final number);
    conversational completions are read from their last message."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return success_rewards(texts, answer)


def problems(path) -> pd.DataFrame:
    """A local GSM8K or GSM8K-Platinum file (jsonl, json or parquet with `question` and an
    `answer` ending in `#### number`) as sera.tasks.math reads it: the chat `messages` (the
    question and the paper's \\boxed{} instruction), the `answer` (the final number) and the
    worked `solution`. GSM8K-Platinum's rows marked `cleaning_status == "rejected"` (questions
    its authors found ambiguous or flawed) are left out; a file left empty is an error."""
    frame = math_task.load_file(Path(path))
    if "cleaning_status" in frame.columns:
        frame = frame[frame["cleaning_status"] != "rejected"].reset_index(drop=True)
    if frame.empty:
        raise ValueError(f"{path}: no questions to write")
    return math_task.read_frame(frame, path)


def trl_dataset(path):
    """A local GSM8K file (as `problems` reads it) as the `datasets.Dataset` TRL's GRPOTrainer
    trains on: a conversational `prompt` and the `answer` column that trl_reward scores by."""
    from datasets import Dataset  # TRL's own dependency: imported only where TRL is used

    table = problems(path)
    return Dataset.from_dict({"prompt": list(table["messages"]), "answer": list(table["answer"])})


def verl_table(path, split: str, data_source: str = "openai/gsm8k"):
    """A local GSM8K file (as `problems` reads it) as the table verl's RLHFDataset reads: a chat
    `prompt`, `data_source`, `ability`, `reward_model` with the ground truth, and `extra_info`
    with the row's own `index`, which SERA's verl plug-in keys its history by."""
    table = problems(path)
    return pd.DataFrame({
        "data_source": data_source,
        "prompt": table["messages"],
        "ability": "math",
        "reward_model": [{"style": "rule", "ground_truth": a} for a in table["answer"]],
        "extra_info": [{"split": split, "index": i} for i in range(len(table))],
    })
