"""SERA inside TRL: `SeraGRPOTrainer`, a GRPOTrainer whose prompts get their own rollout counts.

    from sera.integrations.gsm8k import trl_reward
    from sera.integrations.trl import SeraGRPOTrainer
    trainer = SeraGRPOTrainer(model=..., reward_funcs=trl_reward, args=GRPOConfig(
        num_generations=8, loss_type="dr_grpo", max_completion_length=1024, ...),
        train_dataset=dataset)   # columns: prompt, answer
    trainer.train()

What changes against GRPOTrainer (TRL 1.16.0, pinned: TRL_VERSION):

- Counts. TRL's RepeatSampler puts each prompt num_generations (n0) times into the generation
  batch. When the batch reaches generation, its B prompts are replanned: the rows are regrouped
  so prompt q fills N_q of them, with N_q from `SuccessHistory.plan` over the same budget B * n0
  (so batch shapes, gradient accumulation and `steps_per_generation` are untouched). Planning
  here rather than inside the sampler is deliberate: accelerate's data loader draws one batch
  ahead, so a sampler would plan the first batch of an epoch before the last batch of the epoch
  before it had been scored.
- Advantages. TRL's grouped advantages (it reshapes rewards by num_generations, which is wrong
  for ragged groups) are replaced by MaxRL over each prompt's own group times n0 / N_q. TRL's
  losses are linear in the advantage, so this is the weighted loss; `loss_type="dr_grpo"` is
  sera's seqnorm, `"dapo"` its token-mean.
- History. Every scored rollout is recorded under its dataset row (a `sera_row` column is added
  to the training set) and the estimates are folded once per pass over the data; the history is
  saved in each checkpoint (`sera_history.json`) and restored on `resume_from_checkpoint`.
- Rewards must be success indicators in [0, 1] (their weighted sum over reward functions).

Colocated vLLM (`use_vllm=True, vllm_mode="colocate"`) generates one completion per row, so ragged
rows pass through; server mode deduplicates prompts by `prompts[::num_generations]`, which
breaks with ragged rows, and is refused. With several processes, each process's part of the
generation batch must hold whole groups (per_device_train_batch_size * steps_per_generation a
multiple of num_generations); the history is gathered so every process plans from the same one.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os

import numpy as np
import torch
import trl
from accelerate.utils import gather_object
from trl import GRPOTrainer

from sera.estimators import maxrl_advantages
from sera.trainers import methods
from sera.trainers.config import AllocatorConfig

TRL_VERSION = "1.16.0"
ROW = "sera_row"
"""Column added to the training set: the dataset row, which keys the success history."""
HISTORY_FILE = "sera_history.json"
LOG_KEEP = 64
"""Generation batches kept in `SeraGRPOTrainer.sera_log` (a paper-scale step holds 32,768
rewards)."""

if trl.__version__ != TRL_VERSION:
    import warnings

    warnings.warn(f"sera.integrations.trl was written against TRL {TRL_VERSION}; found "
                  f"{trl.__version__}. Run `make test-integrations` against it before trusting "
                  f"a run.", stacklevel=2)


class SeraGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with SERA's per-prompt rollout counts and weighted MaxRL advantages (see the
    module text). `allocator` sets n_min, n_max, the rounding, the observability safeguard and the
    history's update rule, as in sera's own trainers."""

    def __init__(self, *args, allocator: AllocatorConfig | None = None, **kwargs):
        self.sera_allocator = allocator or AllocatorConfig()
        training_args = kwargs.get("args")
        if training_args is not None and training_args.use_vllm \
                and training_args.vllm_mode == "server":
            raise ValueError("SeraGRPOTrainer supports vLLM in colocate mode only: TRL's server "
                             "mode deduplicates prompts by prompts[::num_generations], which "
                             "breaks with per-prompt counts. Set vllm_mode='colocate'.")
        dataset = kwargs.get("train_dataset")
        if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset,
                                                                             "column_names"):
            raise ValueError("SeraGRPOTrainer needs train_dataset, a map-style datasets.Dataset "
                             "(the history is keyed by its rows; iterable datasets have none)")
        if ROW not in dataset.column_names:
            kwargs["train_dataset"] = dataset.add_column(ROW, list(range(len(dataset))))
        super().__init__(*args, **kwargs)
        self.sera_history = self.sera_allocator.history(len(self.train_dataset))
        self.sera_prompts_seen = 0  # prompts scored since the last epoch boundary, all processes
        # The last LOG_KEEP generation batches: ids, counts, rewards, advantages, fallback.
        self.sera_log: collections.deque[dict] = collections.deque(maxlen=LOG_KEEP)
        self._sera_rewards = None

    # ------------------------------------------------------------------------------ planning
    def _sera_groups(self, inputs) -> tuple[np.ndarray, list[dict]]:
        """Dataset rows of the batch's prompts and one input row each, checked to come in whole
        groups of num_generations consecutive rows (as TRL's RepeatSampler makes them)."""
        rows = [int(x[ROW]) for x in inputs]
        g = self.num_generations
        if len(rows) % g or any(rows[i:i + g] != [rows[i]] * g for i in range(0, len(rows), g)):
            raise ValueError(
                f"this process's generation batch must hold whole groups of num_generations = "
                f"{g} identical prompts; got rows {rows[:2 * g]}... Make "
                f"per_device_train_batch_size * steps_per_generation a multiple of "
                f"num_generations.")
        return np.array(rows[::g], dtype=np.int64), [inputs[i] for i in range(0, len(rows), g)]

    def sera_plan(self, ids: np.ndarray):
        """The allocation of this batch's budget len(ids) * n0 from the history."""
        return methods.plan(methods.METHODS["sera"], self.sera_allocator, self.num_generations,
                            ids, None, self.sera_history)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._sera_rewards = rewards  # gathered over processes, (rows, reward functions)
        return rewards

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation keeps TRL's groups
            return super()._generate_and_score_completions(inputs)
        ids, firsts = self._sera_groups(inputs)
        allocation = self.sera_plan(ids)
        counts = np.asarray(allocation.counts)
        kept = counts > 0
        rows = [dict(first) for first, n in zip(firsts, counts, strict=True) for _ in range(int(n))]
        output = super()._generate_and_score_completions(rows)

        local = slice(self.accelerator.process_index * len(rows),
                      (self.accelerator.process_index + 1) * len(rows))
        per_func = self._sera_rewards.to(torch.float64)
        unscored = torch.isnan(per_func).all(dim=1)
        weights = self.reward_weights.to(per_func.device, torch.float64)
        rewards = torch.where(unscored, 0.0, (per_func * weights).nansum(dim=1)).cpu().numpy()
        if rewards.min() < 0 or rewards.max() > 1:
            raise ValueError(f"SERA's MaxRL advantages and success history need rewards in "
                             f"[0, 1] (success indicators); got values from {rewards.min():g} to "
                             f"{rewards.max():g}")
        mine = rewards[local]
        advantages = maxrl_advantages(mine, sizes=counts[kept]) \
            * np.repeat(allocation.weights[kept], counts[kept])
        output["advantages"] = torch.as_tensor(advantages, dtype=output["advantages"].dtype,
                                               device=output["advantages"].device)

        everyone = gather_object([(ids, counts)])  # every process's plan, in process order
        self.sera_history.record(np.concatenate([np.repeat(i, n) for i, n in everyone]), rewards)
        self.sera_log.append({"step": self.state.global_step, "ids": ids, "counts": counts,
                              "rewards": mine, "advantages": advantages,
                              "fallback": bool(allocation.fallback)})
        self._sera_fold(sum(len(i) for i, _ in everyone))
        metrics = self._metrics["train"]
        metrics["sera/fallback"].append(float(allocation.fallback))
        metrics["sera/max_count"].append(float(counts.max()))
        metrics["sera/prompts_kept"].append(float(kept.mean()))
        return output

    def _sera_fold(self, prompts: int) -> None:
        """Fold the history at each full pass over the training set."""
        self.sera_prompts_seen += prompts
        while self.sera_prompts_seen >= self.sera_history.n_prompts:
            self.sera_history.end_epoch()
            self.sera_prompts_seen -= self.sera_history.n_prompts

    # ---------------------------------------------------------------------------- checkpoints
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial),
                                  f"checkpoint-{self.state.global_step}")
            state = {k: v.tolist() if isinstance(v, np.ndarray) else v
                     for k, v in self.sera_history.state_dict().items()}
            state["prompts_seen"] = self.sera_prompts_seen
            state["allocator"] = dataclasses.asdict(self.sera_allocator)
            with open(os.path.join(folder, HISTORY_FILE), "w") as f:
                json.dump(state, f)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, HISTORY_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing: the checkpoint was not written by "
                                    f"SeraGRPOTrainer, so the success history cannot resume")
        with open(path) as f:
            state = json.load(f)
        self.sera_prompts_seen = int(state.pop("prompts_seen"))
        state.pop("allocator", None)
        self.sera_history.load_state_dict(state)
