"""The maze navigation study: supervised warm-up, then MaxRL, SERA or GRPO from the same start.

    python -m sera.trainers.maze --method sera --size 9 --steps 60 --seed 0 \
        --agg token-mean --out DIR

writes DIR/metrics.csv (step, method, seed, n0, metric, value), DIR/config.json,
DIR/checkpoint.pt, DIR/final_counts.csv (correct responses per held-out maze),
DIR/allocations.csv (SERA's rollouts per prompt against its estimate) and DIR/model/ (a Hugging
Face checkpoint with its tokenizer); resumes from the checkpoint. The warm-up model is
shared through --warmup-dir. The paper's setting on a GPU: --size 17 --n-train 7424 --n-val 400
--width 256 --layers 4 --n0 128 --max-new-tokens 160 --steps 3000.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sera.tasks import maze
from sera.trainers import common, sequence
from sera.trainers.checkpoint import load_checkpoint, save_checkpoint


@dataclass(frozen=True)
class MazeConfig:
    """The task, the model and the supervised warm-up."""

    size: int = 9
    """Maze side (odd); 17 in the paper."""
    n_train: int = 2000
    """Training mazes (7,424 in the paper)."""
    n_val: int = 64
    """Held-out mazes, disjoint from training by layout (400 in the paper)."""
    data_seed: int = 0
    """Seed of the maze generator."""
    width: int = 64
    """Hidden size of the Qwen2-style decoder (256 in the paper)."""
    layers: int = 2
    """Decoder layers (4 in the paper)."""
    heads: int = 4
    """Attention heads."""
    kv_heads: int = 2
    """Key-value heads."""
    warmup_steps: int = 300
    """Supervised steps on shortest paths before RL."""
    warmup_batch: int = 32
    """Mazes per supervised step."""
    warmup_lr: float = 3e-3
    """AdamW learning rate of the warm-up."""
    warmup_dir: str | None = None
    """Where the warm-up model lives (shared by runs); None means OUT/warmup."""


class MazeTask:
    """Token-id prompts and the path verifier, on the maze vocabulary."""

    def __init__(self, config: MazeConfig):
        self.tokenizer = maze.build_tokenizer()
        self.train_mazes, self.val_mazes = maze.dataset(config.n_train, config.n_val,
                                                        config.size, config.data_seed)
        encode = self.tokenizer.convert_tokens_to_ids
        self.train_prompts = [encode(maze.prompt_text(g).split()) for g in self.train_mazes]
        self.val_prompts = [encode(maze.prompt_text(g).split()) for g in self.val_mazes]
        self.stop_token_id = encode("DONE")
        self.pad_token_id = self.tokenizer.pad_token_id
        self.vocab = maze.VOCAB

    def reward(self, split: str, index: int, response: list[int]) -> float:
        grid = (self.train_mazes if split == "train" else self.val_mazes)[index]
        return maze.reward(grid, [self.vocab[t] for t in response])

    def answers(self, indices) -> list[list[int]]:
        encode = self.tokenizer.convert_tokens_to_ids
        return [encode(maze.answer_text(maze.shortest_path(self.train_mazes[i])).split())
                for i in indices]


def _quiet():
    """No per-file progress bars from transformers when saving and loading small models."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def build_model(config: MazeConfig, max_positions: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    _quiet()
    model_config = Qwen2Config(
        vocab_size=len(maze.VOCAB), hidden_size=config.width, intermediate_size=3 * config.width,
        num_hidden_layers=config.layers, num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads, max_position_embeddings=max_positions,
        tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    return Qwen2ForCausalLM(model_config)


def warm_up(config: MazeConfig, task: MazeTask, folder: Path, max_positions: int, seed: int):
    """The supervised warm-up model, trained once per configuration and reused: cross-entropy on
    the answer tokens of shortest paths. Returns (model, metrics rows)."""
    from transformers import Qwen2ForCausalLM

    _quiet()
    stamp = folder / "warmup.json"
    settings = {**dataclasses.asdict(config), "seed": seed, "max_positions": max_positions}
    settings.pop("warmup_dir")
    saved = json.loads(stamp.read_text()) if stamp.exists() else None
    if saved is not None and saved["settings"] == settings:
        return Qwen2ForCausalLM.from_pretrained(folder), saved["rows"]
    torch.manual_seed(seed)
    model = build_model(config, max_positions)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.warmup_lr)
    rng = np.random.default_rng([seed, 7])
    rows = []
    for step in range(config.warmup_steps):
        ids = rng.choice(len(task.train_prompts), min(config.warmup_batch, len(task.train_prompts)),
                         replace=False)
        answers = task.answers(ids)
        ones = np.ones(len(ids))
        optimizer.zero_grad(set_to_none=True)
        loss, _ = sequence.sequence_loss(model, [task.train_prompts[i] for i in ids], answers,
                                         ones, ones, "token-mean", 1, task.pad_token_id)
        optimizer.step()
        rows.append({"step": step, "metric": "warmup_loss", "value": loss})
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    task.tokenizer.save_pretrained(folder)
    stamp.write_text(json.dumps({"settings": settings, "rows": rows}))
    return model, rows


