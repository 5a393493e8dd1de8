"""How a method gets its rollouts within one step: once (the allocators), or in rounds that read
the rewards as they arrive (DAPO's dynamic sampling, DARS's two stages, a SARA-style probe).

A protocol takes the step's batch and returns an Outcome: the prompts that enter the update with
their counts, successes and weights, and every rollout it generated, used or not. It samples
through study.sample(run, ids, counts), which keeps the rollouts for the update; sequential
protocols may draw more prompts from the run (run.draw). Rules and sources: docs/baselines.md.
Two caveats hold for every sequential rule: counts that depend on rewards reused in the same
update make the per-group estimator biased for a fixed objective, and under centered MaxRL
all-0 and all-1 groups already have zero advantage, so filtering them changes only the number of
prompts and the normalizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import betaln

from sera import _checks
from sera.counts import Allocation, from_counts


@dataclass
class Outcome:
    """One step's rollouts: ids, allocation and successes of the prompts in the update (their
    counts are the rollouts the update uses), the exact p of those prompts where the task knows
    it, and every group sampled this step (ids, counts, successes) for the history and for the
    count of rollouts generated."""

    ids: np.ndarray
    allocation: Allocation | None
    successes: np.ndarray | None = None
    exact: np.ndarray | None = None
    sampled: list = field(default_factory=list)

    @property
    def generated(self) -> int:
        return int(sum(counts.sum() for _, counts, _ in self.sampled))


def one_shot(run, study, ids) -> Outcome:
    """Plan the batch through the method table, sample once, update on everything sampled (on
    the mixed groups only for methods that drop the others, as DARS does)."""
    exact = study.exact_p(ids)
    allocation = run.plan(ids, exact)
    if allocation is None:
        return Outcome(ids, None, exact=exact)
    successes = study.sample(run, ids, allocation.counts)
    outcome = Outcome(ids, allocation, successes, exact, [(ids, allocation.counts, successes)])
    return mixed_only(outcome) if run.method.drop_uniform_groups else outcome


def mixed_only(outcome: Outcome) -> Outcome:
    """The outcome without its all-0 and all-1 groups (and prompts without rollouts): the update
    and its normaliser see the mixed groups only; every sampled group stays in `sampled`, for
    the history and the count of rollouts generated."""
    counts = outcome.allocation.counts
    keep = (outcome.successes > 0) & (outcome.successes < counts)
    allocation = from_counts(outcome.allocation.p[keep], counts[keep], outcome.allocation.n0,
                             outcome.allocation.rule)
    allocation = replace(allocation, weights=outcome.allocation.weights[keep])
    exact = outcome.exact[keep] if outcome.exact is not None else None
    return Outcome(outcome.ids[keep], allocation, outcome.successes[keep], exact,
                   outcome.sampled)


class GenerationLimit(RuntimeError):
    """DAPO's recipe gave up: max_rounds generation batches did not fill the training batch
    with mixed groups (its trainer raises "Generated too many. Please check your data.")."""


def dynamic_sampling(run, study, ids, factor: int = 3, max_rounds: int = 10) -> Outcome:
    """DAPO's dynamic sampling as its verl recipe runs it: generation batches of factor x B
    prompts with n0 rollouts each; prompts whose rewards are not all equal are kept, more
    batches are drawn until B are kept, then the kept are truncated to B. Every rollout
    generated counts. Like the recipe's max_num_gen_batches, at most max_rounds batches (0: no
    limit); when they fall short the recipe raises, and so does this (GenerationLimit), which
    the training loop turns into the end of the run at that step."""
    n0, size = run.config.n0, ids.size
    batch = np.concatenate([ids, run.draw((factor - 1) * size)])
    kept, kept_successes, sampled, seen = [], [], [], set()
    while True:
        batch = np.array([q for q in batch if q not in seen], dtype=np.int64)
        seen.update(batch.tolist())
        counts = np.full(batch.size, n0)
        successes = study.sample(run, batch, counts)
        sampled.append((batch, counts, successes))
        mixed = (successes > 0) & (successes < n0)
        kept += batch[mixed].tolist()
        kept_successes += successes[mixed].tolist()
        if len(kept) >= size:
            break
        if 0 < max_rounds <= len(sampled):
            raise GenerationLimit(
                f"{len(sampled)} generation batches of {factor} x {size} prompts kept "
                f"{len(kept)} mixed groups, fewer than the {size} a step needs (DAPO's "
                f"max_num_gen_batches = {max_rounds}): the prompts are all solved or all failed")
        batch = run.draw(factor * size)
    run.log("generation_rounds", len(sampled))
    kept_ids = np.array(kept[:size], dtype=np.int64)
    successes = np.array(kept_successes[:size], dtype=float)
    estimates = run.history.estimate(kept_ids)[0]
    allocation = from_counts(estimates, np.full(kept_ids.size, n0), n0, "dynamic")
    return Outcome(kept_ids, allocation, successes, study.exact_p(kept_ids), sampled)


def dars_extra(accuracy: np.ndarray, n0: int, n_max: int, schedule: str = "hw") -> np.ndarray:
    """DARS's top-up after a pilot of n0 with accuracy a (a <= 1e-6 read as 0.5 / n0): none for
    a >= 1/2, else ceil(((1-a) n0 - n0 S) / S) (hw: n0 / (2a) in all) or ceil((n0/2 - n0 S) / S)
    (et: n0 / (4a(1-a)) in all) with S = 2a(1-a), capped at n_max - n0."""
    a = np.where(accuracy <= 1e-6, 0.5 / n0, accuracy)
    spread = 2 * a * (1 - a)
    target = (1 - a) * n0 if schedule == "hw" else n0 / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        extra = np.ceil((target - n0 * spread) / spread)
    extra = np.where(a >= 0.5, 0, np.clip(extra, 0, n_max - n0))
    return extra.astype(np.int64)


def two_stage(run, study, ids, schedule: str = "hw") -> Outcome:
    """DARS: a uniform pilot of n0, then a top-up chosen from the pilot's accuracy; pilot and
    top-up form one group. Not matched to the budget: the outcome counts what it used."""
    n0 = run.config.n0
    pilot_counts = np.full(ids.size, n0)
    pilot = study.sample(run, ids, pilot_counts)
    extra = dars_extra(pilot / n0, n0, run.config.allocator.n_max_for(n0), schedule)
    more = np.flatnonzero(extra > 0)
    sampled = [(ids, pilot_counts, pilot)]
    successes = pilot.astype(float)
    if more.size:
        topped = study.sample(run, ids[more], extra[more])
        successes[more] += topped
        sampled.append((ids[more], extra[more], topped))
    estimates = run.history.estimate(ids)[0]
    allocation = from_counts(estimates, pilot_counts + extra, n0, "two-stage")
    outcome = Outcome(ids, allocation, successes, study.exact_p(ids), sampled)
    return mixed_only(outcome) if run.method.drop_uniform_groups else outcome


def probe_commit(run, study, ids, probe: int = 2, commit_above: float = 0.8,
                 abandon_below: float = 0.2, max_rounds: int = 200) -> Outcome:
    """A SARA-style rule (a reconstruction from the abstract): probe each prompt with `probe`
    rollouts; a mixed probe commits the prompt (filled up to n0); an all-fail or all-success probe
    asks the Beta posterior for the chance that a full group of n0 ends mixed,
    1 - B(a, b + n0) / B(a, b + k) after k failures (after k successes 1 - B(a + n0, b) /
    B(a + k, b)); commit above `commit_above`, abandon below `abandon_below` (its probe leaves the
    update), else draw one more, up to n0. Fresh prompts take the place of the abandoned until the
    budget B * n0 is spent. Thresholds and probe size are placeholders the abstract does not
    give."""
    n0, slots = run.config.n0, ids.size
    budget = slots * n0
    a_prior, b_prior = run.history.posterior()
    drawn = {}  # prompt -> (rollouts, successes)
    committed, active, sampled, spent = [], [], [], 0
    queue = list(ids)
    for _ in range(max_rounds):
        room = budget - spent
        open_slots = slots - len(committed) - len(active)
        take = min(open_slots, max(room - len(active), 0) // probe)
        fresh = []
        while len(fresh) < take:
            if not queue:
                queue = run.draw(slots).tolist()
            q = queue.pop(0)
            if q not in drawn:
                fresh.append(q)
        asks = {q: probe for q in fresh} | {q: 1 for q in active}
        if not asks:
            break
        order = np.array(list(asks), dtype=np.int64)
        counts = _truncate(np.array(list(asks.values()), dtype=np.int64), room)
        order, counts = order[counts > 0], counts[counts > 0]
        if not order.size:
            break
        active = []
        for q, k, hits in _sample(run, study, order, counts, drawn, sampled):
            if 0 < hits < k:
                committed.append(q)
            elif k < n0:
                mixed = _mixed_chance(a_prior[q], b_prior[q], k, hits, n0)
                if mixed >= commit_above:
                    committed.append(q)
                elif mixed > abandon_below:
                    active.append(q)
            # else: a full group without contrast, abandoned
        spent = sum(int(c.sum()) for _, c, _ in sampled)
        fill = np.array([q for q in committed if drawn[q][0] < n0], dtype=np.int64)
        if fill.size and spent < budget:
            counts = _truncate(np.array([n0 - drawn[q][0] for q in fill]), budget - spent)
            _sample(run, study, fill[counts > 0], counts[counts > 0], drawn, sampled)
            spent = sum(int(c.sum()) for _, c, _ in sampled)
        if spent >= budget:
            break
    kept = np.array(committed, dtype=np.int64)
    counts = np.array([drawn[q][0] for q in kept], dtype=np.int64)
    successes = np.array([drawn[q][1] for q in kept], dtype=float)
    run.log("committed", kept.size)
    allocation = from_counts(run.history.estimate(kept)[0], counts, n0, "probe-commit")
    return Outcome(kept, allocation, successes, study.exact_p(kept), sampled)


def _mixed_chance(a: float, b: float, k: int, hits: int, n0: int) -> float:
    """The Beta(a, b) posterior's chance that a group of n0 whose first k rollouts all failed
    (hits 0) or all succeeded (hits k) ends mixed: 1 - B(a, b + n0) / B(a, b + k), or
    1 - B(a + n0, b) / B(a + k, b)."""
    if hits == 0:
        return float(1 - np.exp(betaln(a, b + n0) - betaln(a, b + k)))
    return float(1 - np.exp(betaln(a + n0, b) - betaln(a + k, b)))


def _sample(run, study, order, counts, drawn, sampled):
    """Sample, keep the books, and return a list of (prompt, rollouts so far, successes so far)."""
    if not order.size:
        return []
    successes = study.sample(run, order, counts)
    sampled.append((order, counts, successes))
    out = []
    for q, n, s in zip(order.tolist(), counts, successes, strict=True):
        k, hits = drawn.get(q, (0, 0.0))
        drawn[q] = (k + int(n), hits + float(s))
        out.append((q, *drawn[q]))
    return out


def _truncate(counts: np.ndarray, room: int) -> np.ndarray:
    """The counts cut so that their sum fits room (the last prompts lose first)."""
    total = np.cumsum(counts)
    return np.where(total <= room, counts, np.maximum(counts - (total - room), 0))


PROTOCOLS = _checks.registry([("one-shot", one_shot), ("dynamic", dynamic_sampling),
                             ("two-stage", two_stage), ("probe-commit", probe_commit)], "protocol")
"""name (Method.protocol) -> (run, study, ids) -> Outcome."""
