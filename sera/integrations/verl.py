"""SERA inside verl 0.9.1 (pinned: VERL_VERSION), loaded from the command line, no fork.

Importing this module registers two things with verl:

- the advantage estimator `sera_maxrl` (`algorithm.adv_estimator=sera_maxrl`): MaxRL over each
  prompt's group (verl's uid) of whatever size it has, times the multiplicity weight n0 / N_q,
  where n0 is the batch's mean group size (the rollouts per step over the prompts per step:
  rollout.n under SERA, whose counts keep that total);
- the V1 trainer mode `sera_sync` (`trainer.v1.trainer_mode=sera_sync`): verl's synchronous
  trainer, except that each batch is planned from a `sera.SuccessHistory` keyed by the dataset
  row (`index`) before it leaves for rollout, each prompt's count going through verl's per-prompt
  field `__rollout_n__`; the outcomes are recorded once advantages are computed, the history is
  folded after every pass over the training set and saved in (and restored from) verl's
  checkpoints. The rollouts per step stay train_batch_size x rollout.n, so verl's dispatch,
  mini-batches and padding are unchanged.

Both must be registered in the Ray workers that use them: pass
`+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=sera.integrations.verl.setup`.
The README ("Scaling out") has the full GSM8K / SmolLM2 command and a multi-node one.

Loss aggregation: sera's token-mean is `actor_rollout_ref.actor.loss_agg_mode=token-mean`; sera's
seqnorm is `loss_agg_mode=seq-mean-token-sum-norm` together with
`actor_rollout_ref.actor.loss_scale_factor=<data.max_response_length>` (verl's default divides
by each micro-batch's padded width instead). PPO-clip is linear in the advantage, so folding
n0 / N_q into the advantage is the weighted loss (not for clip_cov / kl_cov).

The observability safeguard (which gives some prompts no rollouts) is refused here: verl's replay
buffer waits for every submitted prompt.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os

import numpy as np
import torch
import verl
from omegaconf import open_dict
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from sera.estimators import maxrl_advantages, multiplicity_weights
from sera.trainers import methods
from sera.trainers.config import AllocatorConfig

VERL_VERSION = "0.9.1"
ESTIMATOR = "sera_maxrl"
MODE = "sera_sync"
COUNT_KEY = "__rollout_n__"
"""The per-prompt field verl's V1 agent loop reads a prompt's rollout count from."""
HISTORY_FILE = "sera_history.json"

logger = logging.getLogger(__name__)

if verl.__version__ != VERL_VERSION:
    logger.warning("sera.integrations.verl was written against verl %s; found %s. Run `make "
                   "test-integrations` against it before trusting a run.", VERL_VERSION,
                   verl.__version__)


def setup() -> None:
    """Ray's worker_process_setup_hook: importing this module registered everything."""


@core_algos.register_adv_est(ESTIMATOR)
def compute_sera_maxrl_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                 index: np.ndarray, config=None, **_):
    """(advantages, returns), both (responses, response_length): the weighted MaxRL advantage of
    each response, broadcast over its tokens. The reward of a response is its token rewards'
    sum, a success indicator in [0, 1]."""
    scores = (token_level_rewards * response_mask).sum(dim=-1)
    _, groups = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    sizes = np.bincount(groups)
    weights = multiplicity_weights(sizes, n0=scores.shape[0] / sizes.size)[groups]
    advantages = maxrl_advantages(scores.detach().double().cpu(), groups=torch.as_tensor(groups))
    weights = torch.as_tensor(weights, dtype=torch.float64)
    per_token = (advantages * weights).to(token_level_rewards.dtype)[:, None] * response_mask
    return per_token, per_token


