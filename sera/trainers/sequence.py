"""The RL loop for language-model policies with verifiable rewards, shared by every sequence task.

Each step: draw B prompts; allocate the budget B * n0 (uniform for maxrl and grpo; the waterline on
historical estimates for sera, with the safeguard and multiplicity weights); sample N_q responses
per prompt through a rollout engine; score them; advantages x weights x log-probs, aggregated by
token-mean or seqnorm; one optimizer step (fully on-policy). A task supplies token-id prompts, a
reward function and its stop and pad tokens. See notebooks/05_maze_navigation.ipynb.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import torch

from sera.estimators import AGGREGATIONS, grpo_advantages, maxrl_advantages, policy_loss
from sera.history import SuccessHistory
from sera.passk import pass_at_k
from sera.trainers import common
from sera.trainers.engines import Sampling, TransformersEngine

METHODS = ("maxrl", "sera", "grpo")


class Task(Protocol):
    train_prompts: list[list[int]]
    val_prompts: list[list[int]]
    stop_token_id: int
    pad_token_id: int

    def reward(self, split: str, index: int, response: list[int]) -> float: ...


@dataclass(frozen=True)
class RLConfig:
    """The RL stage of a sequence study."""

    method: str = "sera"
    """maxrl (uniform n0), sera (waterline on historical estimates) or grpo (uniform n0)."""
    n0: int = 8
    """Rollouts per prompt under uniform allocation; the budget is batch_size * n0."""
    batch_size: int = 16
    """Prompts per step."""
    steps: int = 60
    """RL optimizer steps."""
    seed: int = 0
    """Seed of the prompt order and the sampling."""
    agg: str = "token-mean"
    """Loss aggregation: token-mean or seqnorm (fixed max length, max_new_tokens)."""
    lr: float = 3e-4
    """AdamW learning rate."""
    grad_clip: float = 1.0
    """Gradient-norm clip (the norm before clipping is logged)."""
    max_new_tokens: int = 32
    """Longest response."""
    temperature: float = 1.0
    """Sampling temperature (1.0 keeps the rollouts on-policy)."""
    n_min: int = 2
    """Fewest rollouts SERA gives a retained prompt."""
    n_max: int | None = None
    """Most rollouts SERA gives a prompt; None means 4 * n0."""
    rounding: str = "paper"
    """Integerization of the waterline: paper or exact."""
    u_min: float | None = None
    """Observability safeguard threshold; None turns it off."""
    history_gamma: float = 0.9
    """Discount of the historical success counts per epoch."""
    eval_every: int = 20
    """Steps between validation measurements."""
    eval_samples: int = 16
    """Responses per held-out prompt at each validation."""
    val_k: tuple[int, ...] = (1, 4, 16)
    """K values of validation Pass@K (each <= eval_samples)."""
    final_samples: int = 64
    """Responses per held-out prompt for the final Pass@K profile."""
    micro_batch: int = 256
    """Sequences per forward/backward pass (gradients accumulate)."""
    checkpoint_every: int = 20
    """Steps between checkpoints."""
    out: str = "runs/sequence"
    """Output folder."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.agg not in AGGREGATIONS:
            raise ValueError(f"agg must be one of {AGGREGATIONS}, got {self.agg!r}")
        if max(self.val_k) > self.eval_samples:
            raise ValueError(f"val_k {self.val_k} needs eval_samples >= {max(self.val_k)}")

    @property
    def budget(self) -> int:
        return self.batch_size * self.n0

    @property
    def upper(self) -> int:
        return self.n_max if self.n_max is not None else 4 * self.n0


