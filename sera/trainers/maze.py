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

import sys

from sera.tasks.maze import MazeTask
from sera.trainers import sequence
from sera.trainers.presets import MAZE_PRESETS as PRESETS
from sera.trainers.presets import MazeConfig


def build(config: MazeConfig) -> sequence.SequenceStudy:
    """The task, the warmed-up tiny decoder and the study that continues from it."""
    task = MazeTask(config.size, config.n_train, config.n_val, config.data_seed, config.n_tune,
                    config.n_final)
    model = sequence.tiny_decoder(config, task)
    return sequence.SequenceStudy(config, task, model)


if __name__ == "__main__":
    sys.exit(sequence.main(MazeConfig, PRESETS, build, description=__doc__))
