"""The one training loop every study runs: batches, planning, history, evaluation, checkpoints.

A study (classification, a sequence task) supplies a model step, an evaluation and a final
measurement; `fit` supplies the rest, the same way for all of them:

    for each step:
        at the end of an epoch: fold the outcomes into the history   (estimates change only here)
        every eval_every steps: evaluate
        draw the next batch (each epoch is a permutation; its last batch may be smaller)
        the method's protocol gets the rollouts: plan and sample once (sera.methods), or
            sample in rounds (sera.trainers.protocols)
        study.update: one optimizer step on the rollouts the protocol kept
        record the outcomes, the counts and the diagnostics
        every checkpoint_every steps: save everything, so a crash loses at most those steps

Results are three long tables, every row carrying the run's keys (method, seed, n0, ...):
metrics (step, metric, k, value), final (per held-out prompt) and allocations (per prompt and step
of the methods that allocate).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from sera import runstore
from sera.allocation import Allocation
from sera.methods import METHODS, estimate, plan
from sera.tables import ALLOCATION_COLUMNS, ROLLOUT_COLUMNS, TABLES, Results
from sera.timing import timed
from sera.trainers import checkpoint
from sera.trainers.config import RunConfig, as_dict, defaults
from sera.trainers.protocols import PROTOCOLS, GenerationLimit, Outcome

ALLOCATION_DTYPES = dict(zip(ALLOCATION_COLUMNS, (np.int64, np.int64, np.int64, float, np.int64,
                                                   bool, float, float), strict=True))
"""The allocation table's column types."""
PER_STEP = ("step", "epoch", "allocated")
"""The allocation columns with one value per step (the others have one per prompt)."""


class DegenerateRunError(RuntimeError):
    """A method that allocates from estimates fell back to uniform counts too often."""


