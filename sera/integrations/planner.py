"""SERA's planning state for an RL framework: the success history, keyed by dense dataset rows.

Framework-free (no verl, TRL or torch.distributed): the verl and TRL plug-ins keep only their
hooks and call a `Planner` for the plan, the record, the epoch fold and the checkpoint file.

A planned batch of B rows gets counts N_q (shape (B,)); the frameworks then hold its responses
flat, prompt by prompt, each response keyed by its prompt (R = sum N_q responses):

    plan(rows)       rows    [ 17     , 4   , 9            , ... ]   (B,)
                     counts  [ 4      , 2   , 6            , ... ]   (B,)
    record(keys, r)  keys    [ 17 17 17 17 | 4 4 | 9 9 9 9 9 9 | ... ]   (R,)
                     r       [ 1  0  0  1  | 0 0 | 1 0 0 0 0 0 | ... ]   (R,)

(verl keys a response by its prompt's uid, TRL by the row; `sera.estimators` regroups the same
layout by sizes.)
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
from time import perf_counter

import numpy as np

from sera import methods, runstore
from sera.allocation import Allocation
from sera.estimators import maxrl_advantages, multiplicity_weights
from sera.timing import timed
from sera.trainers.config import AllocatorConfig, as_dict, differences

HISTORY_FILE = "sera_history.json"
FORMAT = 2
"""The version of the file `Planner.save` writes: 2 adds the training set's fingerprint and the
batch size (files without a version, 1, predate both and resume unchecked, with a warning)."""
PLANNING_OPTIONS = ("n_min", "n_max", "n_max_factor", "rounding", "u_min")
"""AllocatorConfig's fields that only shape the next plans: they may change on resume (logged);
the history's own (its rule, discount, weight and prior) may not."""

logger = logging.getLogger(__name__)


