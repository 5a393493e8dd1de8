"""SERA inside verl 0.9.1 (pinned: VERL_VERSION), loaded from the command line, no fork.

Importing this module registers two things with verl:

- the advantage estimator `sera_maxrl` (`algorithm.adv_estimator=sera_maxrl`): MaxRL over each
  prompt's group (verl's uid) of whatever size it has, times the multiplicity weight n0 / N_q,
  where n0 is rollout.n under the trainer mode (whose counts keep the budget train_batch_size x
  rollout.n) and, used on its own, the batch's mean group size (then every prompt has rollout.n
  rollouts and the run is MaxRL, which it logs once at the first batch);
- the V1 trainer mode `sera_sync` (`trainer.v1.trainer_mode=sera_sync`): verl's synchronous
  trainer, except that each batch is planned by a `sera.integrations.planner.Planner` before it
  leaves for rollout, each prompt's count going through verl's per-prompt field `__rollout_n__`.
  The plan is the paper's sera, its selection at u_min (`sera.u_min`; unset: sera.methods.U_MIN,
  0 turns it off): a prompt the selection leaves out goes out with count 0, for which verl's
  agent loop starts no session and marks the prompt finished, so the synchronous replay buffer
  still counts train_batch_size prompts and no rollout is spent on it.
  The history is keyed by dense training rows, mapped at start-up from `extra_info.index` (a
  missing or repeated index is refused: verl would read a missing one as 0); the outcomes are
  recorded once advantages are computed, leaving out verl's padding rows (uid `pad<hex>`); the
  history folds at the data loader's epoch (batches per epoch x batch size) and is saved in
  global_step_N/ before verl's checkpoint marker. The rollouts per step stay
  train_batch_size x rollout.n, so verl's dispatch, mini-batches and padding are unchanged.

Both must be registered in the Ray workers that use them:
`+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=sera.integrations.verl.setup`, or a
hook of your own that runs it first (`chained`). The
entry point `python -m sera.integrations.verl_main [overrides]` (sera.integrations.verl_main) is
verl's main_ppo with the config group sera.integrations.verl_recipe built in: that, the mode, the
estimator and the allocator's options (`sera.*`), with nothing to add on the command line. On
verl's own main_ppo the same group takes two overrides,
`hydra.searchpath=[pkg://sera.integrations.verl_recipe] +sera=paper`, and a missing search path
turns `+sera=paper` into a plain string that verl never reads.

A config that asks for SERA (a `sera:` block, or the sera_sync mode) without every piece (the
block, trainer.use_v1=true with the mode, the estimator, the workers' setup hook) is refused by
name before the first generation (`refuse_partial`): by the entry point before Ray starts, and
by every verl trainer the setup hook reaches (`setup`), so that `trainer.use_v1=false` or
another trainer mode after `+sera=paper` stops the run instead of training MaxRL at uniform
counts. The estimator alone, without a `sera:` block or the mode, is MaxRL (a baseline), which
it logs once at the first batch.
examples/verl/ has the GSM8K / SmolLM2 launchers (one node, a Ray cluster) and the data preparation.

Loss aggregation: sera's token-mean is `actor_rollout_ref.actor.loss_agg_mode=token-mean`; sera's
seqnorm is `loss_agg_mode=seq-mean-token-sum-norm` together with
`actor_rollout_ref.actor.loss_scale_factor=<data.max_response_length>` (verl's default divides
by each micro-batch's padded width instead). Folding n0 / N_q into the advantage is the weighted
loss only where each response's loss term scales with its own advantage (WEIGHTED_LOSS_MODES;
`tests/test_integration_verl.py` checks every loss mode verl registers by its gradients).

Refused with a message (`refuse_unsupported`): DAPO group filtering and failed-group refill (they
evict groups before the history sees them), `algorithm.use_kl_in_reward=True`, DAPO's overlong
penalty and a learned reward model (rewards leave [0, 1]), policy loss modes outside
WEIGHTED_LOSS_MODES (clip_cov, kl_cov and dro), a KL loss or an entropy bonus (verl adds them per
token without the weight n0 / N_q), a distillation loss (the same), an advantage estimator other
than sera_maxrl under the sera_sync mode (it would ignore the counts), rejection sampling
(`algorithm.rollout_correction.rollout_rs`: a rejected success would count as a failure), and
skipped rollouts (`skip.rollout_tq`: a cached step bypasses the planning hook). Agent loops that
return several outputs per session are refused when their first batch is scored (each output would
count as a trial of its own).

Metrics: planner.METRICS and planner.TIMING_METRICS, as TRL's plug-in logs them, with
`sera/ignored_responses` and planner.WORKER_METRICS (the rollouts' spread over verl's agent-loop
workers) beside them; docs/scaling.md has the table.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib
import logging
import os
import sys

import numpy as np
import torch
import verl
from omegaconf import OmegaConf, open_dict
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from sera.integrations.planner import Planner, fingerprint, grouped_weighted_maxrl, worker_imbalance
from sera.trainers.config import AllocatorConfig

VERL_VERSION = "0.9.1"
ESTIMATOR = "sera_maxrl"
MODE = "sera_sync"
COUNT_KEY = "__rollout_n__"
"""The per-prompt field verl's V1 agent loop reads a prompt's rollout count from."""
PAD_PREFIX = "pad"
"""verl's padding rows carry uid `pad<hex>` (padding_utils.upsample_batch_to_divisible_size)."""
WEIGHTED_LOSS_MODES = ("vanilla", "bypass_mode", "cispo", "dppo_kl", "dppo_tv", "geo_mean", "gpg",
                       "gspo", "sapo")