class RLRun:
    """Model, optimizer, history and position in the data: all a checkpoint holds."""

    def __init__(self, config: RLConfig, task: Task, model, engine=None):
        self.config, self.task, self.model = config, task, model
        self.engine = engine or TransformersEngine(model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
        self.history = SuccessHistory(len(task.train_prompts), gamma=config.history_gamma)
        self.sampling = Sampling(config.max_new_tokens, config.temperature, task.stop_token_id,
                                 task.pad_token_id)
        self.step, self.epoch, self.position = 0, 0, 0
        self.rows: list[dict] = []
        self.allocations: list[tuple] = []  # (step, prompt, estimate, rollouts) of sera batches

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "history": self.history.state_dict(), "step": self.step, "epoch": self.epoch,
                "position": self.position, "rows": self.rows, "allocations": self.allocations,
                "config": dataclasses.asdict(self.config)}

    def load(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.history.load_state_dict(state["history"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.rows = list(state["rows"])
        self.allocations = list(state["allocations"])

    def log(self, metric: str, value: float) -> None:
        self.rows.append({"step": self.step, "method": self.config.method,
                          "seed": self.config.seed, "n0": self.config.n0, "metric": metric,
                          "value": float(value)})

    def sample(self, prompts, counts, stream: int) -> list[list[int]]:
        seed = int(np.random.default_rng([self.config.seed, stream, self.step]).integers(2**31))
        return self.engine.generate(prompts, counts, self.sampling, seed)


def plan(run: RLRun, ids: np.ndarray):
    """(counts, per-prompt weights, fallback, the estimates allocated from or None)."""
    config = run.config
    if config.method != "sera":
        return np.full(ids.size, config.n0), np.ones(ids.size), False, None
    result = run.history.plan(ids, config.budget, n_min=config.n_min, n_max=config.upper,
                              method=config.rounding, u_min=config.u_min, n0=config.n0)
    return result.counts, result.weights, result.fallback, result.p


def response_advantages(method: str, rewards: np.ndarray, counts: np.ndarray) -> np.ndarray:
    sizes = counts[counts > 0]
    if method == "grpo":
        return grpo_advantages(rewards, sizes=sizes)
    return maxrl_advantages(rewards, sizes=sizes)


def sequence_loss(model, prompts, responses, advantages, weights, agg: str, max_len: int,
                  pad_token_id: int, micro_batch: int = 256, backward: bool = True):
    """-w A log pi over every response token, aggregated by `agg` over the whole batch and
    accumulated over micro-batches (backward=True calls backward on each). Returns the loss
    value and the mean token entropy of the policy on the responses."""
    device = next(model.parameters()).device
    total = (sum(len(r) for r in responses) if agg == "token-mean"
             else len(responses) * max_len)
    loss_value, entropy_sum, tokens = 0.0, 0.0, 0
    for start in range(0, len(responses), micro_batch):
        part = range(start, min(start + micro_batch, len(responses)))
        rows = [prompts[i] + responses[i] for i in part]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        target_mask = torch.zeros(len(rows), width - 1)
        for j, i in enumerate(part):
            ids[j, :len(rows[j])] = torch.tensor(rows[j])
            attention[j, :len(rows[j])] = 1
            target_mask[j, len(prompts[i]) - 1:len(rows[j]) - 1] = 1  # positions predicting
        ids, attention, target_mask = ids.to(device), attention.to(device), target_mask.to(device)
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        chosen = log_probs.gather(2, ids[:, 1:, None])[..., 0]
        scale = torch.as_tensor(np.asarray(advantages)[list(part)], dtype=torch.float32,
                                device=device)
        w = torch.as_tensor(np.asarray(weights)[list(part)], dtype=torch.float32, device=device)
        loss = policy_loss(chosen, scale, target_mask, w, mode=agg, max_len=max_len, total=total)
        if backward:
            loss.backward()
        with torch.no_grad():
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            entropy_sum += float((entropy * target_mask).sum())
            tokens += int(target_mask.sum())
        loss_value += float(loss.detach())
    return loss_value, entropy_sum / max(tokens, 1)


def rl_step(run: RLRun) -> None:
    config, task = run.config, run.task
    ids = common.next_batch(run, len(task.train_prompts))
    counts, weights, fallback, estimates = plan(run, ids)
    if estimates is not None and not fallback:
        run.allocations.extend(zip([run.step] * ids.size, ids.tolist(), estimates.tolist(),
                                   counts.tolist(), strict=True))
    prompts = [task.train_prompts[i] for i in ids]
    responses = run.sample(prompts, counts, stream=0)
    owner = np.repeat(np.arange(ids.size), counts)
    rewards = np.array([task.reward("train", int(ids[o]), r)
                        for o, r in zip(owner, responses, strict=True)])
    run.history.record(ids[owner], rewards)
    advantages = response_advantages(config.method, rewards, counts)
    run.model.train()
    run.optimizer.zero_grad(set_to_none=True)
    _, entropy = sequence_loss(run.model, [prompts[o] for o in owner], responses, advantages,
                               weights[owner], config.agg, config.max_new_tokens,
                               task.pad_token_id, config.micro_batch)
    norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.grad_clip)
    run.optimizer.step()
    successes = np.bincount(owner, weights=rewards, minlength=ids.size)
    kept = counts > 0
    run.log("train_reward", rewards.mean())
    run.log("mixed_groups", np.mean((successes[kept] > 0) & (successes[kept] < counts[kept])))
    run.log("token_entropy", entropy)
    run.log("response_length", np.mean([len(r) for r in responses]))
    run.log("grad_norm", float(norm))
    run.log("allocation_spread", counts[kept].std() / config.n0)
    run.log("history_fallback", float(fallback))
    run.step += 1


def evaluate(run: RLRun, samples: int, stream: int) -> np.ndarray:
    """Correct responses out of `samples` for every held-out prompt."""
    task = run.task
    counts = np.full(len(task.val_prompts), samples)
    responses = run.sample(task.val_prompts, counts, stream)
    owner = np.repeat(np.arange(len(task.val_prompts)), samples)
    rewards = np.array([task.reward("val", int(o), r)
                        for o, r in zip(owner, responses, strict=True)])
    return np.bincount(owner, weights=rewards, minlength=len(task.val_prompts)).astype(int)


def log_validation(run: RLRun, correct: np.ndarray, samples: int, ks, prefix: str) -> None:
    for k in ks:
        run.log(f"{prefix}pass@{k}", pass_at_k(samples, correct, k).mean())


def final_counts_path(out: str | Path) -> Path:
    return Path(out) / "final_counts.csv"


def allocation_table(run: RLRun) -> pd.DataFrame:
    return pd.DataFrame(run.allocations, columns=["step", "prompt", "estimate", "rollouts"])