class Study(Protocol):
    """What a trainer supplies to the loop."""

    config: RunConfig
    n_prompts: int  # training prompts

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def exact_p(self, ids: np.ndarray) -> np.ndarray | None:
        """The exact success probabilities of these prompts, or None if the task has none."""

    def sample(self, run: Run, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Draw counts[i] rollouts of prompt ids[i], keep them for the update, and return the
        successes per prompt."""

    def update(self, run: Run, outcome: Outcome) -> None:
        """One optimizer step on the kept rollouts of outcome.ids (all of the exact likelihood
        when outcome.allocation is None), then forget this step's rollouts."""

    def evaluate(self, run: Run) -> None: ...

    def finish(self, run: Run) -> pd.DataFrame: ...


class Run:
    """Everything the loop carries from step to step; checkpointed as a whole with the study."""

    def __init__(self, study: Study):
        self.study, self.config = study, study.config
        self.method = METHODS[self.config.method]
        self.history = self.config.allocator.for_method(self.method).history(study.n_prompts)
        self.step = self.epoch = self.position = 0
        self.finished = False
        self.rows: list[tuple] = []  # (step, metric, k, value)
        # one block per step: ALLOCATION_COLUMNS, a scalar for those in PER_STEP and an array
        # per prompt for the rest (a row per prompt only when a table is built)
        self.allocations: list[tuple] = []
        # one block per step of a sequence task: (step, prompt, length, reward), arrays (R,)
        self.rollouts: list[tuple] = []
        self.last_exact = np.full(study.n_prompts, np.nan)  # p at each prompt's last visit
        self.allocator_state: dict = {}  # what stateful allocators keep across steps
        self.stopped = ""  # why the protocol ended the run before config.steps, if it did
        self._order, self._order_epoch = np.zeros(0, dtype=np.int64), -1  # the epoch's order

    # ------------------------------------------------------------------ logging and tables

    def log(self, metric: str, value: float, k: int | None = None) -> None:
        self.rows.append((self.step, metric, k, float(value)))

    def metrics(self) -> pd.DataFrame:
        table = pd.DataFrame(self.rows, columns=["step", "metric", "k", "value"])
        table["k"] = table["k"].astype("Int64")
        return _with_keys(table, self.config)

    def allocation_table(self) -> pd.DataFrame:
        return _with_keys(self._allocation_columns(), self.config)

    def allocation_rows(self) -> list[tuple]:
        """The allocation table's rows as tuples of Python numbers (what a checkpoint keeps)."""
        return list(self._allocation_columns().itertuples(index=False, name=None))

    def record_rollouts(self, prompts, lengths, rewards) -> None:
        """This step's responses, one entry each (R,): the prompt each answered, its length in
        tokens and its reward (ROLLOUT_COLUMNS; sera.trainers.sequence records them)."""
        self.rollouts.append(_rollout_block(self.step, prompts, lengths, rewards))

    def rollout_table(self) -> pd.DataFrame:
        """ROLLOUT_COLUMNS, one row per response of every recorded step, with the run's keys."""
        blocks = self.rollouts
        sizes = [len(block[1]) for block in blocks]
        table = pd.DataFrame({
            "step": np.repeat(np.array([b[0] for b in blocks], dtype=np.int64), sizes),
            "prompt": np.concatenate([b[1] for b in blocks] or [np.zeros(0, np.int64)]),
            "length": np.concatenate([b[2] for b in blocks] or [np.zeros(0, np.int64)]),
            "reward": np.concatenate([b[3] for b in blocks] or [np.zeros(0)])})
        table.insert(2, "group", table.groupby(["step", "prompt"])["reward"].transform("size")
                     .astype(np.int64))
        return _with_keys(table[list(ROLLOUT_COLUMNS)], self.config)

    def _allocation_columns(self) -> pd.DataFrame:
        """ALLOCATION_COLUMNS, one row per prompt and step, from the steps' blocks."""
        blocks = self.allocations
        sizes = [len(block[2]) for block in blocks]
        return pd.DataFrame({
            name: np.repeat(np.array([block[i] for block in blocks], dtype), sizes)
            if name in PER_STEP else np.concatenate([block[i] for block in blocks] or
                                                    [np.zeros(0, dtype)]).astype(dtype)
            for i, (name, dtype) in enumerate(ALLOCATION_DTYPES.items())})

    # ------------------------------------------------------------------ batches

    def epoch_finished(self) -> bool:
        return self.position >= self.study.n_prompts

    def end_epoch(self) -> None:
        """The epoch boundary: the history folds in the epoch's outcomes (estimates change only
        here) and the next permutation begins."""
        self.history.end_epoch()
        self.epoch, self.position = self.epoch + 1, 0

    def next_batch(self, size: int | None = None) -> np.ndarray:
        """The next prompts of this epoch's permutation, seeded by (seed, epoch): batch_size of
        them, fewer at the end of the epoch."""
        if self._order_epoch != self.epoch:  # drawn once per epoch
            self._order = np.random.default_rng([self.config.seed, self.epoch]).permutation(
                self.study.n_prompts)
            self._order_epoch = self.epoch
        ids = self._order[self.position:self.position + (size or self.config.batch_size)]
        self.position += ids.size
        return ids

    def draw(self, size: int) -> np.ndarray:
        """More prompts for a sequential protocol within a step, continuing the epoch's order
        and crossing into the next epoch (with its boundary) when this one is used up."""
        parts = []
        while size > 0:
            if self.epoch_finished():
                self.end_epoch()
            ids = self.next_batch(size)
            parts.append(ids)
            size -= ids.size
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    @timed
    def plan(self, ids: np.ndarray, exact: np.ndarray | None = None) -> Allocation | None:
        """The batch's Allocation through the method table, from the method's estimates (the
        task's exact p for sera-oracle)."""
        estimates, available = estimate(self.method, self.history, ids, exact)
        return plan(self.method, self.config.allocator, self.config.n0, ids, estimates,
                    available, self.allocator_state, self.history)

    # ------------------------------------------------------------------ one step's records

    def record(self, outcome: Outcome) -> None:
        """Every sampled group into the history (pending until the epoch ends), and the
        diagnostics every method shares, per prompt first so that unequal counts compare."""
        ids, allocation = outcome.ids, outcome.allocation
        if outcome.exact is not None:
            self._record_estimates(ids, allocation, outcome.exact)
        if allocation is None:
            return
        for sampled_ids, counts, successes in outcome.sampled:
            self.history.record_groups(sampled_ids, successes, counts)
        self.log("rollouts", outcome.generated)
        counts, kept = allocation.counts, allocation.retained
        self.log("prompts", int(kept.sum()))
        if kept.any():
            rate = outcome.successes[kept] / counts[kept]
            self.log("train_reward", mean(rate))
            self.log("mixed_groups", mean((rate > 0) & (rate < 1)))
            self.log("allocation_spread", counts[kept].std() / self.config.n0)
        self.log("retained", mean(kept) if kept.size else 0.0)
        allocated = allocation.allocated
        if self.method.allocator == "waterline":
            self.log("allocated", float(allocated))
            if self.config.allocator.for_method(self.method).u_min and allocated:
                self.log("safeguard_fallback", float(allocation.fallback))
        exact = outcome.exact if outcome.exact is not None else np.full(ids.size, np.nan)
        self.allocations.append((
            self.step, self.epoch, np.array(ids, dtype=np.int64),
            np.array(allocation.p, dtype=float), np.array(counts, dtype=np.int64), allocated,
            np.array(outcome.successes, dtype=float), np.array(exact, dtype=float)))

    def _record_estimates(self, ids, allocation, exact) -> None:
        """How far the historical estimates sit from the exact p, against the ideal history-only
        estimate (the exact p at the prompt's previous visit)."""
        if self.method.estimates == "history" and allocation is not None \
                and allocation.rule != "uniform":
            _log_agreement(self, "history", allocation.p, exact)
        previous = self.last_exact[ids]
        seen = ~np.isnan(previous)
        if self.method.estimates == "history" and seen.sum() >= 2:
            _log_agreement(self, "ideal", previous[seen], exact[seen])
        self.last_exact[ids] = exact

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict:
        return {"study": self.study.state_dict(), "history": self.history.state_dict(),
                "step": self.step, "epoch": self.epoch, "position": self.position,
                "finished": self.finished, "rows": self.rows, "allocations": self.allocation_rows(),
                "last_exact": self.last_exact, "allocator_state": self.allocator_state,
                "stopped": self.stopped,
                "rollouts": [(step, *(part.tolist() for part in parts))
                             for step, *parts in self.rollouts],
                "config": as_dict(self.config)}

    def load_state_dict(self, state: dict) -> None:
        self.study.load_state_dict(state["study"])
        self.history.load_state_dict(state["history"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.finished = state["finished"]
        self.rows = list(state["rows"])
        rows = pd.DataFrame(list(state["allocations"]), columns=list(ALLOCATION_COLUMNS))
        self.allocations = [  # the checkpoint's rows (one per prompt and step) as blocks again
            tuple(part[name].iloc[0] if name in PER_STEP else part[name].to_numpy(dtype)
                  for name, dtype in ALLOCATION_DTYPES.items())
            for _, part in rows.groupby("step", sort=False)]
        self.last_exact = np.asarray(state["last_exact"], dtype=float)
        self.allocator_state = state.get("allocator_state", {})
        self.stopped = state.get("stopped", "")
        # absent in checkpoints written before rollouts were recorded
        self.rollouts = [_rollout_block(*block) for block in state.get("rollouts", [])]


def _rollout_block(step: int, prompts, lengths, rewards) -> tuple:
    return (int(step), np.asarray(prompts, dtype=np.int64), np.asarray(lengths, dtype=np.int64),
            np.asarray(rewards, dtype=float))


def _log_agreement(run: Run, name: str, estimate, exact) -> None:
    """Mean absolute error and Pearson correlation of the estimates against the exact p (the
    correlation from centred dot products: np.corrcoef costs more than the rest of a step)."""
    estimate, exact = np.asarray(estimate, dtype=float), np.asarray(exact, dtype=float)
    if estimate.size == 0:  # a step that sampled nothing (a sequential rule's last)
        return
    run.log(f"{name}_mae", mean(np.abs(estimate - exact)))
    a, b = estimate - mean(estimate), exact - mean(exact)
    scale = np.sqrt((a @ a) * (b @ b))
    if scale > 0:
        run.log(f"{name}_pearson", min(max((a @ b) / scale, -1.0), 1.0))


def mean(values: np.ndarray) -> float:
    """The mean of a non-empty float or bool array, the same number as values.mean() (one sum,
    one division) without numpy's dispatch, which costs more than the sum itself on a batch of 16:
    the loop's diagnostics take a dozen means per step. (Not for int64 sums past 2**63, which
    numpy's mean takes in floats.)"""
    return values.sum() / values.size


def _with_keys(table: pd.DataFrame, config: RunConfig) -> pd.DataFrame:
    """table with the run's keys as its first columns (one value each, on every row)."""
    keys = pd.DataFrame(config.keys(), index=table.index)  # scalars, broadcast
    return pd.concat([keys, table], axis=1)


# ---------------------------------------------------------------------- the loop


def fit(study: Study, callback=None) -> Results:
    """Run (or resume, or read back when finished) one configuration; returns its tables, which
    are also saved in config.out (through sera.runstore, checkpointed every checkpoint_every
    steps)."""
    config = study.config
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(study)
    state = checkpoint.load(out / runstore.CHECKPOINT, as_dict(config), defaults(config))
    if state is not None:
        run.load_state_dict(state)
        # more steps were asked for (a run its protocol stopped stays stopped)
        run.finished = run.finished and (run.step >= config.steps or bool(run.stopped))
    extra = study.provenance() if hasattr(study, "provenance") else {}  # e.g. the warm-up
    runstore.begin(out, as_dict(config), {"step": run.step, **checkpoint.provenance(), **extra})
    started, first_step = time.perf_counter(), run.step

    def save(run: Run) -> None:
        if run.step % config.checkpoint_every == 0 and run.step < config.steps:
            _save(run, out)
        if callback is not None:
            callback(run)

    if not run.finished:
        _advance(run, study, save)
        final = _with_keys(_finish(run, study), config)
        _save(run, out)
        runstore.finish(out, final, {"step": run.step, "steps_run": run.step - first_step,
                                     "stopped": run.stopped,
                                     "wall_s": round(time.perf_counter() - started, 1)})
    results = Results(run.metrics(), runstore.read_table(out, "final"), run.allocation_table())
    _check_allocated_share(run)
    return results


def train_in_memory(study: Study, callback=None, tables=TABLES) -> Results:
    """Run one configuration start to end in memory: the same steps as `fit`, with no folder,
    no checkpoint and no provenance (the simulator's repetitions). tables: the ones to build;
    the others come back empty (a regime map reads the metrics only, and building a run's
    tables costs a sixth of a short simulated run)."""
    unknown = set(tables) - set(TABLES)
    if unknown:
        raise ValueError(f"tables must be among {TABLES}, got {sorted(unknown)}")
    run = Run(study)
    _advance(run, study, callback)
    final = _finish(run, study)
    _check_allocated_share(run)
    build = {"metrics": run.metrics, "final": lambda: _with_keys(final, study.config),
             "allocations": run.allocation_table}
    return Results(*(build[name]() if name in tables else pd.DataFrame() for name in TABLES))


def _advance(run: Run, study: Study, after_step=None) -> None:
    """The steps from run.step to config.steps (or until the protocol stops the run)."""
    config = run.config
    bar = _progress(config, run.step)
    protocol = PROTOCOLS[run.method.protocol]
    while run.step < config.steps and not run.stopped:
        if run.epoch_finished():
            run.end_epoch()  # the epoch boundary: estimates change only here
        if run.step % config.eval_every == 0:
            study.evaluate(run)
        try:
            outcome = protocol(run, study, run.next_batch())
        except GenerationLimit as limit:  # DAPO's recipe stops the run here, and so do we
            run.stopped = str(limit)
            run.log("stopped", 1.0)
            break
        study.update(run, outcome)
        run.record(outcome)
        run.step += 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix(_latest(run.rows), refresh=False)
        if after_step is not None:
            after_step(run)
    if bar is not None:
        bar.close()


def _finish(run: Run, study: Study) -> pd.DataFrame:
    """The last evaluation (unless the run stopped just after one) and the final table."""
    if not (run.stopped and run.step % run.config.eval_every == 0):
        study.evaluate(run)
    final = study.finish(run)
    _log_allocated_share(run)
    run.finished = True
    return final


def _log_allocated_share(run: Run) -> None:
    allocated = [v for _, metric, _, v in run.rows if metric == "allocated"]
    if allocated:
        run.log("allocated_share", float(np.mean(allocated)))


def _check_allocated_share(run: Run) -> None:
    shares = [v for _, metric, _, v in run.rows if metric == "allocated_share"]
    if run.method.estimates == "history" and shares \
            and shares[-1] < run.config.min_allocated_share:
        epoch = -(-run.study.n_prompts // run.config.batch_size)
        raise DegenerateRunError(
            f"{run.config.method} allocated from its estimates in {shares[-1]:.0%} of "
            f"{run.config.steps} steps (min_allocated_share {run.config.min_allocated_share:.0%}):"
            f" estimates exist only after an epoch ({epoch} steps here), so the run was mostly "
            f"uniform MaxRL. Run more steps or use fewer training prompts. Its tables are in "
            f"{run.config.out}.")


def _save(run: Run, out: Path) -> None:
    checkpoint.save(out / runstore.CHECKPOINT, run.state_dict())
    runstore.write_csv(run.metrics(), out / runstore.table_file("metrics"))
    if run.allocations:
        runstore.write_csv(run.allocation_table(), out / runstore.table_file("allocations"))
    if run.rollouts:
        runstore.write_csv(run.rollout_table(), out / runstore.table_file("rollouts"))


def _progress(config: RunConfig, start: int):
    if not config.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=config.steps, initial=start, leave=False,
                desc=f"{config.method} n0={config.n0} seed={config.seed}")


def _latest(rows) -> dict:
    found = {}
    for _, metric, k, value in reversed(rows):
        name = metric if k is None else f"{metric}@{k}"
        if name in ("train_reward", "val_pass@1", "cosine") and name not in found:
            found[name] = f"{value:.3f}"
    return found
