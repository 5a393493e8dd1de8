
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
  so prompt q fills N_q of them, with N_q from the planner over the same budget B * n0 (so batch
  shapes, gradient accumulation and `steps_per_generation` are untouched):

      TRL's rows    [ q0 q0 q0 q0 | q1 q1 q1 q1 | q2 q2 q2 q2 ]   B * n0 rows, n0 = 4
      SERA's rows   [ q0 q0 q0 q0 q0 q0 q0 | q1 q1 | q2 q2 q2 ]   N = 7, 2, 3: the same 12

  and every later step (rewards, advantages) reads the rows prompt by prompt with sizes N_q.
  Planning here rather than inside the sampler is deliberate: accelerate's data loader draws one
  batch ahead, so a sampler would plan the first batch of an epoch before the last batch of the
  epoch before it had been scored.
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
  restored on every process on `resume_from_checkpoint`. It carries a fingerprint of the
  training set's prompts in row order and the prompts per generation batch: a resume on other
  prompts (another set, order or filter) or with another batch is refused, naming the file and
  both values, and `resume_from_checkpoint=True` passes over a checkpoint whose save did not
  finish or holds a file cut short (`cut_short`), saying which and why.
- Rewards must be success indicators in [0, 1] (their weighted sum over reward functions).
- Resume at any step. A checkpoint can fall between the optimizer steps that one generation
  batch serves (`save_steps x gradient_accumulation_steps` not a multiple of
  `steps_per_generation x num_iterations`). The history saved there has recorded that batch
  already, so on resume it is generated again with the saved counts and neither replanned nor
  recorded (`Planner.replay`). Two things in TRL would make a resumed run draw other batches
  than the uninterrupted one, and the trainer sets both right: TRL restarts its micro-step
  counter at 0 on resume (every later batch would be generated off the data loader's generation
  boundaries), and its RepeatSampler draws each epoch's order from one running generator that a
  resume restarts (a resumed second epoch would see the first epoch's order again; the sampler
  here redraws the order of the epoch it is told, the same orders TRL draws without a resume).
  So the resumed run plans and records exactly what the uninterrupted run did. A finished run
  relaunched (its checkpoint at max_steps) trains nothing: transformers would take one more step.

Settings under which SERA's weighting or history would be wrong are refused by name
(`refuse_unsupported`): a KL term (`beta` != 0) or an entropy bonus (`entropy_coef`,
`use_adaptive_entropy`), which TRL adds per token without the weight n0 / N_q;
`multi_objective_aggregation="normalize_then_sum"` (rewards leave [0, 1]); vLLM server mode.
`scale_rewards` has no effect (SERA's MaxRL sets the advantages' scale), which is logged once.

Colocated vLLM (`use_vllm=True, vllm_mode="colocate"`) generates one completion per row, so ragged
rows pass through; server mode deduplicates prompts by `prompts[::num_generations]`, which
breaks with ragged rows, and is refused.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import inspect
import json
import logging
import os
import re
import zipfile

import numpy as np
import torch
import trl
from accelerate.utils import broadcast_object_list, gather_object
from safetensors import SafetensorError, safe_open
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from sera.integrations.planner import (
    HISTORY_FILE,
    Planner,
    fingerprint,
    grouped_weighted_maxrl,
    plan_metrics,
    read_state,
)
from sera.timing import timed
from sera.trainers.config import AllocatorConfig

TRL_VERSION = "1.16.0"
ROW = "sera_row"
"""Column added to the training set: the dataset row, which keys the success history."""
LOG_KEEP = 64
"""Generation batches kept in `SeraGRPOTrainer.sera_log` (a paper-scale step holds 32,768
rewards)."""

logger = logging.getLogger(__name__)

if trl.__version__ != TRL_VERSION:
    import warnings

    warnings.warn(f"sera.integrations.trl was written against TRL {TRL_VERSION}; found "
                  f"{trl.__version__}. Run `make test-integrations` against it before trusting "
                  f"a run.", stacklevel=2)