"""verl policy loss modes under which a response's gradient scales with its own advantage, so
that n0 / N_q folded into the advantage weights its loss; the others (clip_cov and kl_cov pick
tokens by a batch-wide covariance, dro adds a penalty that does not scale) are refused."""

logger = logging.getLogger(__name__)
if not logger.handlers:
    # verl leaves the root logger at WARNING without a handler, so an INFO line of this module
    # would be dropped: the plan line goes to the driver's console (stderr) on its own handler.
    # SERA_LOGGING_LEVEL=WARNING silences it.
    class _Console(logging.StreamHandler):
        """A handler on whatever sys.stderr is when it writes (a driver may redirect it)."""

        stream = property(lambda self: sys.stderr, lambda self, value: None)

    _console = _Console()
    _console.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(_console)
    logger.setLevel(os.environ.get("SERA_LOGGING_LEVEL", "INFO"))
    logger.propagate = False

if verl.__version__ != VERL_VERSION:
    logger.warning("sera.integrations.verl was written against verl %s; found %s. Run `make "
                   "test-integrations` against it before trusting a run.", VERL_VERSION,
                   verl.__version__)


HOOK = "sera.integrations.verl.setup"
"""The workers' setup hook the recipe sets (ray_kwargs.ray_init.runtime_env)."""
PIECES = {
    "the sera: block (+sera=paper)": lambda c: OmegaConf.select(c, "sera") is not None,
    "trainer.use_v1=true": lambda c: OmegaConf.select(c, "trainer.use_v1") is True,
    f"trainer.v1.trainer_mode={MODE}":
        lambda c: OmegaConf.select(c, "trainer.v1.trainer_mode") == MODE,
    f"algorithm.adv_estimator={ESTIMATOR}":
        lambda c: OmegaConf.select(c, "algorithm.adv_estimator") == ESTIMATOR,
    f"ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK} (or a hook of yours "
    f"made with sera.integrations.verl.chained)":
        lambda c: runs_sera_setup(OmegaConf.select(c, "ray_kwargs.ray_init.runtime_env."
                                                      "worker_process_setup_hook")),
}
"""What a SERA run needs, each with how to tell it is there; the recipe sets them all."""


