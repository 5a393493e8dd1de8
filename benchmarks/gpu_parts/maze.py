"""The maze study's paper preset on a GPU, with fewer training mazes so that SERA allocates."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from gpu_parts.common import fit_to_deadline, loop_checks, memory, part
from sera import timing


@part("maze", budget=150.0)
def part_maze(cpu: bool, budget: float, work: Path) -> dict:
    from sera.trainers import maze

    if cpu:
        config = dataclasses.replace(
            maze.PRESETS["fast"], size=7, n_train=16, n_val=4, batch_size=8, n0=4, steps=6,
            warmup_steps=20, width=32, layers=1, max_new_tokens=24, eval_samples=4,
            val_k=(1, 4), final_samples=4)
    else:
        config = dataclasses.replace(
            maze.PRESETS["paper"], n_train=384, n_val=64, steps=10_000, warmup_steps=600,
            eval_samples=16, val_k=(1, 16), final_samples=16, dtype="bfloat16")
    config = dataclasses.replace(config, eval_every=10**6, checkpoint_every=10**6,
                                 device="cpu" if cpu else "cuda", progress=False,
                                 out=str(work / "maze-run"), min_allocated_share=0.0)
    clock = timing.Clock()
    start = time.perf_counter()
    with clock:
        study = maze.build(config)
        warm = time.perf_counter() - start
        study.engine.chunk = 8192  # every rollout of a step in one generate call on a GPU
        epoch = -(-config.n_train // config.batch_size)
        run, steps = fit_to_deadline(study, budget, clock, minimum=epoch + 1)
    summary = steps.summary()
    lengths = [v for _, m, _, v in run.rows if m == "response_length"]
    rollouts = [v for _, m, _, v in run.rows if m == "rollouts"]
    reward = [v for _, m, _, v in run.rows if m == "train_reward"]
    tokens = np.mean(lengths) * np.mean(rollouts) / summary["step_s_median"]
    return {"setting": f"{config.size}x{config.size} mazes ({config.n_train} for training), "
                       f"decoder {config.layers} layers x {config.width}, {config.batch_size} "
                       f"mazes x N0 = {config.n0} a step, up to {config.max_new_tokens} tokens, "
                       f"{config.dtype}; warm-up {config.warmup_steps} steps in {warm:.0f} s",
            **summary, **memory(),
            "throughput": f"{tokens:.0f} generated tokens/s (training included)",
            "train_reward_first_last": [float(reward[0]), float(reward[-1])] if reward else None,
            "checks": loop_checks(run, study.n_prompts, config.batch_size)}
