"""One-shot rollout allocators SERA is compared with, as one table of rules.

Each rule is a function (p, budget, n_min, n_max, n0) -> integer counts, p (B,) -> counts (B,)
with sum M = budget and n_min <= N_q <= n_max, like SERA's waterline. A rule is registered once,
as a `Rule` in `COMPARED`: its function, the colour its methods are drawn in, its authors'
paper and code, and the training method its authors pair it with (their advantages, no weights,
last-epoch estimates). Every table reads it from there: `BASELINE_RULES` (name -> function, what
sera.allocate(rule=NAME) reads; sera.allocation.RULES lists every rule allocate knows),
sera.methods.METHODS (the authors' method under the rule's name and, where the rule says so,
`<name>-maxrl`: the same counts trained with MaxRL's advantages and SERA's weights n0 / N_q) and
sera.plotting's styles. A new one-shot allocator is one function and one `Rule`, and a row in
docs/baselines.md, which shows every rule on one batch (its test reads that table);
notebooks/06_allocators_compared.ipynb draws them.

- `knapsack` (Knapsack RL, as its `sampling_budget_by_knapsack` allocates with its defaults):
  n_min each, a dynamic programme over the extra rollouts of the prompts with 0 < p < 1, and a
  cost rule that hands the budget the programme is not expected to need to the p = 0 prompts.
- `gvm` (GVM-RAFT, gradient norms taken as 1): N_q proportional to 1 / sqrt(p_q + 0.001 / p_q).
- `dars-hw`, `dars-et` (DARS, budget-matched from history): N_q proportional to the total the
  pilot-based rule would give, max(1, 1/(2p)) (hardest-weighted) or max(1, 1/(4p(1-p)))
  (equal-treatment) for p < 1/2, 1 otherwise; p below 1e-6 is read as 0.5 / n0, as DARS does.
- `CeroAllocator` (CERO, a reconstruction from its abstract): stateful, myopic.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from sera import _checks
from sera.counts import even_split, from_counts
from sera.estimators import clipped_grpo_advantages, raft_advantages, rl2ml_advantages

KNAPSACK_ALPHA = 0.9
"""Knapsack RL's confidence level in its cost rule: cost = log(1 - alpha) / log(max(p, 1 - p))."""
PROGRAMME_LIMIT = 50_000_000
"""Above this many table entries (prompts x budget x extra rollouts) the knapsack programme's
optimum is taken by marginal gains instead, which reach the same summed value
(tests/test_baselines.py); benchmarks/allocation_speed.py times the rule on a large batch."""