def refuse_partial(config) -> None:
    """Raise ValueError when the config asks for SERA (a `sera:` block, or the sera_sync mode)
    but lacks one of PIECES, naming what is missing, and when `sera` is a plain string (what
    `+sera=paper` leaves without the recipe's search path). Configs that ask for nothing of
    SERA's, the `sera_maxrl` estimator alone (MaxRL) among them, pass."""
    block = OmegaConf.select(config, "sera")
    if block is not None and not OmegaConf.is_dict(block) and not isinstance(block, dict):
        raise ValueError(f"sera={block!r} is a plain value, not the recipe's options: "
                         f"`+sera=paper` without hydra.searchpath=[pkg://sera.integrations."
                         f"verl_recipe] sets a string that no code reads, and the run would "
                         f"train without SERA. Start it with `python -m "
                         f"sera.integrations.verl_main` (the recipe built in), or add the "
                         f"search path before +sera=paper")
    if block is None and OmegaConf.select(config, "trainer.v1.trainer_mode") != MODE:
        return  # asks nothing of SERA's: its hook, whatever it is, is not imported here
    missing = [name for name, there in PIECES.items() if not there(config)]
    if missing:
        raise ValueError(f"this config asks for SERA but lacks {'; '.join(missing)}: without "
                         f"it verl trains at uniform counts (MaxRL or another estimator), not "
                         f"SERA. Drop the override that removed it, or start from `python -m "
                         f"sera.integrations.verl_main`, which sets them all")


