"""The method table: what each training method estimates, how it allocates, how it scores.

A method is one entry of METHODS; every trainer plans its batches through `plan` and scores
responses through the entry's advantage function, so adding a method is adding an entry. A name
means the same thing in every trainer. `sera` is the paper's method: the waterline on historical
estimates that count each epoch's successes and failures (appendix C.1), the observability-guided
selection on (C.3, at U_MIN) and the weights n0 / N_q; `sera-oracle` the same from the exact
success probabilities where a task knows them. The package's own variants carry their own names:
`sera-rate` plans from the rate rule (each epoch's success rate counted as 16 trials) with the
selection off, as every SERA run stored before the paper's method was separated from it did, and
`sera-rate-safeguard` adds a strong selection (u_min 0.3); `sera-evidence-step` scales each
step by the evidence it rests on (sera.evidence), `sera-evidence-waterline` holds the waterline
where it would cost evidence, and `sera-capped` floors MaxRL's group mean at 1 / n0: candidate
remedies. The rules SERA is compared with (docs/baselines.md) come with their own estimator and
weighting, and where it separates the allocation rule from the estimator also as `<rule>-maxrl`
(MaxRL advantages with the multiplicity weights n0 / N_q). Names ending in `-reconstruction` are
reconstructions from an abstract.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from sera import _checks
from sera.allocation import Allocation, allocate, from_counts, uniform
from sera.allocator_config import AllocatorConfig
from sera.baselines import COMPARED, CeroAllocator
from sera.estimators import (
    grpo_advantages,
    maxrl_advantages,
    rl2ml_advantages,
    rloo_advantages,
)
from sera.evidence import evidence_waterline, expected_mixed_successes
from sera.fidelity import kappa
from sera.history import SuccessHistory
from sera.timing import timed

U_MIN = 0.05
"""The selection threshold of the paper's SERA: a prompt is kept only while its group is at least
this likely to be mixed, U(p_hat, N_q) >= U_MIN, so prompts whose estimate says fewer than one
group in 20 would carry a signal are dropped. The paper gives no value and reports that every
candidate prompt stayed active in the windows it analysed (D.2.5). How often it binds on the
stored runs is measured by sera.studies.diagnosis.selection_binding (tests/test_diagnosis.py)."""
SAFEGUARD = 0.3
"""The selection threshold of the package's `sera-rate-safeguard` variant: a strong filter, not
the paper's."""