def knapsack(p, budget: int, n_min: int, n_max: int, n0: float) -> np.ndarray:
    """Knapsack RL's counts, as its `sampling_budget_by_knapsack` gives them with its defaults
    (min_n = n_min, max_n = n_max, negative_n = positive_n = n_min, fallback on, probability
    costs with alpha 0.9), from success rates p.

    Every prompt starts at n_min. Without a prompt of 0 < p < 1, the rest goes evenly to the
    p = 0 prompts (all prompts get budget / B when there is none). Otherwise each such prompt q
    has the cost floor(min(n_max, log(0.1) / log(max(p_q, 1 - p_q)))), the rollouts its authors
    expect it to need; when the rest R exceeds the summed cost C, R - C goes evenly to the p = 0
    prompts (else to the p = 1 prompts) and C to the programme. The programme gives each prompt
    0 to n_max - n_min extra rollouts, maximising the sum of its values, where k >= 1 extra are
    worth U(p, n_min + k) p (1-p)^2 and no extra is worth 0 (the original's scoring, which pushes
    at least one extra to every prompt it can); ties keep fewer extra rollouts, as its update
    order does. Rates are float32, as in the original. Two deviations keep the bounds and the
    budget where the original would break them: a share that would pass n_max is capped and
    its overflow spread over the prompts with room, and a batch of prompts that all have
    0 < p < 1 gets the whole rest in the programme (the original divides by zero there).
    """
    p = np.asarray(p, dtype=float)
    counts = np.full(p.size, n_min, dtype=np.int64)
    rest = budget - int(counts.sum())
    items = np.flatnonzero((p > 0) & (p < 1))
    zeros = np.flatnonzero(p == 0)
    if rest <= 0:
        return counts
    if items.size == 0:
        if zeros.size:
            counts[zeros] += even_split(rest, zeros.size)
        else:
            counts = even_split(budget, p.size)
        return _capped(counts, n_max)
    rates = p[items].astype(np.float32)
    # p within 1e-16 of 0 or 1 makes the log 0 (the original raises there): its cost is infinite
    log_top = np.log(np.maximum(p[items], 1 - p[items]))
    cost = np.divide(np.log(1 - KNAPSACK_ALPHA), log_top, out=np.full(items.size, np.inf),
                     where=log_top < 0).astype(np.float32)
    expected = int(np.floor(np.minimum(float(n_max), cost)).sum())
    others = zeros if zeros.size else np.setdiff1d(np.arange(p.size), items)
    if expected < rest and others.size:
        counts[others] += even_split(rest - expected, others.size)
        rest = expected
    room = n_max - n_min
    if rates.size * min(rest, rates.size * room) * room <= PROGRAMME_LIMIT:
        extra, left = _knapsack_programme(rates, rest, n_min, room)
    else:
        extra, left = _knapsack_greedy(p[items], rest, n_min, room)
    counts[items] += extra
    if left:  # more than the programme can place: evenly over its prompts, as the original
        counts[items] += even_split(left, items.size)
    return _capped(counts, n_max)


def _knapsack_programme(rates: np.ndarray, budget: int, n_min: int, room: int):
    """(extra rollouts per prompt, budget left over) of Knapsack RL's programme: the prompts in
    order, each taking k = 0..room extra at value U(p, n_min + k) p (1-p)^2 (0 for k = 0), the
    largest total for every exact budget, the first of equal totals kept (fewer extra)."""
    usable = min(budget, rates.size * room)
    extra = np.zeros(rates.size, dtype=np.int64)
    if usable <= 0:
        return extra, budget
    k = np.arange(1, room + 1)
    n = (k + n_min).astype(np.float32)
    best = np.full(usable + 1, -np.inf)
    best[0] = 0.0
    choices = np.zeros((rates.size, usable + 1), dtype=np.int64)
    width = np.arange(usable + 1)
    for i, rate in enumerate(rates):
        one = np.float32(1)
        value = (one - rate ** n - (one - rate) ** n) * rate * ((one - rate) ** np.float32(2))
        options = np.full((room + 1, usable + 1), -np.inf)
        options[0] = best
        for j in range(1, min(room, usable) + 1):  # j extra: the best total of w - j before
            options[j, j:] = best[: usable + 1 - j] + np.float64(value[j - 1])
        choices[i] = np.argmax(options, axis=0)  # the first of equal totals: fewer extra
        best = options[choices[i], width]
    w = usable
    for i in range(rates.size - 1, -1, -1):
        extra[i] = choices[i, w]
        w -= extra[i]
    return extra, budget - usable


def _knapsack_greedy(p: np.ndarray, budget: int, n_min: int, room: int):
    """The programme's optimum by marginal gains, for batches too large for its table: with 0 for
    no extra rollouts the value of k extra is still concave in k (the first increment is
    V(n_min + 1) >= V(n_min + 2) - V(n_min + 1), V being concave and >= 0), so the largest
    increments give the same total; only ties between equal prompts may be broken differently."""
    usable = min(budget, p.size * room)
    m = np.arange(n_min, n_min + room + 1, dtype=float)  # n_min, n_min + 1, ..., n_max
    q = p[:, None]
    with np.errstate(under="ignore"):
        value = (-np.expm1(m * np.log1p(-q)) - np.exp(m * np.log(q))) * q * (1 - q) ** 2
    gains = np.diff(value, axis=1)
    gains[:, 0] = value[:, 1]  # no extra rollouts is worth 0, one extra its full value
    return largest_gains(gains, usable), budget - usable