@dataclasses.dataclass
class SeraPlanner:
    """Plans each batch from the success history and keeps the history's bookkeeping: the part of
    the `sera_sync` trainer mode that does not depend on Ray or TransferQueue."""

    n_prompts: int
    n0: int
    allocator: AllocatorConfig = dataclasses.field(default_factory=AllocatorConfig)

    def __post_init__(self):
        if self.allocator.u_min is not None:
            raise ValueError("the observability safeguard (u_min) gives some prompts no rollouts, "
                             "and verl's replay buffer waits for every prompt it was sent; use "
                             "u_min=None with verl")
        self.history = self.allocator.history(self.n_prompts)
        self.pending: dict[str, int] = {}  # uid -> dataset row, for prompts out for rollout
        self.seen = 0  # prompts recorded since the last fold

    def plan(self, batch) -> np.ndarray:
        """Set each prompt's `__rollout_n__` in verl's batch (a TensorDict with `index` and `uid`)
        and return the counts."""
        rows = np.asarray(batch["index"]).astype(np.int64).reshape(-1)
        uids = [str(u) for u in batch["uid"]]
        allocation = methods.plan(methods.METHODS["sera"], self.allocator, self.n0, rows, None,
                                  self.history)
        counts = np.asarray(allocation.counts, dtype=np.int64)
        tu.assign_non_tensor_stack(batch, COUNT_KEY, [int(n) for n in counts])
        self.pending.update(zip(uids, rows.tolist(), strict=True))
        self.last = allocation
        return counts

    def record(self, uids, scores) -> None:
        """Queue the outcomes of scored responses (one uid and reward each); fold the history
        once a whole pass over the training set has been recorded."""
        uids = [str(u) for u in uids]
        missing = sorted(set(uids) - set(self.pending))
        if missing:
            raise KeyError(f"responses of prompts that were never planned: uid {missing[0]}")
        self.history.record(np.array([self.pending[u] for u in uids], dtype=np.int64),
                            np.asarray(scores, dtype=float))
        done = set(uids)
        for uid in done:
            del self.pending[uid]
        self.seen += len(done)
        while self.seen >= self.n_prompts:
            self.history.end_epoch()
            self.seen -= self.n_prompts

    def state_dict(self) -> dict:
        state = {k: v.tolist() if isinstance(v, np.ndarray) else v
                 for k, v in self.history.state_dict().items()}
        return {"history": state, "seen": self.seen, "n0": self.n0,
                "allocator": dataclasses.asdict(self.allocator)}

    def load_state_dict(self, state: dict) -> None:
        if state["history"]["successes"].__len__() != self.n_prompts:
            raise ValueError(f"the saved history covers {len(state['history']['successes'])} "
                             f"prompts, the training set has {self.n_prompts}")
        self.history.load_state_dict(state["history"])
        self.seen = int(state["seen"])

    def save(self, folder) -> str:
        path = os.path.join(folder, HISTORY_FILE)
        os.makedirs(folder, exist_ok=True)
        with open(path, "w") as f:
            json.dump(self.state_dict(), f)
        return path

    def load(self, folder) -> None:
        path = os.path.join(folder, HISTORY_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing: the checkpoint was not written by the "
                                    f"{MODE} trainer mode, so the success history cannot resume")
        with open(path) as f:
            self.load_state_dict(json.load(f))


def allocator_from_config(config) -> AllocatorConfig:
    """AllocatorConfig from the optional `+sera.*` keys of verl's configuration (n_min, n_max,
    rounding, history_rule, history_gamma, history_weight)."""
    options = dict(config.get("sera", None) or {})
    names = {f.name for f in dataclasses.fields(AllocatorConfig)}
    unknown = set(options) - names
    if unknown:
        raise ValueError(f"unknown sera options {sorted(unknown)}; known: {sorted(names)}")
    if "history_prior" in options:
        options["history_prior"] = tuple(options["history_prior"])
    return AllocatorConfig(**options)


@register_trainer(MODE)
class SeraTrainerSync(PPOTrainerSync):
    """verl's synchronous V1 trainer with SERA's per-prompt rollout counts (see the module text)."""

    def __init__(self, config, *args, **kwargs):
        # verl picks its replay buffer and prompt bookkeeping by `trainer_mode == "sync"`; this
        # mode is the sync trainer, so it runs under that name once main_ppo has chosen the class.
        config = copy.deepcopy(config)
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        super().__init__(config, *args, **kwargs)

    @property
    def sera(self) -> SeraPlanner:
        if getattr(self, "_sera", None) is None:
            self._sera = SeraPlanner(len(self.train_dataloader.dataset),
                                     int(self.config.actor_rollout_ref.rollout.n),
                                     allocator_from_config(self.config))
        return self._sera

    def _submit_batch_to_rollout(self, batch):
        counts = self.sera.plan(batch)
        logger.info("sera: %d prompts, counts %d..%d%s", len(counts), counts.min(), counts.max(),
                    " (uniform: some prompts have no estimate yet)" if self.sera.last.fallback
                    else "")
        return super()._submit_batch_to_rollout(batch)

    def _compute_advantage(self, batch, metrics: dict):
        from verl.trainer.ppo.v1.trainer_base import tq

        batch = super()._compute_advantage(batch, metrics)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=["uid", "rm_scores"])
        padded = data.to_padded_tensor()
        uids = padded["uid"]
        uids = uids.tolist() if hasattr(uids, "tolist") else list(uids)
        self.sera.record(uids, padded["rm_scores"].sum(dim=-1).tolist())
        last = self.sera.last
        metrics["sera/fallback"] = float(last.fallback)
        metrics["sera/max_count"] = float(np.max(last.counts))
        metrics["sera/min_count"] = float(np.min(last.counts))
        return batch

    def _save_checkpoint(self):
        super()._save_checkpoint()
        self.sera.save(os.path.join(self.config.trainer.default_local_dir,
                                    f"global_step_{self.global_steps}"))

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps == 0:
            return
        trainer = self.config.trainer
        folder = trainer.resume_from_path if trainer.resume_mode == "resume_path" else \
            os.path.join(os.path.abspath(trainer.default_local_dir),
                         f"global_step_{self.global_steps}")
        self.sera.load(folder)