def train(task_config: MazeConfig, config: sequence.RLConfig, callback=None) -> pd.DataFrame:
    """Warm up (or reuse the warm-up), then run or resume the RL stage; returns the metrics."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    task = MazeTask(task_config)
    max_positions = len(task.train_prompts[0]) + config.max_new_tokens + 8
    folder = Path(task_config.warmup_dir) if task_config.warmup_dir else out / "warmup"
    model, _ = warm_up(task_config, task, folder, max_positions, seed=task_config.data_seed)
    run = sequence.RLRun(config, task, model)
    settings = {**dataclasses.asdict(task_config), **dataclasses.asdict(config)}
    state = load_checkpoint(out / "checkpoint.pt", settings)
    if state is not None:
        run.load(state)
    (out / "config.json").write_text(json.dumps(settings, indent=2))
    bar = common.progress_bar(config.progress, config.steps, run.step,
                              f"{config.method} {config.agg}", leave=False)
    while run.step < config.steps:
        if run.step % config.eval_every == 0:
            correct = sequence.evaluate(run, config.eval_samples, stream=1)
            sequence.log_validation(run, correct, config.eval_samples, config.val_k, "val_")
        sequence.rl_step(run)
        if run.step % config.checkpoint_every == 0 and run.step < config.steps:
            _save(run, out, settings)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(common.latest(run.rows, ("train_reward", "val_pass@1")),
                            refresh=False)
        if callback is not None:
            callback(run)
    if not any(r["metric"] == "pass@1" for r in run.rows):
        _finish(run, out)
    if bar is not None:
        bar.close()
    _save(run, out, settings)
    return common.metrics_table(run.rows)


def run_grid(task_config: MazeConfig, base: sequence.RLConfig, runs, seeds, runs_dir,
             progress: bool = True) -> dict:
    """Every (method, agg) in `runs` x seed, each in runs_dir/<method>_<agg>_seed-<seed>, all
    from one shared warm-up. Returns the metrics (with an agg column), the final per-maze
    counts and SERA's allocations, keyed by run label."""
    task_config = dataclasses.replace(task_config, warmup_dir=str(Path(runs_dir) / "warmup"))
    tables, counts, allocations = [], {}, {}
    jobs = [(method, agg, seed) for seed in seeds for method, agg in runs]
    bar = common.progress_bar(progress, len(jobs), desc="runs")
    for method, agg, seed in jobs:
        label = f"{method}_{agg}_seed-{seed}"
        folder = Path(runs_dir) / label
        config = dataclasses.replace(base, method=method, agg=agg, seed=seed, out=str(folder),
                            progress=False)
        tables.append(train(task_config, config).assign(agg=agg))
        counts[label] = pd.read_csv(sequence.final_counts_path(folder))
        allocations[label] = pd.read_csv(folder / "allocations.csv")
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return {"metrics": pd.concat(tables, ignore_index=True), "final_counts": counts,
            "allocations": allocations}


def sample_answers(folder, task: MazeTask, index: int, n: int, max_new_tokens: int,
                   seed: int = 0):
    """n answers of the model saved in folder/model for held-out maze `index`, as token
    strings, with their rewards."""
    from transformers import Qwen2ForCausalLM

    from sera.trainers.engines import Sampling, TransformersEngine

    _quiet()
    model = Qwen2ForCausalLM.from_pretrained(Path(folder) / "model")
    sampling = Sampling(max_new_tokens, 1.0, task.stop_token_id, task.pad_token_id)
    out = TransformersEngine(model).generate([task.val_prompts[index]], [n], sampling, seed)
    return [[task.vocab[t] for t in r] for r in out], [task.reward("val", index, r) for r in out]


def _finish(run: sequence.RLRun, out: Path) -> None:
    """Validation at the end, then the final profile from final_samples per held-out maze."""
    config = run.config
    correct = sequence.evaluate(run, config.eval_samples, stream=1)
    sequence.log_validation(run, correct, config.eval_samples, config.val_k, "val_")
    final = sequence.evaluate(run, config.final_samples, stream=2)
    ks = [k for k in (2**i for i in range(12)) if k <= config.final_samples]
    sequence.log_validation(run, final, config.final_samples, ks, "")
    pd.DataFrame({"maze": np.arange(final.size), "n": config.final_samples,
                  "correct": final}).to_csv(sequence.final_counts_path(out), index=False)
    sequence.allocation_table(run).to_csv(out / "allocations.csv", index=False)
    run.model.save_pretrained(out / "model")
    run.task.tokenizer.save_pretrained(out / "model")


def _save(run, out, settings) -> None:
    state = run.state()
    state["config"] = settings
    save_checkpoint(out / "checkpoint.pt", state, common.metrics_table(run.rows), out)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_flags(parser, MazeConfig)
    common.add_flags(parser, sequence.RLConfig)
    values = vars(parser.parse_args(argv))
    return common.build(MazeConfig, values), common.build(sequence.RLConfig, values)


def main(argv=None) -> int:
    task_config, config = parse_args(argv)
    table = train(task_config, config)
    final = table[table["metric"].isin(["pass@1", f"pass@{config.final_samples}"])]
    print(f"{config.method} {config.agg} seed={config.seed}: " + ", ".join(
        f"{m} {v:.4f}" for m, v in zip(final["metric"], final["value"], strict=True)))
    print(f"metrics: {Path(config.out) / 'metrics.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