def _capped(counts: np.ndarray, n_max: int) -> np.ndarray:
    """counts with every count above n_max cut to it and the overflow spread evenly over the
    prompts below it (in index order); unchanged where none passes n_max."""
    overflow = int(np.maximum(counts - n_max, 0).sum())
    if not overflow:
        return counts
    counts = np.minimum(counts, n_max)
    while overflow:
        room = np.flatnonzero(counts < n_max)
        share = np.minimum(even_split(overflow, room.size), n_max - counts[room])
        counts[room] += share
        overflow -= int(share.sum())
    return counts


def largest_gains(gains: np.ndarray, take: int) -> np.ndarray:
    """Rollouts per row when the `take` largest entries of a (prompts, increments) matrix of
    marginal gains are taken, each row's gains falling along it: greedy by marginal gain, exact
    for concave values. Ties: fewer rollouts first, then the lower index."""
    if take <= 0:
        return np.zeros(gains.shape[0], dtype=np.int64)
    flat = gains.reshape(-1)
    cut = np.partition(flat, flat.size - take)[flat.size - take]  # the take-th largest
    chosen = gains > cut
    missing = take - int(chosen.sum())
    if missing:
        rows, cols = np.nonzero(gains == cut)
        order = np.lexsort((rows, cols))[:missing]
        chosen[rows[order], cols[order]] = True
    return chosen.sum(axis=1)


class CeroAllocator:
    """CERO's allocation in its myopic per-step form (a reconstruction from the abstract of
    arXiv 2606.05606; the published method solves a Fenchel dual online).

    Each prompt's value is its posterior expected Bernoulli variance v = ab / ((a+b)(a+b+1))
    under Beta(a, b) from the history, and its utility of X cumulative rollouts is the concave,
    saturating psi(X) = 1 - exp(-X / scale) (our choice: the abstract does not give psi). A step
    maximises sum_q v_q [psi(X_q + N_q) - psi(X_q)] under the budget and the bounds, greedily by
    marginal gain (exact, psi being concave), then adds N_q to X_q.
    """

    def __init__(self, n_prompts: int, scale: float = 16.0):
        self.cumulative = np.zeros(n_prompts)
        self.scale = float(scale)

    def plan(self, ids, a, b, budget: int, lo: int, hi: int, n0: float):
        ids = np.asarray(ids)
        value = a * b / ((a + b) * (a + b + 1))
        m = np.arange(lo, hi, dtype=float)
        exponent = -(self.cumulative[ids, None] + m) / self.scale
        gains = value[:, None] * np.exp(exponent) * -np.expm1(-1.0 / self.scale)
        counts = lo + largest_gains(gains, budget - lo * ids.size)
        self.cumulative[ids] += counts
        return from_counts(a / (a + b), counts, n0, "cero")



def proportional(weights: np.ndarray, budget: int, lo: int, hi: int) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """Integer counts proportional to weights within [lo, hi] summing to the budget: the
    continuous clip(lam w, lo, hi) with lam solved exactly, then the floors and the largest
    remainders (ties: lower index). Prompts of weight 0 stay at lo unless the others are full.
    Returns (counts, continuous)."""
    weights = np.asarray(weights, dtype=float)
    continuous = _proportional_continuous(weights, budget, lo, hi)
    counts = np.clip(np.floor(continuous + 1e-9), lo, hi).astype(np.int64)
    short = budget - int(counts.sum())
    index = np.arange(counts.size)
    if short > 0:
        remainder = np.where(counts < hi, continuous - counts, -np.inf)
        counts[np.lexsort((index, -remainder))[:short]] += 1
    elif short < 0:
        remainder = np.where(counts > lo, continuous - counts, np.inf)
        counts[np.lexsort((index, remainder))[:-short]] -= 1
    return counts, continuous


