"""Rollout engines: sample N_q responses for each prompt of a batch.

Every engine follows the `Engine` protocol: `generate(prompts, counts, sampling, seed)` returns
token ids per response, grouped by prompt in batch order (prompts with count 0 get none), each
ending at the stop token when one was produced; `sync(model)` brings the engine's weights up to
date after an optimizer step. `TransformersEngine` samples every rollout of a batch in a few
batched `generate` calls with a KV cache (CPU or GPU). Used by sera.trainers.sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch


@dataclass(frozen=True)
class Sampling:
    """How to sample. Training keeps temperature at what the loss uses and top_p at 1, so the
    rollouts are on-policy; evaluation may differ (the paper's Qwen runs: 0.6 and 0.95)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_id: int | None = None
    pad_token_id: int = 0


class Engine(Protocol):
    def generate(self, prompts: list[list[int]], counts, sampling: Sampling,
                 seed: int) -> list[list[int]]: ...

    def sync(self, model) -> None: ...


class TransformersEngine:
    """Batched sampling with `model.generate` (KV cache), `chunk` sequences per call. It samples
    from the training model itself, so `sync` has nothing to do."""

    def __init__(self, model, chunk: int = 512):
        self.model = model
        self.chunk = chunk

    def sync(self, model) -> None:
        self.model = model

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], counts, sampling: Sampling,
                 seed: int) -> list[list[int]]:
        counts = np.asarray(counts)
        expanded = [prompt for prompt, n in zip(prompts, counts, strict=True)
                    for _ in range(int(n))]
        torch.manual_seed(seed)  # generate draws from the global generator
        responses: list[list[int]] = []
        for start in range(0, len(expanded), self.chunk):
            responses.extend(self._generate(expanded[start:start + self.chunk], sampling))
        return responses

    def _generate(self, prompts: list[list[int]], sampling: Sampling) -> list[list[int]]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), sampling.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):  # left padding keeps the prompts' ends aligned
            ids[row, width - len(prompt):] = torch.tensor(prompt)
            mask[row, width - len(prompt):] = 1
        was_training = self.model.training
        self.model.eval()
        out = self.model.generate(
            input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True,
            temperature=sampling.temperature, top_k=0, top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens, eos_token_id=sampling.stop_token_id,
            pad_token_id=sampling.pad_token_id)
        self.model.train(was_training)
        return [_cut(row, sampling.stop_token_id) for row in out[:, width:].tolist()]


def _cut(tokens: list[int], stop: int | None) -> list[int]:
    """The response up to and including the first stop token (the rest is padding)."""
    if stop is not None and stop in tokens:
        return tokens[: tokens.index(stop) + 1]
    return tokens


class SingleRolloutEngine(TransformersEngine):
    """One `generate` call per rollout: the baseline the batched engine is measured against."""

    def generate(self, prompts, counts, sampling, seed):
        torch.manual_seed(seed)
        out = []
        for prompt, n in zip(prompts, np.asarray(counts), strict=True):
            for _ in range(int(n)):
                out.extend(self._generate([prompt], sampling))
        return out
