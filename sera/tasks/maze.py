"""Maze navigation as a text task with a verifiable reward.

Mazes come from randomized Prim on the odd cells of an odd-sized grid, start (1, 1), goal
(size-2, size-2). A prompt lists the grid row-major as cell tokens with a newline token after each
row, between grid markers, then a path marker; the answer is a sequence of UP/DOWN/LEFT/RIGHT
ending with DONE. Any valid path to the goal earns 1. `MazeTask` is what the RL loop needs:
token-id prompts, the verifier on token ids, reference answers for the warm-up, the stop and pad
tokens. Used by sera.trainers.maze and notebooks/05_maze_navigation.ipynb.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np

from sera import _checks

WALL, OPEN = 1, 0
MOVES = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
SPECIAL = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
VOCAB = SPECIAL + ["GRID_START", "GRID_END", "NL", "PATH_START", "START", "GOAL", "WALL",
                   "PATH", *MOVES, "DONE"]


def _size(size) -> int:
    size = _checks.integer(size, "size", minimum=5)
    if size % 2 == 0:
        raise ValueError(f"size must be odd (cells sit on odd coordinates), got {size}")
    return size


def generate(size: int, rng: np.random.Generator) -> np.ndarray:
    """One maze as a (size, size) uint8 grid, 1 = wall, by randomized Prim on the odd cells."""
    size = _size(size)
    grid = np.ones((size, size), dtype=np.uint8)
    grid[1, 1] = OPEN
    frontier = [(1, 1, dr, dc) for dr, dc in ((2, 0), (-2, 0), (0, 2), (0, -2))]
    while frontier:
        r, c, dr, dc = frontier.pop(int(rng.integers(len(frontier))))
        nr, nc = r + dr, c + dc
        if 0 < nr < size - 1 and 0 < nc < size - 1 and grid[nr, nc] == WALL:
            grid[r + dr // 2, c + dc // 2] = OPEN
            grid[nr, nc] = OPEN
            frontier.extend((nr, nc, a, b) for a, b in ((2, 0), (-2, 0), (0, 2), (0, -2)))
    return grid


def dataset(n_train: int, n_val: int, size: int, seed: int = 0):
    """(train, val) lists of distinct mazes: duplicates by layout are dropped, so no held-out
    maze appears in training. Raises when the size has too few distinct mazes."""
    n_train = _checks.integer(n_train, "n_train", minimum=1)
    n_val = _checks.integer(n_val, "n_val", minimum=1)
    rng = np.random.default_rng(seed)
    seen, mazes = set(), []
    attempts = 0
    while len(mazes) < n_train + n_val:
        grid = generate(size, rng)
        key = grid.tobytes()
        attempts += 1
        if key not in seen:
            seen.add(key)
            mazes.append(grid)
        if attempts > 20 * (n_train + n_val) + 1000:
            raise ValueError(f"size {size} gave only {len(mazes)} distinct mazes in {attempts} "
                             f"draws; ask for fewer or use a larger size")
    return mazes[n_val:], mazes[:n_val]


def goal_of(grid: np.ndarray) -> tuple[int, int]:
    return grid.shape[0] - 2, grid.shape[1] - 2


def shortest_path(grid: np.ndarray) -> list[str]:
    """Moves of a shortest path from start to goal (breadth-first search)."""
    start, goal = (1, 1), goal_of(grid)
    previous = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for name, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if grid[nxt] == OPEN and nxt not in previous:
                previous[nxt] = (cell, name)
                queue.append(nxt)
    moves, cell = [], goal
    while previous[cell] is not None:
        cell, name = previous[cell]
        moves.append(name)
    return moves[::-1]


def prompt_text(grid: np.ndarray) -> str:
    """The maze as space-separated tokens: GRID_START, rows of cell tokens each closed by NL,
    GRID_END, PATH_START."""
    goal = goal_of(grid)
    rows = []
    for r in range(grid.shape[0]):
        cells = []
        for c in range(grid.shape[1]):
            if (r, c) == (1, 1):
                cells.append("START")
            elif (r, c) == goal:
                cells.append("GOAL")
            else:
                cells.append("WALL" if grid[r, c] == WALL else "PATH")
        rows.append(" ".join(cells) + " NL")
    return "GRID_START " + " ".join(rows) + " GRID_END PATH_START"


def answer_text(moves: list[str]) -> str:
    return " ".join([*moves, "DONE"])


def reward(grid: np.ndarray, answer) -> float:
    """1.0 if the moves up to the first DONE lead from start to goal without entering a wall or
    leaving the grid, else 0.0. The answer may be a string or a list of tokens; anything
    malformed (no DONE, unknown tokens) scores 0, never raises."""
    tokens = answer.split() if isinstance(answer, str) else list(answer)
    if "DONE" not in tokens:
        return 0.0
    r, c = 1, 1
    for token in tokens[: tokens.index("DONE")]:
        if token not in MOVES:
            return 0.0
        dr, dc = MOVES[token]
        r, c = r + dr, c + dc
        if not (0 <= r < grid.shape[0] and 0 <= c < grid.shape[1]) or grid[r, c] == WALL:
            return 0.0
    return 1.0 if (r, c) == goal_of(grid) else 0.0


def build_tokenizer(folder: str | Path | None = None):
    """A word-level Hugging Face tokenizer over the maze vocabulary (saved to folder if given),
    so checkpoints load in transformers and vLLM alike."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]",
                                        unk_token="[UNK]", bos_token="[BOS]",
                                        eos_token="[EOS]")
    if folder is not None:
        tokenizer.save_pretrained(str(folder))
    return tokenizer