def weighted_maxrl(rewards: np.ndarray, counts: np.ndarray, n0: int) -> np.ndarray:
    """SERA's advantage of each response of a batch laid out prompt by prompt (counts[q] rows
    for prompt q): MaxRL over the prompt's scored responses times n0 / (their number).

        rewards   [ 1 0 0 1 0 1 0 | 0 nan | 1 1 0 ]   (R,), R = sum of counts
        counts    [       7       ,   2   ,   3   ]   (B,)
        groups    [ 0 0 0 0 0 0 0 | 1 1   | 2 2 2 ]   (R,), from counts; nan: left out

    Parameters
    ----------
    rewards : array of float, (R,)
        One reward in [0, 1] per response; NaN for a response no reward function could score,
        which gets advantage 0 and is left out of its group.
    counts : array of int, (B,)
        Responses per prompt, in the order of the rows.
    n0 : int
        Rollouts per prompt under uniform allocation.
    """
    rewards = np.asarray(rewards, dtype=float)
    groups = np.repeat(np.arange(len(counts)), counts)
    return grouped_weighted_maxrl(rewards, groups, ~np.isnan(rewards), n0)


def refuse_unsupported(args) -> None:
    """Raise ValueError, naming the setting, for GRPOConfig settings under which SERA's weighted
    MaxRL or its success history would be wrong; log once the settings SERA makes moot."""
    if args.use_vllm and args.vllm_mode == "server":
        raise ValueError("SeraGRPOTrainer supports vLLM in colocate mode only: TRL's server "
                         "mode deduplicates prompts by prompts[::num_generations], which "
                         "breaks with per-prompt counts. Set vllm_mode='colocate'.")
    if args.beta != 0.0:
        raise ValueError(f"beta = {args.beta} adds TRL's KL term per token without SERA's weight "
                         f"n0 / N_q, so a prompt's KL pull would grow with its rollout count; set "
                         f"beta=0.0 (MaxRL and the SERA paper train without a KL term)")
    if args.entropy_coef != 0.0 or args.use_adaptive_entropy:
        raise ValueError(f"entropy_coef = {args.entropy_coef} (use_adaptive_entropy = "
                         f"{args.use_adaptive_entropy}) adds TRL's entropy bonus without SERA's "
                         f"weight n0 / N_q, so a prompt's bonus would grow with its rollout count; "
                         f"set entropy_coef=0.0 and use_adaptive_entropy=False")
    if args.multi_objective_aggregation != "sum_then_normalize":
        raise ValueError(f"multi_objective_aggregation = {args.multi_objective_aggregation!r} "
                         f"normalizes each reward function before summing, so the summed reward is "
                         f"no success indicator in [0, 1]; SERA needs the weighted sum of the raw "
                         f"rewards: set multi_objective_aggregation='sum_then_normalize'")
    if args.scale_rewards != "none":
        logger.warning("scale_rewards = %r has no effect under SeraGRPOTrainer: SERA replaces "
                       "TRL's advantages by MaxRL's (which sets their scale) times n0 / N_q",
                       args.scale_rewards)


class EpochRepeatSampler(RepeatSampler):
    """TRL's RepeatSampler whose shuffled order depends on the epoch the data loader sets
    (`set_epoch`), not on how many epochs this object has iterated: epoch k gets the k-th order
    TRL's sampler draws from its seed, also in a run resumed in epoch k."""

    epoch: int | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        if self.shuffle and self.seed is not None and self.epoch is not None:
            self.generator.manual_seed(self.seed)
            for _ in range(self.epoch):  # the orders of the epochs before
                torch.randperm(self.num_samples, generator=self.generator)
        yield from super().__iter__()


TRAINER_STATE = "trainer_state.json"
"""transformers writes it last in a checkpoint, after the weights and the optimizer."""


def checkpoint_folders(output_dir) -> list[str]:
    """The output_dir/checkpoint-N folders, newest (highest N) first."""
    found = []
    if os.path.isdir(output_dir):
        for name in os.listdir(output_dir):
            match = re.fullmatch(r"checkpoint-(\d+)", name)
            if match and os.path.isdir(os.path.join(output_dir, name)):
                found.append((int(match.group(1)), os.path.join(output_dir, name)))
    return [folder for _, folder in sorted(found, reverse=True)]


def last_complete_checkpoint(output_dir, planner: Planner | None = None) -> str:
    """The newest output_dir/checkpoint-N whose save finished (trainer_state.json is there), whose
    weight, optimizer and state files are whole (`cut_short`) and whose sera_history.json resumes
    `planner` (without one: is there and reads as JSON). Newer checkpoints passed over (a save
    killed half-way, a file cut short by a copy or a full disk, a history kept with other
    settings) are logged with the reason; ValueError naming each checkpoint and why when none
    is usable."""
    skipped = []
    for folder in checkpoint_folders(output_dir):
        why = _unusable(folder, planner)
        if why is None:
            for other, reason in skipped:
                logger.warning("resuming from %s, not from the newer %s: %s", folder, other,
                               reason)
            return folder
        skipped.append((folder, why))
    reasons = "".join(f"\n  {folder}: {why}" for folder, why in skipped) or " (there is none)"
    raise ValueError(f"no checkpoint in {output_dir} resumes this run (each needs "
                     f"{TRAINER_STATE}, whole weight and optimizer files and a {HISTORY_FILE} "
                     f"kept on this run's prompts and settings){reasons}")


