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


def verl_table(path, split: str, data_source: str = "openai/gsm8k"):
    """A local GSM8K or GSM8K-Platinum file (jsonl, json or parquet with `question` and an
    `answer` ending in `#### number`) as the table verl's RLHFDataset reads: a chat `prompt` (the
    question and the paper's \\boxed{} instruction), `data_source`, `ability`, `reward_model`
    with the ground truth, and `extra_info` with the row's own `index`, which SERA's verl
    plug-in keys its history by. GSM8K-Platinum's rows marked `cleaning_status == "rejected"`
    (questions its authors found ambiguous or flawed) are left out."""
    frame = math_task.load_file(Path(path))
    if "cleaning_status" in frame.columns:
        frame = frame[frame["cleaning_status"] != "rejected"].reset_index(drop=True)
    if frame.empty:
        raise ValueError(f"{path}: no questions to write")
    problems = math_task.read_frame(frame, path)
    return pd.DataFrame({
        "data_source": data_source,
        "prompt": problems["messages"],
        "ability": "math",
        "reward_model": [{"style": "rule", "ground_truth": a} for a in problems["answer"]],
        "extra_info": [{"split": split, "index": i} for i in range(len(problems))],
    })