class MazeTask:
    """Training and held-out mazes as token-id prompts, with the path verifier."""

    def __init__(self, size: int, n_train: int, n_val: int, seed: int = 0, n_tune: int = 0,
                 n_final: int = 0):
        """n_tune > 0 also draws a tuning split (tune_mazes, tune_prompts): mazes distinct
        from both others by layout, never trained on, for choosing a learning rate without
        touching the held-out ones. The held-out mazes do not depend on n_tune. n_final > 0
        draws the final evaluation's held-out mazes (split "final"): the n_val ones first, then
        mazes drawn after the training and tuning ones (the others are the same as without)."""
        n_tune = _checks.integer(n_tune, "n_tune", minimum=0)
        n_final = _checks.integer(n_final, "n_final", minimum=0)
        if n_final and n_final < n_val:
            raise ValueError(f"n_final ({n_final}) must be 0 or at least n_val ({n_val})")
        self.tokenizer = build_tokenizer()
        extra = max(n_final - n_val, 0)
        train, self.val_mazes = dataset(n_train + n_tune + extra, n_val, size, seed)
        train, later = train[:n_train + n_tune], train[n_train + n_tune:]
        self.tune_mazes, self.train_mazes = train[:n_tune], train[n_tune:]
        self.final_mazes = self.val_mazes + later if n_final else None
        encode = self.tokenizer.convert_tokens_to_ids
        self.train_prompts = [encode(prompt_text(g).split()) for g in self.train_mazes]
        self.val_prompts = [encode(prompt_text(g).split()) for g in self.val_mazes]
        self.tune_prompts = [encode(prompt_text(g).split()) for g in self.tune_mazes]
        self.final_prompts = None if self.final_mazes is None else \
            [encode(prompt_text(g).split()) for g in self.final_mazes]
        self.stop_token_id = encode("DONE")
        self.pad_token_id = self.tokenizer.pad_token_id

    def reward(self, split: str, index: int, response: list[int]) -> float:
        mazes = {"train": self.train_mazes, "val": self.val_mazes, "tune": self.tune_mazes,
                 "final": self.final_mazes or []}
        if split not in mazes:
            raise ValueError(f"split must be train, val, tune or final, got {split!r}")
        grid = mazes[split][index]
        return reward(grid, [VOCAB[t] for t in response])

    def answers(self, indices) -> list[list[int]]:
        """Shortest-path answers of training mazes, as token ids."""
        encode = self.tokenizer.convert_tokens_to_ids
        return [encode(answer_text(shortest_path(self.train_mazes[i])).split())
                for i in indices]

    def decode(self, response: list[int]) -> list[str]:
        return [VOCAB[t] for t in response]