def _unusable(folder, planner: Planner | None) -> str | None:
    """Why the checkpoint folder cannot be resumed from, or None."""
    if not os.path.isfile(os.path.join(folder, TRAINER_STATE)):
        return f"no {TRAINER_STATE} (its save did not finish)"
    why = cut_short(folder)
    if why is not None:
        return why
    path = os.path.join(folder, HISTORY_FILE)
    try:
        state = read_state(path)
    except (OSError, ValueError) as exc:
        if planner is None:
            return str(exc)
        state = {}  # planner.loads_from says why, in its words
    if planner is not None:
        return other_batches(state, planner, path) or planner.loads_from(folder)
    return None


def cut_short(folder) -> str | None:
    """Why a weight, optimizer or state file of the checkpoint folder is not whole (a copy or a
    full disk cut it after trainer_state.json was written), naming the file; None when all are.
    Reads only what indexes the tensors, never the tensors: a .safetensors file's header, whose
    offsets safetensors checks against the file's size, and the zip directory that torch.save
    writes at the end of a .pt, .pth or .bin file."""
    for root, folders, names in os.walk(folder):
        folders.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            try:
                if name.endswith(".safetensors"):
                    with safe_open(path, framework="pt"):
                        pass
                elif name.endswith((".pt", ".pth", ".bin")):
                    with open(path, "rb") as f:
                        legacy = f.read(1) == b"\x80"  # torch's pre-1.6 format: a bare pickle
                    if not legacy:
                        zipfile.ZipFile(path).close()
            except (SafetensorError, zipfile.BadZipFile, OSError) as exc:
                return f"{path} is cut short or damaged ({exc})"
    return None


def other_batches(state: dict, planner: Planner, path) -> str | None:
    """Why a saved planner state cannot resume a run with another number of prompts per
    generation batch, in TRL's settings (the planner refuses it too, as batch_size), or None.
    Another num_generations changes the batch too: the planner names that first (as n0)."""
    saved, now = state.get("batch_size"), planner.batch_size
    if saved is None or now is None or saved == now or state.get("n0") != planner.n0:
        return None
    return (f"{path}: the history was kept with {saved} prompts per generation batch, this run "
            f"has {now} (generation_batch_size / num_generations, with generation_batch_size = "
            f"per_device_train_batch_size x processes x steps_per_generation): the data loader's "
            f"position would no longer match the history's epoch, and prompts would be planned "
            f"twice in one epoch; resume with the saved per_device_train_batch_size, "
            f"steps_per_generation (or generation_batch_size) and number of processes, or start "
            f"a new run in another output_dir")


def refuse_incomplete(checkpoint) -> None:
    """Refuse a checkpoint whose save did not finish (no trainer_state.json) or that holds a file
    cut short, naming the newest usable one beside it."""
    if not os.path.isdir(checkpoint):
        return
    if not os.path.isfile(os.path.join(checkpoint, TRAINER_STATE)):
        why = f"{checkpoint} has no {TRAINER_STATE}: its save was interrupted"
    else:
        why = cut_short(checkpoint)
    if why is not None:
        try:
            other = f"; resume from {last_complete_checkpoint(os.path.dirname(checkpoint))}"
        except ValueError:
            other = ""
        raise ValueError(f"{why}{other}")


def zero_std_share(rewards: np.ndarray, counts: np.ndarray) -> float:
    """Share of the batch's prompts (those given rollouts) whose scored rewards are all equal:
    TRL's `frac_reward_zero_std`, over SERA's groups (counts[q] rows for prompt q)."""
    rewards = np.asarray(rewards, dtype=float)
    edges = np.cumsum(np.r_[0, counts])
    groups = [rewards[a:b][~np.isnan(rewards[a:b])] for a, b in zip(edges[:-1], edges[1:],
                                                                       strict=True) if b > a]
    return float(np.mean([g.size == 0 or np.ptp(g) == 0 for g in groups])) if groups else 0.0