@dataclass(frozen=True)
class Method:
    """One training method."""

    name: str
    estimates: str
    """Where the success estimates come from: none, exact (the task knows p) or history."""
    allocator: str
    """How the method gets its counts: a rule of sera.allocation.RULES (uniform: n0 each, or a
    compared rule of sera.baselines.COMPARED), waterline (SERA: the waterline rule the
    AllocatorConfig's rounding names, paper or exact), none (no rollouts: the exact
    likelihood), cero (stateful), reweight (uniform counts, responses weighted
    1 / kappa(p_hat, n0)) or sequential (its protocol sets the counts)."""
    advantages: Callable | None
    """Per-response advantages from (rewards, sizes=group sizes); None for the exact loss."""
    summary: str
    weighted: bool = True
    """Responses weighted n0 / N_q (the multiplicity correction); False: weight 1 each."""
    protocol: str = "one-shot"
    """How the step gets its rollouts (sera.trainers.protocols): one-shot (plan, then sample
    once) or a sequential rule that samples in rounds: dynamic, two-stage, probe-commit."""
    estimator: str = "smoothed"
    """How a history-based method estimates p: smoothed (SERA's discounted Beta-smoothed
    evidence, never 0 or 1) or last-epoch (the raw success rate of the prompt's last epoch, as
    Knapsack RL, GVM and DARS estimate it, so their rules for p = 0 and p = 1 can fire)."""
    n_max_factor: int | None = None
    """The method's own cap on a prompt's rollouts as a multiple of n0, where its authors' code
    sets one (Knapsack RL: 16); None: the allocator config's n_max."""
    drop_uniform_groups: bool = False
    """Leave all-0 and all-1 groups out of the update, so that the loss normaliser counts the
    mixed groups only (DARS); their outcomes still enter the history."""
    history_rule: str = "counts"
    """How an epoch's outcomes enter the smoothed estimate (sera.SuccessHistory): counts (the
    paper's C.1) or rate (the package's variant). An AllocatorConfig that sets one overrides it."""
    selection: float = 0.0
    """The method's own observability threshold u_min (waterline methods): a prompt is kept
    while U(p_hat, N_q) >= selection; 0.0: no selection, as everywhere in the package. An
    AllocatorConfig whose u_min is set (not None) overrides it."""
    evidence_step: bool = False
    """Scale each step's learning rate by sera.evidence.evidence_scale: min(1, the successes in
    the step's mixed groups over what uniform counts would give at the estimates)."""
    evidence_floor: bool = False
    """Where the waterline's counts would leave the batch fewer expected successes in mixed
    groups than uniform counts, plan with sera.evidence.evidence_waterline instead: the highest
    common fidelity that keeps uniform counts' expected evidence."""
    lone_success_cap: bool = False
    """Score with the group mean floored at 1 / n0 (maxrl_advantages' floor): a rare success in a
    group larger than n0 weighs at most what one success among n0 would."""

    @property
    def maxrl(self) -> bool:
        """Whether the advantages are MaxRL's (options bound by functools.partial included), whose
        expectation is kappa(p, N) grad log p per prompt."""
        advantages = self.advantages
        while isinstance(advantages, partial):
            advantages = advantages.func
        return advantages is maxrl_advantages

    @property
    def beyond_plugins(self) -> bool:
        """Whether the method changes something the verl and TRL plug-ins leave to the framework
        or do their own way (the learning rate, the advantages' mean, the waterline): they
        refuse it rather than train it without that change."""
        return self.evidence_step or self.lone_success_cap or self.evidence_floor

    @property
    def u_min(self) -> float | None:
        """The older spelling of `selection`, with None for no selection (deprecated)."""
        warnings.warn("Method.u_min is spelled Method.selection, 0.0 for no selection "
                      "(None only in the tables' u_min column, where no threshold was applied)",
                      DeprecationWarning, stacklevel=2)
        return self.selection or None


def _entries():
    """Every method: the likelihood and uniform baselines, SERA and its variants, then the rules
    SERA is compared with."""
    yield from _own_entries()
    yield from _compared_entries()


def _own_entries():
    yield Method("ce", "none", "none", None,
                 "cross-entropy: the exact likelihood gradient, where the task knows p")
    yield Method("maxrl", "none", "uniform", maxrl_advantages,
                 "MaxRL: n0 rollouts each, centered advantages (r - mean) / mean")
    yield Method("grpo", "none", "uniform", grpo_advantages,
                 "GRPO: n0 rollouts each, advantages (r - mean) / (std + eps)")
    yield Method("rloo", "none", "uniform", rloo_advantages,
                 "RLOO: n0 rollouts each, leave-one-out baseline")
    yield Method("sera", "history", "waterline", maxrl_advantages,
                 "SERA as the paper runs it: waterline on discounted success and failure counts, "
                 f"prompts kept while U >= {U_MIN}, MaxRL advantages x n0 / N_q", selection=U_MIN)
    yield Method("sera-oracle", "exact", "waterline", maxrl_advantages,
                 "SERA on the exact success probabilities (tasks that know p)",
                 selection=U_MIN)
    yield Method("sera-rate", "history", "waterline", maxrl_advantages,
                 "the package's SERA variant: estimates from the rate rule (an epoch counts as "
                 "16 trials), no prompt selection", history_rule="rate")
    yield Method("sera-rate-safeguard", "history", "waterline", maxrl_advantages,
                 f"sera-rate with prompts kept while U >= {SAFEGUARD} (a strong filter)",
                 history_rule="rate", selection=SAFEGUARD)
    yield Method("sera-evidence-step", "history", "waterline", maxrl_advantages,
                 "the paper's sera with each step's learning rate scaled by min(1, its successes "
                 "in mixed groups / those uniform counts would give at the estimates): a remedy "
                 "candidate, not the paper's", selection=U_MIN, evidence_step=True)
    yield Method("sera-capped", "history", "waterline", maxrl_advantages,
                 "the paper's sera with MaxRL's group mean floored at 1 / n0, so that a lone "
                 "success in a large group weighs what one among n0 would: a remedy candidate, "
                 "not the paper's", selection=U_MIN, lone_success_cap=True)
    yield Method("sera-evidence-waterline", "history", "waterline", maxrl_advantages,
                 "the paper's sera whose waterline is held, where it would cost evidence, to the "
                 "highest level that keeps uniform counts' expected successes in mixed groups: "
                 "a remedy candidate, not the paper's", selection=U_MIN, evidence_floor=True)
    yield Method("reweight", "history", "reweight", maxrl_advantages,
                 "inverse-fidelity reweighting: n0 each, MaxRL x 1 / kappa(p_hat, n0) on the "
                 "rate rule's estimates", history_rule="rate")