def _proportional_continuous(weights, budget, lo, hi) -> np.ndarray:
    """clip(lam w, lo, hi) summing to the budget. The sum is piecewise linear in lam: the segment
    holding the budget is found among the sorted breakpoints lo/w and hi/w, then solved from a
    direct sum over its unclipped prompts."""
    positive = weights > 0
    if hi == lo or not positive.any() or positive.sum() * hi + (~positive).sum() * lo <= budget:
        # The weighted prompts are full (or there are none): the rest goes evenly to the others.
        continuous = np.where(positive, float(hi), float(lo))
        if (~positive).any():
            continuous[~positive] += (budget - continuous.sum()) / (~positive).sum()
        return continuous
    w = weights[positive]
    breaks = np.unique(np.concatenate((lo / w, hi / w)))

    def total(lam):
        return np.clip(lam * weights, lo, hi).sum()

    # The segment starts at the last breakpoint whose sum stays at or below the budget (the first
    # one, where every prompt is at lo, always does; the last one, where all are at hi, does not).
    start = _last_below(breaks, total, budget)
    middle = 0.5 * (breaks[start] + breaks[start + 1])
    at_lo, at_hi = weights * middle <= lo, weights * middle >= hi
    free = ~at_lo & ~at_hi
    fixed = lo * at_lo.sum() + hi * at_hi.sum()
    lam = (budget - fixed) / weights[free].sum() if free.any() else breaks[start]
    return np.clip(lam * weights, lo, hi)


def _last_below(breaks, total, budget) -> int:
    """The largest index j with total(breaks[j]) <= budget (-1 if none), by bisection."""
    left, right = -1, breaks.size - 1
    while left < right:
        mid = (left + right + 1) // 2
        if total(breaks[mid]) <= budget:
            left = mid
        else:
            right = mid - 1
    return left


def gvm_weights(p: np.ndarray) -> np.ndarray:
    """1 / sqrt(p + 0.001 / p), 0 at p = 0 (GVM-RAFT with every gradient norm taken as 1)."""
    with np.errstate(divide="ignore"):
        return np.where(p > 0, 1.0 / np.sqrt(p + 0.001 / np.where(p > 0, p, 1.0)), 0.0)


def dars_weights(p: np.ndarray, n0: float, schedule: str) -> np.ndarray:
    """What DARS's pilot-based rule gives each prompt in total, up to the factor n0: 1 for
    p >= 1/2, else 1/(2p) (hw) or 1/(4p(1-p)) (et); p <= 1e-6 is read as 0.5 / n0."""
    a = np.where(p <= 1e-6, 0.5 / n0, p)
    if schedule not in ("hw", "et"):
        raise ValueError(f"schedule must be 'hw' or 'et', got {schedule!r}")
    with np.errstate(divide="ignore"):  # a = 1 gives inf, replaced by 1 below
        extra = 1.0 / (2.0 * a) if schedule == "hw" else 1.0 / (4.0 * a * (1.0 - a))
    return np.where(a >= 0.5, 1.0, np.maximum(1.0, extra))


def gvm(p, budget: int, n_min: int, n_max: int, n0: float) -> np.ndarray:
    """GVM-RAFT's counts as its stage-2 script computes them, every gradient norm taken as 1:
    shares gvm_weights / their sum times the budget, rounded to the nearest integer, and the
    rounding error moved one rollout at a time to the prompts with the largest residuals (those
    rounded down most when rollouts are missing, up most when there are too many). GVM has no
    bounds: n_min and n_max are not used, and p = 0 gets 0. When every p is 0 (the original
    divides by zero) the budget is split evenly."""
    weights = gvm_weights(np.asarray(p, dtype=float))
    if weights.sum() == 0:
        return even_split(budget, weights.size)
    scaled = weights / weights.sum() * budget
    counts = np.round(scaled).astype(np.int64)
    error = budget - int(counts.sum())
    if error:
        residuals = scaled - counts
        counts[np.argsort(-residuals if error > 0 else residuals)[:abs(error)]] += np.sign(error)
    return counts


