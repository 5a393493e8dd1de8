"""The math study's success reward (sera.tasks.math.reward: math-verify, MaxRL's extraction) in
the call forms verl and TRL expect. Imports neither framework, so verl can load this file by path
(`reward.custom_reward_function.path`).
"""

from __future__ import annotations

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