def _compared_entries():
    # each registered rule's authors' method, then (after CERO) its MaxRL-weighted variants
    for rule in COMPARED.values():
        yield Method(rule.name, "history", rule.name, rule.advantages, rule.summary,
                     weighted=False, estimator="last-epoch", n_max_factor=rule.n_max_factor,
                     drop_uniform_groups=rule.drop_uniform_groups)
    yield Method("cero-reconstruction", "history", "cero", maxrl_advantages,
                 "CERO, myopic (reconstruction): posterior variance x saturating utility of "
                 "cumulative rollouts (rate rule's posterior), MaxRL x n0 / N_q",
                 history_rule="rate")
    for rule in COMPARED.values():
        if rule.maxrl_variant:
            yield Method(f"{rule.name}-maxrl", "history", rule.name, maxrl_advantages,
                         f"the {rule.name} allocation with MaxRL advantages x n0 / N_q",
                         estimator="last-epoch", n_max_factor=rule.n_max_factor)
    yield Method("dapo", "none", "sequential", grpo_advantages,
                 "DAPO dynamic sampling: 3B prompts x n0, keep mixed groups, refill; GRPO",
                 weighted=False, protocol="dynamic")
    yield Method("dapo-maxrl", "none", "sequential", maxrl_advantages,
                 "DAPO dynamic sampling with MaxRL advantages", protocol="dynamic")
    yield Method("dars-hw-2stage", "none", "sequential", partial(rl2ml_advantages, alpha=0.0),
                 "DARS-HW as published: pilot n0, top-up to n0 / (2a); A = r - mean; all-0 and "
                 "all-1 groups dropped; not matched to the budget", weighted=False,
                 protocol="two-stage", drop_uniform_groups=True)
    yield Method("sara-reconstruction", "history", "sequential", grpo_advantages,
                 "SARA-style probe / commit / abandon on the Beta posterior (reconstruction, "
                 "rate rule); GRPO on committed groups", weighted=False, protocol="probe-commit",
                 history_rule="rate")
    yield Method("rl2ml-0.5-reconstruction", "none", "uniform",
                 partial(rl2ml_advantages, alpha=0.5),
                 "RL2ML's alpha = 0.5 estimator (reconstruction), n0 each")
    yield Method("rl2ml-2-reconstruction", "none", "uniform",
                 partial(rl2ml_advantages, alpha=2.0),
                 "RL2ML's alpha = 2 estimator (reconstruction), n0 each")


def table(methods: Iterable[Method]) -> dict[str, Method]:
    """name -> Method in order; a name given twice is refused with a ValueError naming it."""
    return _checks.registry(((m.name, m) for m in methods), "method")


METHODS: dict[str, Method] = table(_entries())


def supported(exact: bool) -> tuple[str, ...]:
    """Method names a task can run: those needing exact p only where the task knows p."""
    return tuple(name for name, m in METHODS.items()
                 if (m.estimates != "exact" and m.allocator != "none") or exact)