def _plain(value):
    """numpy's arrays and numbers as JSON takes them (pandas reads a parquet's chats so)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} is not a plain value")


def fingerprint(prompts) -> str:
    """A SHA-256 of the training prompts in their order, each as JSON (a string or a chat's
    messages alike): two training sets share it only when row r holds the same prompt in both,
    for every r, so a history keyed by rows resumes only on the set it was kept on."""
    digest = hashlib.sha256()
    for row, prompt in enumerate(prompts):
        try:
            text = json.dumps(prompt, sort_keys=True, default=_plain, ensure_ascii=False)
        except TypeError as exc:
            raise TypeError(f"training row {row}'s prompt cannot be fingerprinted ({exc}): a "
                            f"prompt must be text or a chat of plain values") from None
        digest.update(text.encode())
        digest.update(b"\n")  # JSON escapes a newline inside a value: rows cannot run together
    return digest.hexdigest()


class Planner:
    """Plans batches from a `sera.SuccessHistory` and records their outcomes.

    Parameters
    ----------
    n_prompts : int
        Rows of the training set; rows are dense ids in [0, n_prompts).
    n0 : int
        Rollouts per prompt under uniform allocation: a batch of B prompts gets B * n0 rollouts.
    allocator : AllocatorConfig
        Bounds, rounding, safeguard and the history's update rule (sera's trainers' config);
        what it leaves to the method (u_min, history_rule: None) comes from `method`.
    prompts_per_epoch : int or None
        Prompts the data loader yields per epoch (batches per epoch x batch size: verl and TRL
        both drop the last partial batch). The history folds once that many prompts have been
        planned and recorded. None: the caller calls `end_epoch()` itself.
    method : str
        `sera` (the paper's SERA, the default) or a variant such as `sera-rate`
        (sera.methods.METHODS).
    prompts : str or None
        `fingerprint` of the training prompts in row order, saved with the history; a history
        saved on other prompts (another set, another order, another filter) is refused on load.
        None: not checked.
    batch_size : int or None
        Prompts per planned batch, saved with the history; resuming with another is refused
        (the framework's data position would no longer match the epoch's, and prompts would be
        planned twice in one epoch). None: not checked.

    Each planned prompt with rollouts carries a key (its row, or a framework id such as verl's
    uid) until its outcomes are recorded; a prompt the selection leaves out (count 0) has none
    to wait for. `record` ignores keys that were never planned (verl's padding rows).

    The planner keeps the last batch's rows and counts in its checkpoint, so that a framework
    resuming inside a batch it already recorded (TRL resuming between the optimizer steps one
    generation serves) trains on it again with the same counts (`replay`) instead of planning
    and recording it a second time.
    """

    def __init__(self, n_prompts: int, n0: int, allocator: AllocatorConfig | None = None,
                 prompts_per_epoch: int | None = None, method: str = "sera",
                 prompts: str | None = None, batch_size: int | None = None):
        if method not in methods.METHODS or methods.METHODS[method].allocator != "waterline" \
                or methods.METHODS[method].estimates != "history" \
                or methods.METHODS[method].beyond_plugins:
            waterline = [name for name, m in methods.METHODS.items()
                         if m.allocator == "waterline" and m.estimates == "history"
                         and not m.beyond_plugins]
            raise ValueError(f"method must be one of {waterline} (SERA from historical "
                             f"estimates), got {method!r}")
        self.method = methods.METHODS[method]
        self.allocator = (allocator or AllocatorConfig()).for_method(self.method)
        self.history = self.allocator.history(n_prompts)
        self.n_prompts = self.history.n_prompts
        if isinstance(n0, bool) or not isinstance(n0, (int, np.integer)) or n0 < 1:
            raise ValueError(f"n0 must be an integer >= 1 (rollouts per prompt), got {n0!r}")
        self.n0 = int(n0)
        if self.allocator.infeasible(self.n0):
            raise ValueError(self.allocator.infeasible(self.n0))
        if prompts_per_epoch is not None and not 1 <= prompts_per_epoch <= n_prompts:
            raise ValueError(f"prompts_per_epoch must lie in [1, n_prompts = {n_prompts}] (batches "
                             f"per epoch x batch size), got {prompts_per_epoch!r}")
        self.prompts_per_epoch = prompts_per_epoch
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(
                batch_size, (int, np.integer)) or not 1 <= batch_size <= n_prompts):
            raise ValueError(f"batch_size must be an integer in [1, n_prompts = {n_prompts}], got "
                             f"{batch_size!r}")
        self.batch_size = None if batch_size is None else int(batch_size)
        self.prompts = prompts
        self.planned = 0  # prompts planned since the last fold
        self.pending: dict = {}  # key -> row, for planned prompts whose outcomes are not recorded
        self.last: Allocation | None = None
        self.last_estimates: np.ndarray | None = None  # the p-hat the last batch was planned from
        self.last_plan: dict | None = None  # the last batch: rows, counts, fallback (checkpointed)
        self._step_start: float | None = None  # when the last batch was planned
        self._busy = 0.0  # seconds in plan and record since then
        self.last_step_timing: tuple[float, float] | None = None  # (busy, step) of the last step

    @timed
    def plan(self, rows, keys=None) -> Allocation:
        """The allocation of the budget len(rows) * n0 over the batch's rows.

        Parameters
        ----------
        rows : array of int, (B,)
            Dense dataset rows of the batch's prompts.
        keys : sequence or None, (B,)
            What `record` will name each prompt by (verl's uids); None: the rows themselves.

        Returns
        -------
        Allocation
            counts and weights, (B,) in the order of rows; uniform counts (fallback=True) while
            any prompt of the batch has no estimate yet. The framework then samples counts[q]
            responses for rows[q] (the module text draws the layout).
        """
        start = perf_counter()
        if self._step_start is not None:  # one step ends where the next batch is planned
            self.last_step_timing = (self._busy, start - self._step_start)
        self._step_start, self._busy = start, 0.0
        with self._busy_time(start):
            return self._plan(rows, keys)

    def _plan(self, rows, keys) -> Allocation:
        rows = self.history._ids(np.asarray(rows).reshape(-1), "rows")
        keys = rows.tolist() if keys is None else list(keys)
        if len(keys) != rows.size:
            raise ValueError(f"keys must name each row once; got {len(keys)} keys for "
                             f"{rows.size} rows")
        seen: set = set()
        twice = [k for k in keys if k in self.pending or k in seen or seen.add(k)]
        if twice:
            raise ValueError(f"keys must be unique among the prompts whose outcomes are not yet "
                             f"recorded; {twice[0]!r} was planned twice (record a batch's "
                             f"outcomes before planning its prompts again)")
        self._fold_if_epoch_done()
        estimates = methods.estimate(self.method, self.history, rows)
        allocation = methods.plan(self.method, self.allocator, self.n0, rows, *estimates)
        self.last_estimates = np.asarray(estimates[0], dtype=float)
        # A prompt the selection leaves out (count 0) gets no responses: it is settled here, so
        # that the next epoch can plan its row again.
        self.pending.update((key, row) for key, row, n in
                            zip(keys, rows.tolist(), allocation.counts, strict=True) if n > 0)
        self.planned += rows.size
        self.last = allocation
        self.last_plan = {"rows": rows.tolist(), "counts": allocation.counts.tolist(),
                          "fallback": bool(allocation.fallback)}
        return allocation

    def metrics(self) -> dict[str, float]:
        """plan_metrics of the last planned batch, and timing_metrics()."""
        if self.last is None:
            raise ValueError("no batch has been planned yet")
        return {**plan_metrics(self.last.counts, self.last_estimates, self.last.fallback,
                               self.history.epoch), **self.timing_metrics()}

    def timing_metrics(self) -> dict[str, float]:
        """TIMING_METRICS of the last whole step (from one planned batch to the next); {} until
        a second batch is planned."""
        if self.last_step_timing is None:
            return {}
        busy, step = self.last_step_timing
        return {"sera/planning_s": busy, "sera/planning_share": busy / step if step > 0 else 0.0}

    def replay(self, rows) -> tuple[np.ndarray, bool]:
        """(counts, fallback) of the last planned batch, for the same rows in the same order,
        leaving the history, the epoch bookkeeping and the pending keys untouched: the batch was
        planned and recorded before the checkpoint the framework resumed from.

        Raises ValueError when rows are not those of the last batch (the framework resumed
        somewhere else than where the checkpoint was written).
        """
        rows = np.asarray(rows).reshape(-1).tolist()
        saved = None if self.last_plan is None else self.last_plan["rows"]
        if rows != saved:
            raise ValueError(f"resuming inside the last planned batch expects its rows "
                             f"{(saved or [])[:8]}... (saved in the checkpoint), got "
                             f"{rows[:8]}...; resume with the same data, seed and batch settings "
                             f"as the run that wrote the checkpoint")
        return np.asarray(self.last_plan["counts"], dtype=np.int64), self.last_plan["fallback"]

    @timed
    def record(self, keys, rewards) -> int:
        """Queue the outcome of each response under its prompt's key.

        Parameters
        ----------
        keys : sequence, (R,)
            One key per response, its prompt's key as given to `plan`, in any order. Keys that
            were never planned (verl's padding rows, `pad<hex>`) are ignored.
        rewards : array of float, (R,)
            One success reward in [0, 1] per response; NaN (no reward function could score
            it) is left out, as TRL leaves it out.

        Returns
        -------
        int
            Responses ignored because their key was never planned.
        """
        with self._busy_time(perf_counter()):
            return self._record(keys, rewards)

    @contextlib.contextmanager
    def _busy_time(self, start: float):
        """Add the time from `start` to the block's end to this step's planner time."""
        try:
            yield
        finally:
            self._busy += perf_counter() - start

    def _record(self, keys, rewards) -> int:
        keys = list(keys)
        rewards = np.asarray(rewards, dtype=float).reshape(-1)
        if rewards.size != len(keys):
            raise ValueError(f"keys and rewards must have the same length; got {len(keys)} and "
                             f"{rewards.size}")
        known = np.array([k in self.pending for k in keys], dtype=bool)
        scored = known & ~np.isnan(rewards)
        rows = np.array([self.pending[k] for k, s in zip(keys, scored, strict=True) if s],
                        dtype=np.int64)
        self.history.record(rows, rewards[scored])
        for key in {k for k, s in zip(keys, known, strict=True) if s}:
            del self.pending[key]
        if not self.pending:
            self._fold_if_epoch_done()
        return int((~known).sum())

    @timed
    def end_epoch(self) -> None:
        """Fold the epoch's outcomes into the estimates (the data loader finished an epoch)."""
        self.history.end_epoch()
        self.planned = 0

    def _fold_if_epoch_done(self) -> None:
        if self.prompts_per_epoch is not None and self.planned >= self.prompts_per_epoch:
            self.history.end_epoch()
            self.planned -= self.prompts_per_epoch

    # ------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything needed to resume, as JSON-ready values (prompts out for rollout are not
        kept: a checkpoint is written between steps)."""
        history = {k: v.tolist() if isinstance(v, np.ndarray) else v
                   for k, v in self.history.state_dict().items()}
        return {"format": FORMAT, "prompts": self.prompts, "history": history,
                "n_prompts": self.n_prompts, "n0": self.n0, "batch_size": self.batch_size,
                "planned": self.planned, "prompts_per_epoch": self.prompts_per_epoch,
                "last_plan": self.last_plan,
                "allocator": as_dict(self.allocator)}

    def load_state_dict(self, state: dict) -> None:
        """Resume from `state_dict()`'s output, checked value by value before anything changes:
        refused (ValueError naming the field and both values) are a file of a newer format, a
        history of another training set (another fingerprint of its prompts, or another
        size), another number of rollouts per prompt (n0: TRL's num_generations, verl's
        rollout.n), another batch size or epoch length, another history rule, discount, weight
        or prior (the saved allocator must be there), a history whose own rule, discount,
        weight or prior differ from that allocator's, counts that are not finite and
        non-negative, per-prompt arrays of different lengths, an epoch counter out of range and
        a last batch that names rows outside the training set. Changed PLANNING_OPTIONS are
        taken with a warning: they shape the next plans, not the history."""
        missing = [k for k in ("history", "n0", "planned", "allocator") if k not in state]
        if missing:
            raise ValueError(f"the saved state lacks {', '.join(missing)}: it was not written by "
                             f"Planner.state_dict (or was cut short)")
        version = state.get("format", 1)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= FORMAT:
            raise ValueError(f"the saved history has format = {version!r}, this sera reads "
                             f"formats 1 to {FORMAT}: it was written by a newer sera (upgrade) "
                             f"or edited")
        mine = as_dict(self.allocator)
        theirs = state["allocator"]
        if not isinstance(theirs, dict):
            raise ValueError(f"the saved allocator must be an object of AllocatorConfig's "
                             f"fields, got {theirs!r}")
        differ = differences(theirs, mine)
        kept = [k for k in differ if k not in PLANNING_OPTIONS]
        if kept:
            raise ValueError(
                "the saved history was kept with another allocator: "
                + ", ".join(f"{k} = {theirs.get(k)!r} saved, {mine.get(k)!r} now" for k in kept)
                + "; pass the saved AllocatorConfig to resume, or start a new history")
        self._check_same_run(state, version)
        history = self.allocator.history(self.n_prompts)
        if not isinstance(state["history"], dict):
            raise ValueError(f"the saved history must be an object, got "
                             f"{type(state['history']).__name__}")
        history.load_state_dict(state["history"])
        if history.n_prompts != self.n_prompts:
            raise ValueError(f"the saved history covers n_prompts = {history.n_prompts} prompts, "
                             f"the training set has {self.n_prompts}; resume with the same "
                             f"training set (after the same filtering) or start a new history")
        expected = self.allocator.history(1)
        for field in ("rule", "gamma", "weight", "alpha", "beta"):
            if getattr(history, field) != getattr(expected, field):
                raise ValueError(f"the saved history's own {field} = "
                                 f"{getattr(history, field)!r} differs from its allocator's "
                                 f"({getattr(expected, field)!r}); the file was edited or "
                                 f"assembled from two runs: start a new history")
        planned = state["planned"]
        limit = self.prompts_per_epoch if self.prompts_per_epoch is not None else np.inf
        if isinstance(planned, bool) or not isinstance(planned, int) or not 0 <= planned <= limit:
            raise ValueError(f"the saved planned (prompts planned since the last epoch fold) must "
                             f"be an integer in [0, {limit}], got {planned!r}")
        last_plan = state.get("last_plan")  # absent in files of earlier versions
        if last_plan is not None:
            _check_last_plan(last_plan, self.n_prompts)
        self.history = history
        self.planned = planned
        self.last_plan = last_plan
        self.pending.clear()
        changed = [k for k in differ if k in PLANNING_OPTIONS]
        if changed:
            logger.warning("resuming the SERA history with changed planning options (%s): the "
                           "next plans use the new values; the history itself is unchanged",
                           ", ".join(f"{k} = {theirs.get(k)!r} saved, {mine.get(k)!r} now"
                                     for k in changed))

    def _check_same_run(self, state: dict, version: int) -> None:
        """Refuse a state saved with another n0, epoch length, batch size or training set."""
        for name, now in (("n0", self.n0), ("prompts_per_epoch", self.prompts_per_epoch),
                          ("batch_size", self.batch_size)):
            if state.get(name) is not None and now is not None and state[name] != now:
                raise ValueError(f"the saved history was kept with {name} = {state[name]!r}, "
                                 f"this run has {name} = {now!r}; resume with the saved setting "
                                 f"or start a new history")
        saved = state.get("prompts")
        if saved is not None and self.prompts is not None and saved != self.prompts:
            raise ValueError(f"the saved history was kept on training prompts with fingerprint "
                             f"{saved}, this run's are {self.prompts}: another training set, or "
                             f"the same prompts in another order or after another filter, so "
                             f"each row's history would be applied to another prompt; resume "
                             f"with the training files the run started with, or start a new "
                             f"history")
        if version < 2 and self.prompts is not None:
            logger.warning("the saved SERA history predates format 2 and carries no fingerprint "
                           "of its training prompts: it is resumed without checking that row r "
                           "is still the same prompt")

    def save(self, folder) -> str:
        """Write the state to folder/sera_history.json (atomically) and return the path."""
        path = os.path.join(folder, HISTORY_FILE)
        runstore.write_text(path, json.dumps(self.state_dict()))
        return path

    def load(self, folder) -> None:
        """Resume from folder/sera_history.json; every refusal names the file."""
        path = os.path.join(folder, HISTORY_FILE)
        if not os.path.exists(path):
            scratch = [name for name in os.listdir(folder)
                       if name.startswith(f".{HISTORY_FILE}.")] if os.path.isdir(folder) else []
            why = (f"its save was killed while writing it ({scratch[0]} is left beside it)"
                   if scratch else "the checkpoint was not written with SERA's plug-in")
            raise FileNotFoundError(f"{path} is missing: {why}, so the success history cannot "
                                    f"resume; resume from an earlier checkpoint the plug-in "
                                    f"wrote whole, or start anew")
        self.load_file_state(read_state(path), path)

    def loads_from(self, folder) -> str | None:
        """None when folder/sera_history.json would resume this planner, else why not (the
        planner itself is left as it is, and the load's warnings wait for the real load)."""
        quiet, logger.disabled = logger.disabled, True
        try:
            copy.deepcopy(self).load(folder)
        except (OSError, ValueError) as exc:
            return str(exc)
        finally:
            logger.disabled = quiet
        return None

    def load_file_state(self, state: dict, path) -> None:
        """load_state_dict(state) for the state read from path; an error names the file."""
        try:
            self.load_state_dict(state)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: {exc}") from exc


METRICS = {
    "sera/fallback": "1 while a prompt of the batch has no estimate yet (uniform counts), else 0",
    "sera/count_min": "fewest rollouts a prompt of the batch got (0: left out by the selection)",
    "sera/count_median": "median rollouts per prompt",
    "sera/count_max": "most rollouts a prompt got",
    "sera/prompts_kept": "share of the batch's prompts that got rollouts",
    "sera/hardest_decile_budget": "share of the batch's rollouts spent on the tenth of its "
                                  "prompts with the lowest p-hat",
    "sera/p_hat_spread": "standard deviation of p-hat over the batch",
    "sera/epoch": "epochs folded into the success history so far",
}
"""The metrics both plug-ins log for every planned batch (plan_metrics), by key."""

TIMING_METRICS = {
    "sera/planning_s": "seconds the planner spent planning the last whole step's batch and "
                       "recording its outcomes",
    "sera/planning_share": "sera/planning_s over that step's wall time, from its batch's plan to "
                           "the next batch's",
}
"""What both plug-ins log from the second planned batch on (Planner.timing_metrics), by key."""

WORKER_METRICS = {
    "sera/worker_imbalance": "rollouts of the busiest agent-loop worker over the mean per worker "
                             "(1: even), as verl cuts the batch's prompts among its workers",
}
"""What verl's plug-in logs beside METRICS (worker_loads), by key."""


def worker_loads(counts, workers: int) -> np.ndarray:
    """Rollouts each of `workers` agent-loop workers gets, (workers,): verl's AgentLoopManager
    hands worker j the j-th slice of ceil(B / workers) consecutive prompts (TensorDict.chunk),
    counts (B,) in batch order; a worker left without prompts gets 0."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    size = max(1, -(-counts.size // workers))
    loads = np.zeros(workers, dtype=np.int64)
    for j in range(workers):
        loads[j] = counts[j * size:(j + 1) * size].sum()
    return loads


def worker_imbalance(counts, workers: int) -> float:
    """The busiest worker's rollouts over the mean per worker under worker_loads (1.0: even)."""
    loads = worker_loads(counts, workers)
    return float(loads.max() / loads.mean()) if loads.sum() else 1.0


def plan_metrics(counts, estimates, fallback: bool, epoch: int) -> dict[str, float]:
    """The METRICS of one planned batch: counts (B,) and the p-hat it was planned from (B,)."""
    counts = np.asarray(counts, dtype=float)
    estimates = np.asarray(estimates, dtype=float)
    hardest = np.argsort(estimates, kind="stable")[:max(1, int(np.ceil(counts.size / 10)))]
    values = {"sera/fallback": float(fallback), "sera/count_min": counts.min(),
              "sera/count_median": float(np.median(counts)), "sera/count_max": counts.max(),
              "sera/prompts_kept": float((counts > 0).mean()),
              "sera/hardest_decile_budget": counts[hardest].sum() / max(counts.sum(), 1.0),
              "sera/p_hat_spread": float(estimates.std()), "sera/epoch": float(epoch)}
    return {key: float(values[key]) for key in METRICS}


def _check_last_plan(plan, n_prompts: int) -> None:
    """The saved last batch: rows in [0, n_prompts) and counts >= 0, as integers, one each."""
    if not isinstance(plan, dict) or not {"rows", "counts", "fallback"} <= set(plan):
        raise ValueError(f"the saved last_plan must hold rows, counts and fallback, got {plan!r}")
    rows, counts = plan["rows"], plan["counts"]
    integers = all(isinstance(v, int) and not isinstance(v, bool) for v in [*rows, *counts])
    if not isinstance(rows, list) or not isinstance(counts, list) or not integers \
            or len(rows) != len(counts):
        raise ValueError("the saved last_plan's rows and counts must be lists of integers of one "
                         "length")
    if any(not 0 <= r < n_prompts for r in rows) or any(n < 0 for n in counts):
        raise ValueError(f"the saved last_plan's rows must lie in [0, {n_prompts}) and its "
                         f"counts be >= 0")


def read_state(path) -> dict:
    """The planner state stored at path (JSON); ValueError naming the file when it is not one."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a SERA history (not JSON: {exc}); resume from another "
                         f"checkpoint or start a new history") from exc
    if not isinstance(state, dict):
        raise ValueError(f"{path} is not a SERA history (a JSON {type(state).__name__}, not an "
                         f"object)")
    return state


def grouped_weighted_maxrl(rewards, groups, keep, n0: float | None = None) -> np.ndarray:
    """SERA's advantage of each response: MaxRL over the kept responses of its group (its
    prompt) times n0 / (their number); 0 for a response not kept. n0 None: the mean number of
    kept responses per group (what the plan's budget gives per prompt). Both plug-ins score with
    it: TRL keeps the scored responses, verl the responses of planned prompts.

    rewards, groups and keep are (R,), one entry per response; a group is every response with
    the same id, wherever it sits (verl's uids need not be contiguous), and N_q counts only
    its kept responses:

        groups   [ a  a  a  b  a  b  c  c ]   (R,)  (verl: uids; TRL: 0, 0, ..., 1, ...)
        keep     [ 1  1  1  1  0  1  1  1 ]   (R,)  (0: padding, or unscored)
        N_q      a: 3, b: 2, c: 2                   weights n0 / N_q
        returns  (R,), 0 where keep is 0
    """
    rewards = np.asarray(rewards, dtype=float)
    keep = np.asarray(keep, dtype=bool)
    advantages = np.zeros(rewards.size)
    if keep.any():
        _, inverse = np.unique(np.asarray(groups)[keep], return_inverse=True)
        sizes = np.bincount(inverse)
        n0 = keep.sum() / sizes.size if n0 is None else n0
        advantages[keep] = (maxrl_advantages(rewards[keep], groups=inverse)
                            * multiplicity_weights(sizes, n0)[inverse])
    return advantages
