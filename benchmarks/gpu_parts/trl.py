"""SeraGRPOTrainer (sera.integrations.trl) on a decoder of SmolLM2-360M's shape."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import sera
from gpu_parts.common import Steps, check, memory, part
from sera import timing

SIZES = {True: (8, 2, 4), False: (64, 8, 8)}
"""cpu -> (prompts, prompts a step, n0)."""


def warmed_up_model(cpu: bool, work: Path):
    """The generated math task, its tokenizer (padded to SmolLM2's vocabulary on a GPU) and a
    decoder of SmolLM2-360M's shape (a toy shape on the CPU) after its supervised warm-up:
    (task, problems, model, warm-up description)."""
    from types import SimpleNamespace

    from transformers import LlamaConfig, LlamaForCausalLM

    from sera.tasks import math as task_math
    from sera.trainers.sequence import warm_up

    train, val = task_math.generated_splits(SIZES[cpu][0], 4, seed=0, steps=1, max_number=5)
    problems = task_math.as_problems(train)
    texts = [m[0]["content"] for m in problems["messages"]] + list(problems["solution"])
    tokenizer = task_math.build_tokenizer(texts)
    if cpu:
        shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2)
    else:  # SmolLM2-360M's shape
        shape = dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                     num_attention_heads=15, num_key_value_heads=5, rope_theta=100_000.0)
        tokenizer.add_tokens([f"<unused{i}>" for i in range(49_152 - len(tokenizer))])
    task = task_math.MathTask(train, val, tokenizer)

    def build():
        return LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tokenizer), max_position_embeddings=2048, tie_word_embeddings=True,
            pad_token_id=task.pad_token_id, eos_token_id=task.stop_token_id,
            bos_token_id=None, **shape))

    start = time.perf_counter()
    settings = SimpleNamespace(warmup_steps=30 if cpu else 150, warmup_batch=16,
                               warmup_lr=1e-3 if cpu else 3e-4, device="cpu" if cpu else "cuda")
    model, rows = warm_up(settings, task, build, work / "trl-warmup", {"seed": 0})
    warm = (f"supervised warm-up {settings.warmup_steps} steps in "
            f"{time.perf_counter() - start:.0f} s (loss {rows[0]['value']:.2f} -> "
            f"{rows[-1]['value']:.2f})")
    return task, problems, model, warm


@part("trl", budget=110.0)
def part_trl(cpu: bool, budget: float, work: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from sera.integrations import trl as plugin
    from sera.integrations.gsm8k import trl_reward
    from sera.trainers.config import AllocatorConfig

    n_prompts, per_step, n0 = SIZES[cpu]
    task, problems, model, warm = warmed_up_model(cpu, work)
    data = Dataset.from_dict({"prompt": [m[0]["content"] for m in problems["messages"]],
                              "answer": list(problems["answer"])})
    epoch_steps = n_prompts // per_step
    args = GRPOConfig(
        output_dir=str(work / "trl-out"), per_device_train_batch_size=per_step * n0,
        num_generations=n0, max_completion_length=24 if cpu else 96,
        max_steps=3 * epoch_steps, learning_rate=1e-5, beta=0.0, loss_type="dr_grpo",
        use_cpu=cpu, bf16=not cpu, report_to="none", logging_steps=1, save_strategy="no",
        seed=0, disable_tqdm=True, temperature=1.0)
    allocator = AllocatorConfig(n_min=2, n_max=4 * n0)
    trainer = plugin.SeraGRPOTrainer(model=model, reward_funcs=trl_reward, args=args,
                                     train_dataset=data, processing_class=task.tokenizer,
                                     allocator=allocator)
    clock = timing.Clock()
    steps = Steps(clock, budget, minimum=epoch_steps + 1)  # one pass, then a planned batch

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            steps.begin()

        def on_step_end(self, args, state, control, **kwargs):
            if steps.end():
                control.should_training_stop = True

    trainer.add_callback(Timer())
    with clock:
        trainer.train()
    logs = [h for h in trainer.state.log_history if "num_tokens" in h]
    tokens = (logs[-1]["num_tokens"] - logs[0]["num_tokens"]) / sum(steps.times[1:]) \
        if len(logs) > 1 else float("nan")
    rewards = [h.get("reward") for h in logs]
    return {"setting": f"SeraGRPOTrainer, decoder of {'toy' if cpu else 'SmolLM2-360M'} shape "
                       f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters),"
                       f" {per_step} prompts x {n0} rollouts a step out of {n_prompts}, "
                       f"responses up to {args.max_completion_length} tokens, "
                       f"{'float32' if cpu else 'bf16'}; {warm}",
            **steps.summary(), **memory(),
            "throughput": f"{tokens:.0f} prompt + completion tokens/s",
            "reward_first_last": [rewards[0], rewards[-1]] if rewards else None,
            "checks": _trl_checks(trainer, n0, allocator, epoch_steps)}


def _trl_checks(trainer, n0: int, allocator, epoch_steps: int) -> dict:
    """SERA's checks on the TRL run: budget and bounds per generation batch, counts against a
    replayed history, folds per pass."""
    log = list(trainer.sera_log)
    checks: dict = {}
    reference = allocator.history(trainer.sera_history.n_prompts)
    budget_ok = bounds_ok = True
    equal = planned = 0
    for i, entry in enumerate(log):
        ids, counts = np.asarray(entry["ids"]), np.asarray(entry["counts"])
        budget_ok &= int(counts.sum()) == ids.size * n0
        bounds_ok &= bool((counts >= allocator.n_min).all()
                          and (counts <= allocator.n_max_for(n0)).all())
        p_hat, ready = reference.estimate(ids)
        if ready.all():
            planned += 1
            expected = sera.allocate(p_hat, ids.size * n0, n_min=allocator.n_min,
                                     n_max=allocator.n_max_for(n0), n0=n0,
                                     method=allocator.rounding).counts
            equal += int(np.array_equal(expected, counts))
        reference.record(np.repeat(ids, counts), entry["rewards"])
        if (i + 1) % epoch_steps == 0:
            reference.end_epoch()
    spread = np.concatenate([np.asarray(e["counts"]) for e in log[epoch_steps:]] or [[0]])
    check(checks, "budget", budget_ok, f"{len(log)} generation batches, each prompts x {n0}; "
           f"counts after the first pass from {spread.min()} to {spread.max()}")
    check(checks, "bounds", bounds_ok, f"counts in [{allocator.n_min}, {allocator.n_max_for(n0)}]")
    check(checks, "counts_equal_allocate", planned > 0 and equal == planned,
           f"{equal} of {planned} planned batches equal sera.allocate on a replayed history")
    check(checks, "history_folds", trainer.sera_history.epoch == len(log) // epoch_steps,
           f"history folded {trainer.sera_history.epoch} times in {len(log)} batches of "
           f"{epoch_steps} per pass")
    check(checks, "history_matches_replay",
           np.allclose(trainer.sera_history.successes, reference.successes),
           "the trainer's history equals the replay")
    return checks
