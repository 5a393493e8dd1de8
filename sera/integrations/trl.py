"""SERA inside TRL: `SeraGRPOTrainer`, a GRPOTrainer whose prompts get their own rollout counts.

    from sera.integrations.gsm8k import trl_reward
    from sera.integrations.trl import SeraGRPOTrainer
    trainer = SeraGRPOTrainer(model=..., reward_funcs=trl_reward, args=GRPOConfig(
        num_generations=16, per_device_train_batch_size=16, steps_per_generation=4,
        loss_type="dr_grpo", max_completion_length=1024, ...),
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
  sera's seqnorm, `"dapo"` its token-mean. The logged `advantages` (the completions table) are
  SERA's.
- One plan over all processes. The step's prompts are gathered over processes, planned once
  (a `sera.integrations.planner.Planner`; every process holds the same history and so the same
  plan), laid out as one global batch, and each process generates its own slice of it (a
  prompt's group may straddle two processes, as TRL's own gathered rewards allow).
- History. Every scored rollout is recorded under its dataset row (a `sera_row` column is added
  to the training set); completions that no reward function could score (all NaN) are left
  out, as TRL leaves them out of its baselines. The estimates fold at the data loader's epoch
  (generation batches per epoch x prompts per generation batch: TRL's RepeatSampler drops the
  last partial batch); the history is saved in each checkpoint (`sera_history.json`) and
  restored on every process on `resume_from_checkpoint`.
- Rewards must be success indicators in [0, 1] (their weighted sum over reward functions).

Colocated vLLM (`use_vllm=True, vllm_mode="colocate"`) generates one completion per row, so ragged
rows pass through; server mode deduplicates prompts by `prompts[::num_generations]`, which
breaks with ragged rows, and is refused.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os

import numpy as np
import torch
import trl
from accelerate.utils import broadcast_object_list, gather_object
from trl import GRPOTrainer

from sera.integrations.planner import HISTORY_FILE, Planner, grouped_weighted_maxrl
from sera.trainers.config import AllocatorConfig

TRL_VERSION = "1.16.0"
ROW = "sera_row"
"""Column added to the training set: the dataset row, which keys the success history."""
LOG_KEEP = 64
"""Generation batches kept in `SeraGRPOTrainer.sera_log` (a paper-scale step holds 32,768
rewards)."""

if trl.__version__ != TRL_VERSION:
    import warnings

    warnings.warn(f"sera.integrations.trl was written against TRL {TRL_VERSION}; found "
                  f"{trl.__version__}. Run `make test-integrations` against it before trusting "
                  f"a run.", stacklevel=2)


def weighted_maxrl(rewards: np.ndarray, counts: np.ndarray, n0: int) -> np.ndarray:
    """SERA's advantage of each response of a batch laid out prompt by prompt (counts[q] rows
    for prompt q): MaxRL over the prompt's scored responses times n0 / (their number).

    Parameters
    ----------
    rewards : array of float
        One reward in [0, 1] per response; NaN for a response no reward function could score,
        which gets advantage 0 and is left out of its group.
    counts : array of int
        Responses per prompt, in the order of the rows.
    n0 : int
        Rollouts per prompt under uniform allocation.
    """
    rewards = np.asarray(rewards, dtype=float)
    groups = np.repeat(np.arange(len(counts)), counts)
    return grouped_weighted_maxrl(rewards, groups, ~np.isnan(rewards), n0)


class SeraGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with SERA's per-prompt rollout counts and weighted MaxRL advantages (see the
    module text). `allocator` sets n_min, n_max, the rounding, the observability safeguard and the
    history's update rule, as in sera's own trainers.

    Attributes
    ----------
    sera_planner : Planner
        The plan, the history and its epoch bookkeeping (the same on every process).
    sera_history : SuccessHistory
        The planner's history.
    sera_log : deque of dict
        The last LOG_KEEP generation batches over all processes: step, ids (dataset rows),
        counts, rewards (NaN where unscored), advantages and fallback.
    """

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
        prompts = self.args.generation_batch_size // self.num_generations
        n = len(self.train_dataset)
        if prompts > n:
            raise ValueError(f"a generation batch holds generation_batch_size / num_generations = "
                             f"{prompts} prompts, more than the {n} of train_dataset; lower "
                             f"per_device_train_batch_size or steps_per_generation")
        self.sera_planner = Planner(n, self.num_generations, self.sera_allocator,
                                    prompts_per_epoch=(n // prompts) * prompts)
        self.sera_log: collections.deque[dict] = collections.deque(maxlen=LOG_KEEP)
        self._sera_rewards = None

    @property
    def sera_history(self):
        """The success history (sera.SuccessHistory) the plans are made from."""
        return self.sera_planner.history

    # ------------------------------------------------------------------------------ planning
    def _sera_groups(self, inputs) -> tuple[np.ndarray, list[dict]]:
        """Dataset rows of the step's prompts over all processes and one input row each, checked
        to come in whole groups of num_generations consecutive rows (as TRL's RepeatSampler lays
        out the global generation batch)."""
        everyone = gather_object(list(inputs))  # process order is the sampler's order
        rows = [int(x[ROW]) for x in everyone]
        g = self.num_generations
        if len(rows) % g or any(rows[i:i + g] != [rows[i]] * g for i in range(0, len(rows), g)):
            raise ValueError(
                f"the generation batch must hold whole groups of num_generations = {g} identical "
                f"prompts in a row, as TRL's RepeatSampler lays them out; got rows "
                f"{rows[:2 * g]}... (a custom _get_train_sampler must repeat each prompt "
                f"num_generations times in a row)")
        return np.array(rows[::g], dtype=np.int64), [everyone[i] for i in range(0, len(rows), g)]

    def sera_plan(self, ids: np.ndarray):
        """The allocation of this step's budget len(ids) * n0 over its prompts (all processes)."""
        return self.sera_planner.plan(ids)

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
        everyone = [dict(first) for first, n in zip(firsts, counts, strict=True)
                    for _ in range(int(n))]
        local = slice(self.accelerator.process_index * len(inputs),
                      (self.accelerator.process_index + 1) * len(inputs))
        output = super()._generate_and_score_completions(everyone[local])

        per_func = self._sera_rewards.to(torch.float64)
        weights = self.reward_weights.to(per_func.device, torch.float64)
        rewards = (per_func * weights).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan  # unscored, as TRL marks them
        rewards = rewards.cpu().numpy()
        scored = rewards[~np.isnan(rewards)]
        if scored.size and (scored.min() < 0 or scored.max() > 1):
            raise ValueError(f"SERA's MaxRL advantages and success history need rewards in "
                             f"[0, 1] (success indicators); got values from {scored.min():g} to "
                             f"{scored.max():g}")
        advantages = weighted_maxrl(rewards, counts, self.num_generations)
        output["advantages"] = torch.as_tensor(advantages[local],
                                               dtype=output["advantages"].dtype,
                                               device=output["advantages"].device)
        logged = self._logs["advantages"]  # TRL logged its own grouped advantages: replace them
        for _ in range(min(len(logged), advantages.size)):
            logged.pop()
        logged.extend(advantages.tolist())

        self.sera_planner.record(np.repeat(ids, counts), rewards)
        self.sera_log.append({"step": self.state.global_step, "ids": ids, "counts": counts,
                              "rewards": rewards, "advantages": advantages,
                              "fallback": bool(allocation.fallback)})
        metrics = self._metrics["train"]
        metrics["sera/fallback"].append(float(allocation.fallback))
        metrics["sera/max_count"].append(float(counts.max()))
        metrics["sera/prompts_kept"].append(float((counts > 0).mean()))
        metrics["sera/unscored"].append(float(np.isnan(rewards).mean()))
        return output

    # ---------------------------------------------------------------------------- checkpoints
    def _save_checkpoint(self, model, trial):
        state = json.dumps(self.sera_planner.state_dict(), sort_keys=True)
        digests = gather_object([hashlib.sha256(state.encode()).hexdigest()])
        if len(set(digests)) != 1:
            raise RuntimeError(f"the processes' SERA histories differ ({len(set(digests))} "
                               f"versions at step {self.state.global_step}); they are planned and "
                               f"recorded from the same gathered data, so this is a bug")
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            self.sera_planner.save(os.path.join(self._get_output_dir(trial=trial),
                                                f"checkpoint-{self.state.global_step}"))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        # The main process reads the file and hands the state to every process, so a process on
        # a node without the file resumes the same history.
        state = [None]
        if self.accelerator.is_main_process:
            path = os.path.join(checkpoint, HISTORY_FILE)
            if os.path.exists(path):
                with open(path) as f:
                    state = [json.load(f)]
        state = broadcast_object_list(state)
        if state[0] is None:
            raise FileNotFoundError(f"{os.path.join(checkpoint, HISTORY_FILE)} is missing: the "
                                    f"checkpoint was not written by SeraGRPOTrainer, so the "
                                    f"success history cannot resume")
        self.sera_planner.load_state_dict(state[0])