def _trainer_classes() -> list[type]:
    """verl's trainers: the V1 base and every registered trainer mode (a mode may check its
    config in its own __init__ before the base's), and the legacy V0 trainer (already imported
    with the V1 modules this module registers with)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, PPOTrainer

    return [PPOTrainer, *TRAINER_REGISTRY.values(), RayPPOTrainer]


def setup() -> None:
    """Ray's worker_process_setup_hook: importing this module registered the estimator and the
    mode; here every verl trainer built in this process (the task runner builds it before the
    first generation) is made to call refuse_partial on its config first, whatever mode verl
    picked, except the bases of SeraTrainerSync, which has checked the config it was given
    before it hands them verl's own name for the mode. `chained` runs it before a hook of
    yours."""
    for cls in _trainer_classes():
        init = cls.__dict__.get("__init__")  # only a class's own; an inherited one is wrapped
        if init is not None and not getattr(init, "_sera_checked", False):
            cls.__init__ = _checked(init)


def chained(hook):
    """Make a worker setup hook of your own that runs SERA's `setup` first, then yours: Ray takes
    one `worker_process_setup_hook`, so name the returned function there instead of HOOK.

        # mypackage/hooks.py
        from sera.integrations.verl import chained

        @chained
        def setup():
            ...  # your own worker set-up

        ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=mypackage.hooks.setup
    """
    @functools.wraps(hook)
    def both():
        setup()
        hook()

    both.runs_sera_setup = True
    return both


def runs_sera_setup(path) -> bool:
    """Whether the dotted path names SERA's setup hook or one made with `chained` (imported from
    the driver here, as Ray imports it in every worker)."""
    if path == HOOK:
        return True
    if not isinstance(path, str) or "." not in path:
        return False
    module, name = path.rsplit(".", 1)
    try:
        hook = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={path} "
                         f"cannot be imported here ({exc}); Ray's workers import it the same "
                         f"way: put its module on PYTHONPATH") from exc
    return getattr(hook, "runs_sera_setup", False) is True


def _checked(init):
    @functools.wraps(init)
    def checked(self, config, *args, **kwargs):
        # SeraTrainerSync checks the config it was given, then hands its bases a copy under
        # verl's own name for the mode ("sync"), which refuse_partial would take for a partial
        # SERA config: the bases of SERA's own trainer are not checked again.
        if not isinstance(self, SeraTrainerSync):
            refuse_partial(config)
        init(self, config, *args, **kwargs)

    checked._sera_checked = True
    return checked


OUTSIDE_MODE = (f"algorithm.adv_estimator={ESTIMATOR} is running outside "
                f"trainer.v1.trainer_mode={MODE}: every prompt gets rollout.n rollouts, so this "
                f"trains MaxRL, not SERA. SERA needs trainer.use_v1=true "
                f"trainer.v1.trainer_mode={MODE} as well, or the config group that sets both: "
                f"hydra.searchpath=[pkg://sera.integrations.verl_recipe] +sera=paper.")
"""Logged once, at the first batch, when `sera_maxrl` runs outside the SERA trainer mode."""
_warned_alone = False
_planned: set | None = None  # uids out for rollout, while SeraTrainerSync computes advantages
_n0: float | None = None  # rollout.n, while SeraTrainerSync computes advantages


@contextlib.contextmanager
def planned_only(uids, n0: float | None = None):
    """Within the block, `sera_maxrl` treats responses of any other uid like padding rows and, if
    n0 is given, weights each prompt n0 / N_q (rather than by the batch's mean group size, which
    a partial batch, as verl's parameter_sync_step > 1 hands over, would get wrong)."""
    global _planned, _n0
    _planned, _n0 = {str(u) for u in uids}, n0
    try:
        yield
    finally:
        _planned, _n0 = None, None


@core_algos.register_adv_est(ESTIMATOR)
def compute_sera_maxrl_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                 index: np.ndarray, config=None, **_):
    """verl's advantage estimator `sera_maxrl`.

    Parameters
    ----------
    token_level_rewards, response_mask : Tensor
        (responses, response_length); a response's reward is its token rewards' sum over every
        position, the response mask aside (verl puts the score on the last response token
        whatever its mask, and the history records that sum), a success indicator in [0, 1].
    index : array, (responses,)
        Each response's prompt (verl's uid). Padding rows (uid `pad<hex>`), and under
        `planned_only` any uid the planner did not send out, get advantage 0 and count in
        neither the groups nor n0.

    The batch holds N_q responses of prompt q (the planner's counts, sent out as
    `__rollout_n__`), regrouped here by uid, plus verl's padding rows:

        index     [ u0 u0 u0 u0 | u1 u1 | u2 u2 u2 u2 u2 u2 | pad.. pad.. ]   (responses,)
        N_q       [      4      ,   2   ,          6        ]   (B,) prompts
        advantage  MaxRL within each uid's group x n0 / N_q; 0 on padding rows

    Returns
    -------
    (advantages, returns)
        Both (responses, response_length): the weighted MaxRL advantage of each response,
        n0 / N_q times MaxRL over its prompt's group, broadcast over its tokens; n0 is rollout.n
        under the trainer mode (`planned_only`), else the mean group size of the real prompts.
    """
    global _warned_alone
    if _planned is None and not _warned_alone:
        _warned_alone = True
        logger.warning(OUTSIDE_MODE)
    # Unmasked: an agent loop may mask the token verl scored (a tool turn's boundary, a cut at
    # response_length); the history records the same sum from rm_scores.
    scores = token_level_rewards.sum(dim=-1).detach().double().cpu()
    uids = np.asarray(index, dtype=object).astype(str)
    real = ~np.char.startswith(uids, PAD_PREFIX)
    if _planned is not None:
        real &= np.array([u in _planned for u in uids], dtype=bool)
    values = torch.as_tensor(grouped_weighted_maxrl(scores.numpy(), uids, real, _n0))
    per_token = values.to(token_level_rewards.dtype)[:, None] * response_mask
    return per_token, per_token