def _with_evidence_floor(result: Allocation, estimates, n_min: int, n_max: int | None,
                         n0: int) -> Allocation:
    """The waterline's allocation where it keeps uniform counts' expected successes in mixed
    groups at the estimates; else sera.evidence.evidence_waterline's counts over every prompt of
    the batch (no selection: uniform counts, which meet the constraint, keep every prompt)."""
    p = np.asarray(estimates, dtype=float)
    reference = expected_mixed_successes(p, np.full(p.size, float(n0))).sum()
    if expected_mixed_successes(p, result.counts).sum() >= reference:
        return result
    upper = p.size * n0 - (p.size - 1) * n_min if n_max is None else n_max
    counts = evidence_waterline(p, p.size * n0, n_min, upper, n0)
    return from_counts(p, counts, n0, "evidence-waterline")


@timed
def estimate(method: Method, history: SuccessHistory, ids: np.ndarray,
             exact: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(p, available): the success estimates a method plans the batch from, read once. exact
    methods read the task's exact p; history-based ones the history's smoothed estimate or the
    raw rate of the prompt's last epoch (method.estimator); methods without estimates record the
    smoothed estimate in the tables and are always available."""
    if method.estimates == "exact":
        if exact is None:
            raise ValueError(f"method {method.name!r} needs exact success probabilities, which "
                             f"this task does not provide")
        return np.asarray(exact, dtype=float), np.ones(len(ids), dtype=bool)
    if method.estimates == "history" and method.estimator == "last-epoch":
        return history.last_rates(ids)
    p, available = history.estimate(ids)
    if method.estimates == "none":
        available = np.ones(len(ids), dtype=bool)
    return p, available


@timed
def plan(method: Method, allocator: AllocatorConfig, n0: int, ids: np.ndarray,
         estimates: np.ndarray, available: np.ndarray | None = None, state: dict | None = None,
         history: SuccessHistory | None = None) -> Allocation | None:
    """The batch's Allocation from its estimates (`estimate`); None for methods without
    rollouts. Every method plans here.

    available: which prompts have an estimate (None: all); a history-based method plans a batch
    with any prompt missing one as uniform counts with fallback=True. state: a dict the run keeps
    (and checkpoints) for stateful allocators; history: the posterior CERO reads.
    """
    if method.allocator == "none":
        return None
    if method.protocol != "one-shot":
        raise ValueError(f"method {method.name!r} samples in rounds ({method.protocol}); its "
                         f"protocol decides the counts, not plan")
    allocator = allocator.for_method(method)
    budget = ids.size * n0
    n_max = method.n_max_factor * n0 if method.n_max_factor else allocator.n_max_for(n0)
    bounds = dict(n_min=allocator.n_min, n_max=n_max, n0=n0)
    ready = available is None or bool(np.all(available))
    if method.allocator == "uniform":
        result = uniform(estimates, budget, **bounds)
    elif not ready:
        result = replace(uniform(estimates, budget, **bounds), fallback=True)
    elif method.allocator == "reweight":
        result = uniform(estimates, budget, **bounds)
        result = replace(result, weights=1.0 / kappa(result.p, result.counts))
    elif method.allocator == "cero":
        if history is None or state is None:
            raise ValueError("the cero allocator needs the history and the run's state")
        cero = state.setdefault("cero", CeroAllocator(history.n_prompts))
        result = cero.plan(ids, *history.posterior(ids), budget, allocator.n_min, n_max, n0)
    else:
        rule = allocator.rounding if method.allocator == "waterline" else method.allocator
        u_min = allocator.u_min if method.allocator == "waterline" else 0.0
        result = allocate(estimates, budget, rule=rule, u_min=u_min, **bounds)
        if method.evidence_floor:
            result = _with_evidence_floor(result, estimates, allocator.n_min, n_max, n0)
    if not method.weighted:
        result = replace(result, weights=(result.counts > 0).astype(float))
    return result