def dars(p, budget: int, n_min: int, n_max: int, n0: float, schedule: str) -> np.ndarray:
    """DARS's totals matched to the budget: proportional to dars_weights within the bounds."""
    weights = dars_weights(np.asarray(p, dtype=float), n0, schedule)
    return proportional(weights, budget, n_min, n_max)[0]


@dataclass(frozen=True)
class Rule:
    """A one-shot rule SERA is compared with, and what every table needs to know of it."""

    name: str
    counts: Callable
    """(p, budget, n_min, n_max, n0) -> integer counts."""
    colour: str
    """The colour of its methods in every figure (its `-maxrl` variant dashed)."""
    source: str
    """Its authors' paper and code, as docs/baselines.md cites them."""
    advantages: Callable
    """The advantages its authors train with (on the rule's counts, no multiplicity weights,
    last-epoch success rates)."""
    summary: str
    """One line on the authors' method, for sera.methods.METHODS."""
    maxrl_variant: bool = True
    """Whether `<name>-maxrl` (the same counts, MaxRL's advantages with n0 / N_q) is a method."""
    n_max_factor: int | None = None
    """The authors' cap on a prompt's rollouts, as a multiple of n0 (None: the config's)."""
    drop_uniform_groups: bool = False
    """Whether the authors' update leaves all-0 and all-1 groups out."""


_DARS = "arXiv:2508.13755; code: yangzhch6/DARS, ray_dars_trainer.py"
COMPARED: dict[str, Rule] = _checks.registry(((rule.name, rule) for rule in (
    Rule("knapsack", knapsack, "#8c564b",
         "arXiv:2509.25849; code: liziniu/KnapsackRL, verl/trainer/ppo/exploration_utils.py",
         clipped_grpo_advantages,
         "Knapsack RL: its allocator on last-epoch rates (cap 16 n0), GRPO (clipped at 5), "
         "no weights", n_max_factor=16),
    Rule("gvm", gvm, "#e377c2",
         "arXiv:2505.02391; code: RLHFlow/GVM, em/stage_2_calc_sample_size.py", raft_advantages,
         "GVM-RAFT: N ~ 1 / sqrt(p + 0.001 / p) on last-epoch rates, rejection sampling, "
         "no weights"),
    Rule("dars-hw", partial(dars, schedule="hw"), "#17becf", _DARS,
         partial(rl2ml_advantages, alpha=0.0),
         "DARS-HW matched to the budget from last-epoch rates, A = r - mean, all-0 and all-1 "
         "groups dropped, no weights", drop_uniform_groups=True),
    Rule("dars-et", partial(dars, schedule="et"), "#bcbd22", _DARS,
         partial(rl2ml_advantages, alpha=0.0),
         "DARS-ET matched to the budget from last-epoch rates, A = r - mean, all-0 and all-1 "
         "groups dropped, no weights", maxrl_variant=False, drop_uniform_groups=True),
)), "allocation rule")
"""The one-shot rules SERA is compared with, each registered once, by name."""

BASELINE_RULES = {name: rule.counts for name, rule in COMPARED.items()}
"""The one-shot rules SERA is compared with: name -> (p, budget, n_min, n_max, n0) -> counts."""


def __getattr__(name):
    # The table's older name, kept for code written against it.
    if name == "RULES":
        warnings.warn("sera.baselines.RULES is spelled sera.baselines.BASELINE_RULES "
                      "(sera.allocation.RULES lists every rule name)", DeprecationWarning,
                      stacklevel=2)
        return BASELINE_RULES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