SWITCHES = {
    "distillation.enabled":
        "adds a distillation loss per token without SERA's weight n0 / N_q, so a prompt's pull "
        "toward the teacher would grow with its rollout count; set distillation.enabled=false",
    "algorithm.filter_groups.enable":
        "(DAPO group filtering) evicts all-0 and all-1 groups before SERA's history sees them; "
        "set algorithm.filter_groups.enable=False with the sera_sync mode",
    "trainer.v1.sampler.sync_refill_failed_groups":
        "replaces failed groups with prompts SERA did not plan; set it to False with the "
        "sera_sync mode (failed rollouts are padded and ignored)",
    "reward.reward_kwargs.overlong_buffer_cfg.enable":
        "(DAPO's overlong penalty) subtracts up to its penalty factor from a long response's "
        "reward, which MaxRL and the success history need as a success in [0, 1]; set it to "
        "False with the sera_sync mode",
    "reward.reward_model.enable":
        "scores responses with a learned reward model, whose scores are not successes in "
        "[0, 1]; SERA's MaxRL and success history need a verifier's 0/1 "
        "(reward.custom_reward_function, as sera.integrations.gsm8k); set "
        "reward.reward_model.enable=False",
    "algorithm.use_kl_in_reward":
        "subtracts a KL penalty from the rewards, which MaxRL and the success history need as "
        "successes in [0, 1]; set algorithm.use_kl_in_reward=False",
    "actor_rollout_ref.actor.use_kl_loss":
        "adds verl's KL loss per token without SERA's weight n0 / N_q, so a prompt's KL pull "
        "would grow with its rollout count; set actor_rollout_ref.actor.use_kl_loss=False "
        "(MaxRL and the SERA paper train without a KL term)",
    "skip.rollout_tq.enable":
        "replays cached rollouts and skips the step that plans the batch, so SERA's planner has "
        "nothing out for rollout and every advantage would be 0; set "
        "skip.rollout_tq.enable=False with the sera_sync mode",
}
"""verl's on/off settings that change what SERA trains, each refused when on, with why."""


KL_COEFFICIENTS = {"actor_rollout_ref.actor.use_kl_loss": "actor_rollout_ref.actor.kl_loss_coef",
                   "algorithm.use_kl_in_reward": "algorithm.kl_ctrl.kl_coef"}
"""The KL switches among SWITCHES whose coefficient, at 0, leaves the training unchanged (verl's
adaptive controller scales its coefficient, so 0 stays 0): accepted with a warning."""


def refuse_unsupported(config) -> None:
    """Raise ValueError, naming the setting, for verl settings under which SERA's history, MaxRL or
    the weights n0 / N_q would be wrong: an advantage estimator other than sera_maxrl ignores the
    counts; rejection sampling (rollout_rs) turns rejected successes into failures; a rollout.n
    below n_min; the SWITCHES (DAPO group filtering and failed-group refill evict all-0 and
    all-1 groups before the history sees them; a KL penalty in the reward, DAPO's overlong
    penalty and a learned reward model give rewards outside [0, 1]; a KL loss and a
    distillation loss do not carry the weights; skipped rollouts bypass the planning); loss
    modes outside WEIGHTED_LOSS_MODES and an entropy bonus, which do not carry the weights."""
    _refuse_estimator(config)
    for setting, why in SWITCHES.items():
        if OmegaConf.select(config, setting, default=False):
            coefficient = KL_COEFFICIENTS.get(setting)
            if coefficient and OmegaConf.select(config, coefficient, default=None) == 0:
                logger.warning("sera: %s=True with %s=0 is accepted: the KL term adds nothing "
                               "to the loss or the rewards (verl still computes the reference "
                               "policy's log-probabilities)", setting, coefficient)
                continue
            raise ValueError(f"{setting}=True {why}")
    _refuse_loss(config)


def _refuse_estimator(config) -> None:
    """The estimator, rejection sampling and n0: what makes the advantages SERA's."""
    estimator = OmegaConf.select(config, "algorithm.adv_estimator", default=None)
    if estimator != ESTIMATOR:
        mode = OmegaConf.select(config, "trainer.v1.trainer_mode", default=None)
        raise ValueError(f"algorithm.adv_estimator={estimator} with a SERA run "
                         f"(trainer.v1.trainer_mode={mode}): SERA plans uneven counts and only "
                         f"{ESTIMATOR} applies the weight n0 / N_q, so a prompt's gradient "
                         f"would grow with its count; set algorithm.adv_estimator={ESTIMATOR}")
    rejection = OmegaConf.select(config, "algorithm.rollout_correction.rollout_rs", default=None)
    if rejection is not None:
        raise ValueError(f"algorithm.rollout_correction.rollout_rs={rejection} rejects responses "
                         f"by zeroing their response mask before the advantage: a rejected "
                         f"success would count as a failure of its group while the history "
                         f"records it as a success; leave rollout_rs null with the {MODE} mode "
                         f"(rollout_is, which reweights without rejecting, is accepted)")
    n0 = OmegaConf.select(config, "actor_rollout_ref.rollout.n", default=None)
    why = None if n0 is None else allocator_from_config(config).infeasible(n0)
    if why is not None:
        raise ValueError(f"actor_rollout_ref.rollout.n={n0} is SERA's n0, the mean count per "
                         f"prompt, and the allocator's bounds (sera.n_min, sera.n_max, "
                         f"sera.n_max_factor) cannot plan it: {why}")


