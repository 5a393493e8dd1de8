"""Historical success estimates: discounted evidence with a Beta prior, frozen within an epoch.

Used by the trainers to feed the allocator without pilot sampling; the batch falls back to uniform
counts when any of its prompts has no estimate yet. The choice of update rule and discount is
measured in notebooks/04_gradient_cosine_study.ipynb.
"""

from __future__ import annotations

import warnings

import numpy as np

from sera import _checks
from sera.timing import timed

HISTORY_RULES = ("rate", "counts")
"""How an epoch's outcomes enter the estimate (SuccessHistory's rule, AllocatorConfig's
history_rule)."""


def __getattr__(name):
    # The older name of HISTORY_RULES (a rule alone is an allocation rule, sera.allocation.RULES).
    if name == "RULES":
        warnings.warn("sera.history.RULES is spelled sera.history.HISTORY_RULES",
                      DeprecationWarning, stacklevel=2)
        return HISTORY_RULES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SuccessHistory:
    """Per-prompt discounted success/failure evidence s, f with estimate
    p_hat = (s + alpha) / (s + f + alpha + beta).

    Outcomes recorded during an epoch wait in a pending buffer and are folded in by end_epoch(),
    so estimates stay frozen within an epoch. Two update rules:

    - "counts" (the default, the paper's appendix C.1): s <- gamma s + successes,
      f <- gamma f + failures.
    - "rate" (the package's variant, `sera-rate`): each epoch's success rate enters with a fixed
      weight,
      s <- gamma s + weight * rate, f <- gamma f + weight * (1 - rate). How many rollouts a prompt
      got does not change how much its epoch counts, so a prompt that SERA gives 2 rollouts an
      epoch is not dominated by old epochs in which it got many; but an epoch of 2 rollouts
      moves the estimate as much as one of 16, and an always-failing prompt rests at
      alpha / (alpha + beta + weight / (1 - gamma)) (1/34 at the defaults).

    Notebook 04's estimator study measures the choice of gamma and weight (the defaults 0.5
    and 16). Every per-prompt array is indexed by prompt id, (n_prompts,); a query for B
    prompt ids returns (B,) arrays. A prompt becomes available once at least one of its
    outcomes has been folded in; the prior alone does not make it available.
    """

    def __init__(self, n_prompts: int, gamma: float = 0.5, alpha: float = 1.0, beta: float = 1.0,
                 rule: str = "counts", weight: float = 16.0):
        self.n_prompts = _checks.integer(n_prompts, "n_prompts", minimum=1)
        self.gamma = _checks.real(gamma, "gamma", 0.0, 1.0)
        self.alpha = _checks.real(alpha, "alpha", 0.0, np.inf, low_open=True)
        self.beta = _checks.real(beta, "beta", 0.0, np.inf, low_open=True)
        if rule not in HISTORY_RULES:
            raise ValueError(f"rule must be one of {HISTORY_RULES}, got {rule!r}")
        self.rule = rule
        self.weight = _checks.real(weight, "weight", 0.0, np.inf, low_open=True)
        self.successes = np.zeros(self.n_prompts)
        self.failures = np.zeros(self.n_prompts)
        self.observed = np.zeros(self.n_prompts, dtype=bool)
        self._pending_s = np.zeros(self.n_prompts)
        self._pending_f = np.zeros(self.n_prompts)
        self.last_rate = np.full(self.n_prompts, np.nan)  # raw rate of each prompt's last epoch
        self.epoch = 0

    def _ids(self, prompt_ids, name="prompt_ids") -> np.ndarray:
        ids = np.asarray(prompt_ids)
        if ids.ndim != 1 or not (ids.dtype.kind in "iu" or ids.size == 0):  # integer dtypes
            raise ValueError(f"{name} must be a 1-D array of integer prompt indices, got "
                             f"{_checks.describe_safe(prompt_ids)}")
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_prompts):
            raise ValueError(f"{name} must lie in [0, {self.n_prompts - 1}], got values from "
                             f"{ids.min()} to {ids.max()}")
        return ids

    @timed
    def record(self, prompt_ids, rewards) -> None:
        """Queue one outcome per response for the next epoch boundary: prompt_ids (R,) and
        rewards (R,) in [0, 1], one entry per response (any order; repeats add up)."""
        ids = self._ids(prompt_ids)
        rewards = _checks.probabilities(rewards, "rewards")
        rewards = np.asarray(rewards, dtype=float).reshape(-1)
        if rewards.size != ids.size:
            raise ValueError(f"prompt_ids and rewards must have the same length; got {ids.size} "
                             f"and {rewards.size}")
        np.add.at(self._pending_s, ids, rewards)
        np.add.at(self._pending_f, ids, 1.0 - rewards)

    @timed
    def record_groups(self, prompt_ids, successes, trials) -> None:
        """Queue whole groups: prompt_ids, successes and trials all (B,), `successes` out of
        `trials` rollouts per prompt (trials 0: none)."""
        ids = self._ids(prompt_ids)
        successes = np.asarray(successes, dtype=float).reshape(-1)
        trials = np.asarray(trials, dtype=float).reshape(-1)
        if not successes.size == trials.size == ids.size:
            raise ValueError(f"prompt_ids, successes and trials must have the same length; got "
                             f"{ids.size}, {successes.size} and {trials.size}")
        if (successes < 0).any() or (successes > trials).any():
            raise ValueError("successes must lie in [0, trials] for every prompt")
        np.add.at(self._pending_s, ids, successes)
        np.add.at(self._pending_f, ids, trials - successes)

    @timed
    def end_epoch(self) -> None:
        """Fold the pending outcomes in, discounting what was known before."""
        trials = self._pending_s + self._pending_f
        seen = trials > 0
        if self.rule == "counts":
            new_s, new_f = self._pending_s, self._pending_f
        else:
            rate = np.divide(self._pending_s, trials, out=np.zeros(self.n_prompts), where=seen)
            new_s = np.where(seen, self.weight * rate, 0.0)
            new_f = np.where(seen, self.weight * (1.0 - rate), 0.0)
        self.successes = self.gamma * self.successes + new_s
        self.failures = self.gamma * self.failures + new_f
        self.observed |= seen
        self.last_rate[seen] = self._pending_s[seen] / trials[seen]
        self._pending_s[:] = 0.0
        self._pending_f[:] = 0.0
        self.epoch += 1

    @timed
    def estimate(self, prompt_ids=None):
        """(p_hat, available), both (B,), for the B given prompt ids (all prompts when None)."""
        ids = np.arange(self.n_prompts) if prompt_ids is None else self._ids(prompt_ids)
        s, f = self.successes[ids], self.failures[ids]
        p_hat = (s + self.alpha) / (s + f + self.alpha + self.beta)
        return p_hat, self.observed[ids].copy()

    @timed
    def posterior(self, prompt_ids=None):
        """(a, b), both (B,): each given prompt's Beta posterior, a = s + alpha,
        b = f + beta (all prompts when None)."""
        ids = np.arange(self.n_prompts) if prompt_ids is None else self._ids(prompt_ids)
        return self.successes[ids] + self.alpha, self.failures[ids] + self.beta

    @timed
    def last_rates(self, prompt_ids=None):
        """(rate, available), both (B,): each prompt's raw success rate in the last epoch it was
        seen (its successes over its rollouts, 0 and 1 included), the estimate Knapsack RL, GVM
        and DARS plan from; available once an epoch with the prompt has been folded in."""
        ids = np.arange(self.n_prompts) if prompt_ids is None else self._ids(prompt_ids)
        rate = self.last_rate[ids]
        available = ~np.isnan(rate)
        return np.where(available, rate, 0.5), available

    def state_dict(self) -> dict:
        """Everything needed to resume; arrays are copied."""
        return {"gamma": self.gamma, "alpha": self.alpha, "beta": self.beta, "rule": self.rule,
                "weight": self.weight, "epoch": self.epoch,
                "successes": self.successes.copy(), "failures": self.failures.copy(),
                "observed": self.observed.copy(), "pending_s": self._pending_s.copy(),
                "pending_f": self._pending_f.copy(), "last_rate": self.last_rate.copy()}

    def load_state_dict(self, state: dict) -> None:
        """Resume from state_dict()'s output (or its JSON form), checked value by value: the
        settings as __init__ checks them, every per-prompt array of one length, the counts
        finite and non-negative, the last rates NaN or in [0, 1], the epoch an integer >= 0.
        A ValueError names the field (and, for an array, the first bad prompt); nothing is
        changed unless the whole state passes."""
        missing = [k for k in ("gamma", "alpha", "beta", "epoch", "successes", "failures",
                               "observed", "pending_s", "pending_f") if k not in state]
        if missing:
            raise ValueError(f"the history lacks {', '.join(missing)}")
        try:
            settings = SuccessHistory(1, gamma=state["gamma"], alpha=state["alpha"],
                                      beta=state["beta"], rule=state.get("rule", "counts"),
                                      weight=state.get("weight", 1.0))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"the history's settings: {exc}") from exc
        epoch = state["epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"the history's epoch must be an integer >= 0, got {epoch!r}")
        counts = {name: _saved_array(state, name) for name in
                  ("successes", "failures", "pending_s", "pending_f")}
        size = counts["successes"].size
        for name, values in counts.items():
            _check_length(name, values, size)
            bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
            if bad.size:
                raise ValueError(f"the history's {name} must be finite and >= 0 (discounted "
                                 f"counts); prompt {bad[0]} has {float(values[bad[0]])!r}")
        observed = np.asarray(state["observed"])
        if observed.ndim != 1 or not (observed.dtype == bool or observed.size == 0):
            raise ValueError(f"the history's observed must be a list of true/false, one per "
                             f"prompt; got {_checks.describe_safe(state['observed'])}")
        _check_length("observed", observed, size)
        last_rate = _saved_array(state, "last_rate") if "last_rate" in state \
            else np.full(size, np.nan)
        _check_length("last_rate", last_rate, size)
        bad = np.flatnonzero(~np.isnan(last_rate) & ~((last_rate >= 0) & (last_rate <= 1)))
        if bad.size:
            raise ValueError(f"the history's last_rate must be NaN or lie in [0, 1]; prompt "
                             f"{bad[0]} has {float(last_rate[bad[0]])!r}")
        self.gamma, self.alpha, self.beta = settings.gamma, settings.alpha, settings.beta
        self.rule, self.weight = settings.rule, settings.weight
        self.epoch = int(epoch)
        self.successes, self.failures = counts["successes"], counts["failures"]
        self._pending_s, self._pending_f = counts["pending_s"], counts["pending_f"]
        self.observed = observed.astype(bool)
        self.n_prompts = size
        self.last_rate = last_rate


def _saved_array(state: dict, name: str) -> np.ndarray:
    """state[name] as a 1-D float array (None, as JSON writes NaN's absence, reads as NaN), or a
    ValueError naming the field."""
    value = state[name]
    try:
        values = np.array([np.nan if v is None else v for v in value], dtype=float) \
            if isinstance(value, list) else np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the history's {name} must be a list of numbers, one per prompt; got "
                         f"{_checks.describe_safe(value)}") from exc
    if values.ndim != 1:
        raise ValueError(f"the history's {name} must be a flat list, one number per prompt; got "
                         f"shape {values.shape}")
    return values


def _check_length(name: str, values: np.ndarray, size: int) -> None:
    if values.size != size:
        raise ValueError(f"the history's {name} has {values.size} entries and its successes "
                         f"{size}: every per-prompt array holds one entry per prompt")