_SERA_FIELDS = ("n_min", "n_max", "n_max_factor", "rounding", "u_min", "history_rule",
                "history_gamma", "history_weight", "history_prior")
"""AllocatorConfig's fields that SeraGRPOConfig carries, each as sera_<name>."""


@dataclasses.dataclass
class SeraGRPOConfig(GRPOConfig):
    """GRPOConfig with SERA's allocator settings, so that TrlParser, a YAML config and the `trl`
    command line set them and they are saved with the run's arguments. Each sera_<name> is
    AllocatorConfig.<name> (sera.trainers.config), with the same default and meaning."""

    sera_n_min: int = dataclasses.field(
        default=2, metadata={"help": "SERA: fewest rollouts a kept prompt gets (>= 2)."})
    sera_n_max: int | None = dataclasses.field(
        default=None, metadata={"help": "SERA: most rollouts a prompt gets; unset: "
                                        "sera_n_max_factor x num_generations."})
    sera_n_max_factor: int = dataclasses.field(
        default=8, metadata={"help": "SERA: n_max as a multiple of num_generations."})
    sera_rounding: str = dataclasses.field(
        default="paper", metadata={"help": "SERA: the waterline's rounding, 'paper' or 'exact'."})
    sera_u_min: float | None = dataclasses.field(
        default=None, metadata={"help": "SERA: the observability-guided selection's threshold; "
                                        "unset: the method's own, 0 turns it off."})
    sera_history_rule: str | None = dataclasses.field(
        default=None, metadata={"help": "SERA: 'counts' (the paper's) or 'rate'; unset: the "
                                        "method's own."})
    sera_history_gamma: float = dataclasses.field(
        default=0.5, metadata={"help": "SERA: discount per epoch of the historical evidence."})
    sera_history_weight: float = dataclasses.field(
        default=16.0, metadata={"help": "SERA: weight of an epoch's rate under the rate rule."})
    sera_history_prior: list[float] = dataclasses.field(
        default_factory=lambda: [1.0, 1.0],
        metadata={"help": "SERA: the Beta(alpha, beta) prior of the historical estimate, two "
                          "numbers."})

    def __post_init__(self):
        # Before GRPOConfig's own checks and long before a model loads: a bad sera_* value
        # (`--sera_history_rule x`, `--sera_history_gamma 7`) stops the parser, named.
        allocator = self.sera_allocator()
        super().__post_init__()
        # After them num_generations (SERA's n0) is final: bounds that cannot spend it stop here.
        why = allocator.infeasible(self.num_generations)
        if why is not None:
            names = {"n0": "num_generations", "n_min": "sera_n_min", "n_max": "sera_n_max"}
            why = re.sub(r"\b(n0|n_min|n_max)\b", lambda m: names[m[1]], why)
            raise ValueError(f"{why}; set sera_n_min <= num_generations <= sera_n_max (unset "
                             f"sera_n_max is sera_n_max_factor x num_generations)")

    def sera_allocator(self) -> AllocatorConfig:
        """The AllocatorConfig these arguments hold; a bad value raises ValueError naming its
        sera_* field."""
        try:
            return AllocatorConfig(**{name: getattr(self, f"sera_{name}")
                                      for name in _SERA_FIELDS})
        except (ValueError, TypeError) as exc:
            raise ValueError(f"sera_{exc}") from exc


class SeraGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with SERA's per-prompt rollout counts and weighted MaxRL advantages (see the
    module text): the paper's sera by default (counts rule, selection at sera.methods.U_MIN).
    `allocator` sets n_min, n_max, the rounding, the selection and the history's update rule, as
    in sera's own trainers.

    Attributes
    ----------
    sera_planner : Planner
        The plan, the history and its epoch bookkeeping (the same on every process).
    sera_history : SuccessHistory
        The planner's history.
    sera_log : deque of dict
        The last LOG_KEEP generation batches over all processes: step, ids (dataset rows),
        counts, rewards (NaN where unscored), advantages, fallback, and replayed (the batch a
        resume found already recorded in the checkpoint's history).
    """

    def __init__(self, *args, allocator: AllocatorConfig | None = None, **kwargs):
        # GRPOTrainer's own order (model, reward_funcs, args, train_dataset, ...) or keywords.
        bound = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments
        bound.pop("self")
        if isinstance(bound.get("args"), SeraGRPOConfig):
            if allocator is not None and allocator != bound["args"].sera_allocator():
                raise ValueError("allocator= and SeraGRPOConfig's sera_* fields both set the "
                                 "allocator and differ; give it once (the sera_* fields are "
                                 "saved with the run's arguments)")
            allocator = bound["args"].sera_allocator()
        self.sera_allocator = allocator or AllocatorConfig()
        if bound.get("args") is not None:
            refuse_unsupported(bound["args"])
            self._refuse_infeasible(bound["args"].num_generations)  # before the model loads
        if bound.get("rollout_func") is not None:
            raise ValueError("rollout_func: TRL hands a custom rollout function one prompt per "
                             "num_generations rows (prompts[::num_generations]), which picks the "
                             "wrong prompts once SERA gives prompts different counts; leave "
                             "rollout_func unset (colocated vLLM is supported)")
        dataset = bound.get("train_dataset")
        if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset,
                                                                             "column_names"):
            raise ValueError("SeraGRPOTrainer needs train_dataset, a map-style datasets.Dataset "
                             "(the history is keyed by its rows; iterable datasets have none)")
        if "prompt" not in dataset.column_names:
            raise ValueError(f"train_dataset needs TRL's 'prompt' column (strings or chat "
                             f"messages); got columns {dataset.column_names}")
        prompts = list(dataset["prompt"])  # in row order: the history is keyed by rows
        if ROW in dataset.column_names:
            prompts = [prompts[i] for i in np.argsort(dataset[ROW], kind="stable")]
        else:
            bound["train_dataset"] = dataset.add_column(ROW, list(range(len(dataset))))
        super().__init__(**bound)
        if bound.get("args") is None:
            refuse_unsupported(self.args)  # GRPOTrainer's default configuration
        per_batch = self.args.generation_batch_size // self.num_generations
        n = len(self.train_dataset)
        if per_batch > n:
            raise ValueError(f"a generation batch holds generation_batch_size / num_generations = "
                             f"{per_batch} prompts, more than the {n} of train_dataset; lower "
                             f"per_device_train_batch_size or steps_per_generation")
        self._refuse_infeasible(self.num_generations)
        self.sera_planner = Planner(n, self.num_generations, self.sera_allocator,
                                    prompts_per_epoch=(n // per_batch) * per_batch,
                                    prompts=fingerprint(prompts), batch_size=per_batch)
        self.sera_log: collections.deque[dict] = collections.deque(maxlen=LOG_KEEP)
        self._sera_rewards = None
        self._sera_replay = False  # resumed inside a generation batch the history has recorded

    def _refuse_infeasible(self, n0: int) -> None:
        why = self.sera_allocator.infeasible(n0)
        if why is not None:
            raise ValueError(f"num_generations = {n0} is SERA's n0, the mean count per prompt, "
                             f"which the allocator's bounds cannot spend: {why}")

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

    def _get_train_sampler(self, dataset=None):
        sampler = super()._get_train_sampler(dataset)
        sampler.__class__ = EpochRepeatSampler  # same arguments, an order fixed by the epoch
        return sampler

    @timed
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
        replayed = self._sera_replay
        if replayed:  # planned and recorded before the checkpoint: same counts, no new record
            self._sera_replay = False
            counts, fallback = self.sera_planner.replay(ids)
        else:
            allocation = self.sera_plan(ids)
            counts, fallback = np.asarray(allocation.counts), bool(allocation.fallback)
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

        estimates = self.sera_planner.history.estimate(ids)[0]  # as planned, before recording
        if not replayed:
            self.sera_planner.record(np.repeat(ids, counts), rewards)
        self.sera_log.append({"step": self.state.global_step, "ids": ids, "counts": counts,
                              "rewards": rewards, "advantages": advantages,
                              "fallback": fallback, "replayed": replayed})
        metrics = self._metrics["train"]
        # TRL computed this over windows of num_generations rows, which straddle SERA's groups.
        metrics["frac_reward_zero_std"][-1] = zero_std_share(rewards, counts)
        for key, value in plan_metrics(counts, estimates, fallback,
                                       self.sera_planner.history.epoch).items():
            metrics[key].append(value)  # the keys of planner.METRICS, as verl's plug-in logs
        for key, value in self.sera_planner.timing_metrics().items():
            metrics[key].append(value)  # planner.TIMING_METRICS, from the second batch on
        metrics["sera/unscored"].append(float(np.isnan(rewards).mean()))
        return output

    # ---------------------------------------------------------------------------- checkpoints
    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """GRPOTrainer.train; resume_from_checkpoint=True takes the newest checkpoint whose save
        finished and whose history resumes this run (transformers takes the newest folder, which
        a crash inside a save leaves half written; `last_complete_checkpoint` logs what it
        passed over), and a named checkpoint without trainer_state.json is refused."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir,
                                                              self.sera_planner)
        elif isinstance(resume_from_checkpoint, str | os.PathLike):
            refuse_incomplete(resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _run_epoch(self, *args, **kwargs):
        # A run resumed at max_steps (a finished job relaunched) resumes inside its last epoch
        # unless max_steps is a whole number of epochs, and transformers checks max_steps only
        # after a step: it would take one more, generating, planning and recording one more
        # batch and saving a checkpoint past max_steps.
        if self.state.global_step >= self.state.max_steps:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    def _save_checkpoint(self, model, trial):
        state = json.dumps(self.sera_planner.state_dict(), sort_keys=True)
        digests = gather_object([hashlib.sha256(state.encode()).hexdigest()])
        if len(set(digests)) != 1:
            raise RuntimeError(f"the processes' SERA histories differ ({len(set(digests))} "
                               f"versions at step {self.state.global_step}); they are planned and "
                               f"recorded from the same gathered data, so this is a bug")
        # The history goes into the checkpoint's folder before TRL writes the weights, the
        # optimizer and trainer_state.json (transformers' mark of a finished save) and before it
        # deletes older checkpoints: a crash at any point of the save leaves the older checkpoints
        # in place and this one either whole or without trainer_state.json.
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial),
                                  f"checkpoint-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            self.sera_planner.save(folder)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        if self.state.global_step >= self.state.max_steps:
            logger.warning("%s is at step %d, max_steps = %d: nothing is left to train (raise "
                           "max_steps to train on)", checkpoint, self.state.global_step,
                           self.state.max_steps)
        # Here self.state is the checkpoint's. TRL counts micro-steps in _step (which it does not
        # checkpoint) and generates whenever _step is a multiple of generate_every: restoring it
        # keeps the resumed run on the data loader's generation boundaries. A checkpoint inside
        # a generation batch means that batch is generated again, as the history recorded it.
        self._step = self.state.global_step * self.args.gradient_accumulation_steps
        self._sera_replay = self._step % (self.args.steps_per_generation
                                          * self.num_iterations) != 0
        # The main process reads the file and hands the state to every process, so a process on
        # a node without the file resumes the same history.
        path = os.path.join(checkpoint, HISTORY_FILE)
        state = [None]
        if self.accelerator.is_main_process and os.path.exists(path):
            try:
                state = [read_state(path)]
            except ValueError as exc:
                state = [{"unreadable": str(exc)}]
        state = broadcast_object_list(state)
        if state[0] is None:
            raise FileNotFoundError(f"{path} is missing: the checkpoint was not written by "
                                    f"SeraGRPOTrainer, so the success history cannot resume")
        if "unreadable" in state[0]:
            raise ValueError(state[0]["unreadable"])
        why = other_batches(state[0], self.sera_planner, path)
        if why is not None:
            raise ValueError(why)
        self.sera_planner.load_file_state(state[0], path)
        self._refuse_other_position(path)

    def _refuse_other_position(self, path) -> None:
        """Refuse a resume whose data position differs from the history's: transformers skips
        global_step x gradient_accumulation_steps batches of the data loader, each generation
        batch taking steps_per_generation x num_iterations of them, so another of those three
        settings (with the prompts per generation batch unchanged) would plan prompts the
        history has recorded, or skip some."""
        planner = self.sera_planner
        generated = -(-self._step // (self.args.steps_per_generation * self.num_iterations))
        recorded = planner.history.epoch * planner.prompts_per_epoch + planner.planned
        if generated * planner.batch_size != recorded:
            raise ValueError(
                f"{path}: the history has planned {recorded} prompts, but this run resumes after "
                f"{generated} generation batches of {planner.batch_size} "
                f"(global_step {self.state.global_step} x gradient_accumulation_steps "
                f"{self.args.gradient_accumulation_steps} / (steps_per_generation "
                f"{self.args.steps_per_generation} x num_iterations {self.num_iterations})): "
                f"resume with the saved per_device_train_batch_size, gradient_accumulation_steps, "
                f"steps_per_generation and num_iterations, or start a new run in another "
                f"output_dir")