def _refuse_loss(config) -> None:
    """The actor's loss: a mode and an entropy bonus that do not carry the weights."""
    mode = OmegaConf.select(config, "actor_rollout_ref.actor.policy_loss.loss_mode",
                            default="vanilla")
    if mode not in WEIGHTED_LOSS_MODES:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}: its loss does "
                         f"not scale with each response's own advantage (clip_cov and kl_cov pick "
                         f"tokens by a batch-wide covariance, dro adds a penalty that does not "
                         f"scale), so the weight n0 / N_q folded into the advantage is not the "
                         f"weighted loss; use one of {', '.join(WEIGHTED_LOSS_MODES)}")
    entropy = OmegaConf.select(config, "actor_rollout_ref.actor.entropy_coeff", default=0)
    if entropy not in (0, 0.0, None):
        raise ValueError(f"actor_rollout_ref.actor.entropy_coeff={entropy} adds verl's entropy "
                         f"bonus per token without SERA's weight n0 / N_q, so a prompt's bonus "
                         f"would grow with its rollout count; set "
                         f"actor_rollout_ref.actor.entropy_coeff=0")


def dense_rows(extra_info) -> dict:
    """{extra_info.index: dense row} over a training set's `extra_info` column, in row order.

    Raises ValueError when a row has no index (verl would silently use 0) or two rows share one.
    """
    how = ("write a unique extra_info.index per row when preparing the parquet, as MaxRL's "
           "examples/maxrl_data_preprocess/gsm8k.py does (extra_info={'split': split, "
           "'index': idx} in a map with with_indices=True)")
    rows = {}
    for row, info in enumerate(extra_info):
        if not isinstance(info, dict) or info.get("index") is None:
            raise ValueError(f"training row {row} has no extra_info.index (got extra_info = "
                             f"{info!r}); SERA keys its history by it: {how}")
        index = info["index"]
        if index in rows:
            raise ValueError(f"extra_info.index = {index!r} appears at training rows "
                             f"{rows[index]} and {row}; SERA keys its history by it: {how}")
        rows[index] = row
    return rows


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
        refuse_unsupported(config)
        refuse_partial(config)
        # verl picks its replay buffer and prompt bookkeeping by `trainer_mode == "sync"`; this
        # mode is the sync trainer, so it runs under that name once main_ppo has chosen the class.
        config = copy.deepcopy(config)
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        super().__init__(config, *args, **kwargs)
        logger.info("sera: %s built (trainer.v1.trainer_mode=%s, verl's sync trainer with "
                    "SERA's counts)", type(self).__name__, MODE)

    def _init_dataloader(self):
        data = self.config.data
        if (data.get("train_max_samples", -1) or -1) > 0 and data.get("shuffle", True) \
                and data.get("seed", None) is None:
            logger.warning("sera: data.train_max_samples=%s with data.shuffle and no data.seed "
                           "draws another subset of the training set on every launch, so no "
                           "checkpoint's history will resume (its prompts differ); set data.seed",
                           data.train_max_samples)
        super()._init_dataloader()
        self._sera = None
        self.sera  # noqa: B018  (a training set without usable indices fails at start-up)

    @property
    def sera(self) -> Planner:
        """The planner, built on first use from the training set's extra_info.index column and
        the data loader's epoch (batches per epoch x batch size: verl drops the last partial
        batch)."""
        if getattr(self, "_sera", None) is None:
            loader = self.train_dataloader
            frame = loader.dataset.dataframe  # after verl's max_samples and length filter
            self._sera_rows = dense_rows(frame["extra_info"] if "extra_info" in
                                         frame.column_names else [None] * len(frame))
            key = OmegaConf.select(self.config, "data.prompt_key", default="prompt")
            prompts = fingerprint(frame[key]) if key in frame.column_names else None
            # The paper's sera: u_min unset is its selection threshold (sera.methods.U_MIN).
            self._sera = Planner(len(self._sera_rows),
                                 int(self.config.actor_rollout_ref.rollout.n),
                                 allocator_from_config(self.config),
                                 prompts_per_epoch=len(loader) * loader.batch_size,
                                 prompts=prompts, batch_size=loader.batch_size)
            logger.info("sera: history over %d training rows (prompts %s...), %d prompts an "
                        "epoch in data loader batches of %d, n0 = %d", len(self._sera_rows),
                        (prompts or "unchecked")[:12],
                        len(loader) * loader.batch_size, loader.batch_size, self._sera.n0)
        return self._sera

    def _submit_batch_to_rollout(self, batch):
        planner = self.sera
        indices = np.asarray(batch["index"]).reshape(-1).tolist()
        unknown = [i for i in indices if i not in self._sera_rows]
        if unknown:
            raise ValueError(f"the batch holds extra_info.index = {unknown[0]!r}, which no row of "
                             f"the training set had at start-up; keep the training files fixed "
                             f"during a run")
        rows = [self._sera_rows[i] for i in indices]
        allocation = planner.plan(rows, keys=[str(u) for u in batch["uid"]])
        counts = allocation.counts
        tu.assign_non_tensor_stack(batch, COUNT_KEY, [int(n) for n in counts])
        # verl cuts the batch's prompts among its agent-loop workers (WORKER_METRICS)
        workers = len(getattr(self.agent_loop_manager, "agent_loop_workers", ()))
        self._sera_imbalance = worker_imbalance(counts, workers) if workers else None
        logger.info("sera: %d prompts, counts %d..%d, %d rollouts%s", len(counts), counts.min(),
                    counts.max(), counts.sum(),
                    " (uniform: some prompts have no estimate yet)" if allocation.fallback
                    else "")
        return super()._submit_batch_to_rollout(batch)

    def _compute_advantage(self, batch, metrics: dict):
        from verl.trainer.ppo.v1.trainer_base import tq

        several = [k for k in batch.keys if not str(k).endswith("_0")]
        if several:  # keys are {uid}_{session}_{output}
            raise ValueError(f"the agent loop returned several outputs for one session (key "
                             f"{several[0]!r}); SERA would count each output as a trial of its "
                             f"own and weight it so. Use an agent loop with one output per "
                             f"session (as single_turn_agent) with sera_sync")
        with planned_only(self.sera.pending, n0=self.sera.n0):
            batch = super()._compute_advantage(batch, metrics)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=["uid", "rm_scores"])
        padded = data.to_padded_tensor()
        uids = padded["uid"]
        uids = uids.tolist() if hasattr(uids, "tolist") else list(uids)
        # Padding rows and any other uid the planner never sent out are left out.
        ignored = self.sera.record([str(u) for u in uids], padded["rm_scores"].sum(dim=-1).tolist())
        metrics.update(self.sera.metrics())  # planner.METRICS and TIMING_METRICS, as in TRL
        if getattr(self, "_sera_imbalance", None) is not None:
            metrics["sera/worker_imbalance"] = self._sera_imbalance
        metrics["sera/ignored_responses"] = float(ignored)
        return batch

    def _save_checkpoint(self):
        # The history goes into global_step_N/ before verl writes latest_checkpointed_iteration.txt
        # (the last thing super() does), so a crash in between leaves no marker pointing at a
        # checkpoint without its history.
        self.sera.save(os.path.join(self.config.trainer.default_local_dir,
                                    f"global_step_{self.global_steps}"))
        super()._save_checkpoint()

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps == 0:
            return
        trainer = self.config.trainer
        folder = trainer.resume_from_path if trainer.resume_mode == "resume_path" else \
            os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}")
        self.sera.load(os.path.abspath(folder))
