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
their sources are beside MATH_PRESETS in sera.trainers.presets.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sera import models
from sera.tasks import math as task_math
from sera.trainers import sequence
from sera.trainers.engines import VLLMEngine
from sera.trainers.presets import MATH_PRESETS as PRESETS
from sera.trainers.presets import PAPER_MODELS, MathConfig, warmup_folder


def problems(config: MathConfig):
    """(train, held-out) problem tables: the user's files, or the generated set."""
    if config.data is not None:
        return task_math.read(config.data), task_math.read(config.val_data)
    train, val = task_math.generated_splits(config.n_train, config.n_val, config.data_seed,
                                            config.problem_steps, config.max_number)
    return task_math.as_problems(train), task_math.as_problems(val)


def final_problems(config: MathConfig):
    """The final evaluation's held-out table when config.n_final asks for more than n_val
    (task_math.generated_final); None otherwise."""
    if not config.n_final:
        return None
    return task_math.generated_final(config.n_train, config.n_val, config.n_final,
                                     config.data_seed, config.problem_steps, config.max_number)


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
        task = task_math.MathTask(train, val, tiny_tokenizer(train), final_problems(config))
        model = sequence.tiny_decoder(config, task)
        source = warmup_folder(config)
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
            max_model_len=max(map(len, task.train_prompts + task.val_prompts
                                  + (task.final_prompts or [])))
            + config.max_new_tokens)
        engine.sync(model)
    return sequence.SequenceStudy(config, task, model, engine)


if __name__ == "__main__":
    sys.exit(sequence.main(MathConfig, PRESETS, build, description=__doc__))
