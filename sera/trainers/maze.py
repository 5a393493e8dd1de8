"""The maze navigation study: supervised warm-up, then RL from the same start for every method.

    python -m sera.trainers.maze --method sera --steps 80 --seed 0 --agg token-mean --out DIR

writes DIR/metrics.csv, DIR/final.csv (correct answers per held-out maze), DIR/allocations.csv,
DIR/config.json, DIR/checkpoint.pt and DIR/model/ (a Hugging Face checkpoint with its tokenizer,
loadable by transformers and vLLM), and resumes from the checkpoint. The warm-up model is shared
through --warmup-dir. `--preset paper` is the paper's setting (17x17 mazes, a 4-layer width-256
decoder, N0 = 128, step 3,000) for a GPU; the paper does not state its maze batch size or head
counts, so 64 prompts per step and 4 heads (2 key-value) are our choice. See
notebooks/05_maze_navigation.ipynb.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from sera import models
from sera.tasks.maze import VOCAB, MazeTask
from sera.trainers import cli, loop, sequence
from sera.trainers.config import AllocatorConfig
from sera.trainers.engines import Sampling, TransformersEngine


@dataclass(frozen=True)
class MazeConfig(sequence.SequenceConfig):
    """One RL run of the maze study, with its task, model and warm-up."""

    size: int = 9
    """Maze side (odd); 17 in the paper."""
    n_train: int = 320
    """Training mazes (7,424 in the paper). Keep n_train / batch_size well below steps: SERA
    allocates only once every maze of a batch has been seen, i.e. after the first epoch."""
    n_val: int = 64
    """Held-out mazes, disjoint from training by layout (400 in the paper)."""
    data_seed: int = 0
    """Seed of the maze generator (and of the warm-up)."""
    width: int = 64
    """Hidden size of the Qwen2-style decoder (256 in the paper)."""
    layers: int = 2
    """Decoder layers (4 in the paper)."""
    heads: int = 4
    """Attention heads."""
    kv_heads: int = 2
    """Key-value heads."""
    allocator: AllocatorConfig = dataclasses.field(
        default_factory=lambda: AllocatorConfig(n_max_factor=4))
    """The allocator and its estimates (N_max = 4 n0 here)."""

    def task_fields(self) -> dict:
        names = ("size", "n_train", "n_val", "data_seed", "width", "layers", "heads", "kv_heads")
        return {name: getattr(self, name) for name in names}


PRESETS = {
    "fast": MazeConfig(steps=80),
    "long": MazeConfig(steps=400, n_train=800, n_val=200, final_samples=256),
    "paper": MazeConfig(size=17, n_train=7424, n_val=400, width=256, layers=4, n0=128,
                        batch_size=64, steps=3000, max_new_tokens=160, eval_every=250,
                        eval_samples=128, val_k=(1, 16, 128), final_samples=1024,
                        checkpoint_every=250, micro_batch=512, warmup_steps=2000),
}


def build(config: MazeConfig) -> sequence.SequenceStudy:
    """The task, the warmed-up model (trained once per setting, shared through warmup_dir) and
    the study that continues from it."""
    task = MazeTask(config.size, config.n_train, config.n_val, config.data_seed)
    max_positions = len(task.train_prompts[0]) + config.max_new_tokens + 8
    folder = Path(config.warmup_dir) if config.warmup_dir else Path(config.out) / "warmup"
    settings = {**sequence.warmup_settings(config, config.task_fields()),
                "seed": config.data_seed, "max_positions": max_positions}
    model, _ = sequence.warm_up(config, task, lambda: models.decoder(
        len(VOCAB), config.width, config.layers, config.heads, config.kv_heads, max_positions,
        pad_token_id=task.pad_token_id, bos_token_id=2, eos_token_id=3), folder, settings)
    return sequence.SequenceStudy(config, task, model.to(models.device(config.device)))


def train(config: MazeConfig, callback=None) -> loop.Results:
    """Warm up (or reuse the warm-up), then run, resume or read back the RL stage."""
    return loop.fit(build(config), callback)


def run_grid(base: MazeConfig, runs, seeds, runs_dir, rerun: bool = False,
             progress: bool = True) -> loop.Results:
    """Every (method, agg) in `runs` x seed, all from one warm-up in runs_dir/warmup."""
    return sequence.run_grid(base, build, runs, seeds, runs_dir, rerun, progress)


def sample_answers(folder, task: MazeTask, index: int, n: int, max_new_tokens: int,
                   seed: int = 0):
    """n answers of the model saved in folder/model for held-out maze `index`, as token
    strings, with their rewards."""
    model = models.load_decoder(Path(folder) / "model")
    sampling = Sampling(max_new_tokens, stop_token_id=task.stop_token_id,
                        pad_token_id=task.pad_token_id)
    out = TransformersEngine(model).generate([task.val_prompts[index]], [n], sampling, seed)
    return [task.decode(r) for r in out], [task.reward("val", index, r) for r in out]


def main(argv=None) -> int:
    config = cli.parse(MazeConfig, PRESETS, argv, __doc__)
    return sequence.report(config, train(config))


if __name__ == "__main__":
    sys.exit(main())
