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

from sera.tasks.maze import MazeTask
from sera.trainers import sequence
from sera.trainers.config import AllocatorConfig


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
    n_tune: int = 0
    """Tuning mazes, distinct from the others and never trained on; their final Pass@K (metric
    tune_pass) chooses a learning rate in sera.studies.tuning without touching the held-out
    mazes."""
    allocator: AllocatorConfig = dataclasses.field(
        default_factory=lambda: AllocatorConfig(n_max_factor=4))
    """The allocator and its estimates (N_max = 4 n0 here)."""

    def task_fields(self) -> dict:
        fields = {"size": self.size, "n_train": self.n_train, "n_val": self.n_val}
        return {**fields, "n_tune": self.n_tune} if self.n_tune else fields


PRESETS = {
    "fast": MazeConfig(steps=80),
    "long": MazeConfig(steps=400, n_train=800, n_val=200, final_samples=256),
    "paper": MazeConfig(size=17, n_train=7424, n_val=400, width=256, layers=4, n0=128,
                        batch_size=64, steps=3000, max_new_tokens=160, eval_every=250,
                        eval_samples=128, val_k=(1, 16, 128), final_samples=1024,
                        checkpoint_every=250, micro_batch=512, warmup_steps=2000),
}


def build(config: MazeConfig) -> sequence.SequenceStudy:
    """The task, the warmed-up tiny decoder and the study that continues from it."""
    task = MazeTask(config.size, config.n_train, config.n_val, config.data_seed, config.n_tune)
    model = sequence.tiny_decoder(config, task)
    return sequence.SequenceStudy(config, task, model)


if __name__ == "__main__":
    sys.exit(sequence.main(MazeConfig, PRESETS, build, description=__doc__))
