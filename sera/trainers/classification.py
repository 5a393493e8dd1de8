"""The exact-likelihood control study: classification trained by CE, MaxRL, SERA or GRPO.

    python -m sera.trainers.classification --method sera --n0 16 --steps 300 --seed 0 --out DIR

writes DIR/metrics.csv (step, method, seed, n0, metric, value), DIR/config.json and
DIR/checkpoint.pt, and resumes from the checkpoint when DIR already holds one. The defaults run
digits with a small CNN on the CPU; the paper's setting is --data imagefolder --data-path ROOT
--n0 128 --batch-size 256 --lr 0.1 --steps 100000 on a GPU. See
notebooks/04_gradient_cosine_study.ipynb.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sera.allocation import allocate
from sera.fidelity import kappa
from sera.history import SuccessHistory
from sera.passk import pass_at_k_analytic
from sera.tasks.classification import build_model, fetch, load_data
from sera.trainers import common, rollouts
from sera.trainers.checkpoint import load_checkpoint, save_checkpoint

METHODS = ("ce", "maxrl", "sera", "sera-history", "grpo")
PROFILE_K = tuple(2**i for i in range(8))  # 1, 2, 4, ..., 128


@dataclass(frozen=True)
class ClassificationConfig:
    """One run of the classification study."""

    method: str = "sera"
    """ce (exact likelihood), maxrl (uniform n0), sera (waterline on exact p), sera-history
    (waterline on historical estimates) or grpo (uniform n0)."""
    n0: int = 16
    """Rollouts per image under uniform allocation; the budget is batch_size * n0."""
    steps: int = 300
    """Optimizer steps."""
    seed: int = 0
    """Seed of the model initialisation, data order and label sampling."""
    out: str = "runs/classification"
    """Output folder for metrics.csv, config.json and checkpoint.pt."""
    data: str = "digits"
    """digits (bundled with scikit-learn), cifar or imagefolder."""
    data_path: str | None = None
    """Local folder for cifar (python format) or imagefolder (train/ and val/)."""
    model: str = "auto"
    """small-cnn, resnet50 or auto (resnet50 for imagefolder)."""
    batch_size: int = 64
    """Images (prompts) per step."""
    lr: float = 0.05
    """SGD learning rate."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 1e-4
    """SGD weight decay."""
    n_min: int = 2
    """Fewest rollouts SERA gives a retained image."""
    n_max: int | None = None
    """Most rollouts SERA gives an image; None means 8 * n0."""
    rounding: str = "paper"
    """Integerization of the waterline: paper or exact."""
    u_min: float | None = None
    """Observability safeguard threshold; None turns it off."""
    history_gamma: float = 0.9
    """Discount of the historical success counts per epoch (sera-history)."""
    eval_every: int = 25
    """Steps between validation measurements."""
    cosine_every: int = 5
    """Steps between gradient-cosine measurements (two extra backward passes)."""
    val_k: tuple[int, ...] = (1, 16, 128)
    """K values of validation Pass@K along training."""
    checkpoint_every: int = 100
    """Steps between checkpoints (one is always written at the end)."""
    device: str = "auto"
    """cpu, cuda or auto."""
    bf16: bool = True
    """bf16 autocast on CUDA (ignored on the CPU)."""
    workers: int = 0
    """DataLoader workers for folder datasets."""
    progress: bool = True
    """Show a progress bar."""
    dtype: str = field(default="float32")
    """Parameter dtype: float32, or float64 for exactness checks."""

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("n0", "steps", "batch_size", "eval_every", "cosine_every",
                     "checkpoint_every"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.rounding not in ("paper", "exact"):
            raise ValueError(f"rounding must be 'paper' or 'exact', got {self.rounding!r}")

    @property
    def budget(self) -> int:
        return self.batch_size * self.n0

    @property
    def upper(self) -> int:
        return self.n_max if self.n_max is not None else 8 * self.n0


def _device(config) -> torch.device:
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(config.device)


class _Run:
    """Everything a run carries from step to step; checkpointed as a whole."""

    def __init__(self, config: ClassificationConfig):
        self.config = config
        self.device = _device(config)
        self.data = load_data(config.data, config.data_path)
        torch.manual_seed(config.seed)
        model = build_model(config.model, self.data)
        self.model = model.to(self.device, getattr(torch, config.dtype))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr,
                                         momentum=config.momentum,
                                         weight_decay=config.weight_decay)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed + 1)
        self.history = SuccessHistory(len(self.data.train), gamma=config.history_gamma)
        self.step, self.epoch, self.position = 0, 0, 0
        self.rows: list[dict] = []

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "history": self.history.state_dict(),
                "step": self.step, "epoch": self.epoch, "position": self.position,
                "rows": self.rows, "config": dataclasses.asdict(self.config)}

    def load(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.history.load_state_dict(state["history"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.rows = list(state["rows"])

    def log(self, metric: str, value: float) -> None:
        self.rows.append({"step": self.step, "method": self.config.method,
                          "seed": self.config.seed, "n0": self.config.n0, "metric": metric,
                          "value": float(value)})


def _plan(run: _Run, ids, p_exact: np.ndarray):
    """Rollout counts, per-prompt weights, fallback flag and the success probabilities the
    allocation used (exact p, or the frozen historical estimates) for this batch."""
    config = run.config
    uniform = np.full(ids.size, config.n0)
    if config.method in ("maxrl", "grpo"):
        return uniform, np.ones(ids.size), False, p_exact
    kwargs = dict(n_min=config.n_min, n_max=config.upper, method=config.rounding,
                  u_min=config.u_min, n0=config.n0)
    if config.method == "sera":
        plan = allocate(p_exact, config.budget, **kwargs)
    else:
        plan = run.history.plan(ids, config.budget, **kwargs)
    return plan.counts, plan.weights, plan.fallback, plan.p


def _log_probs(run: _Run, images):
    autocast = run.device.type == "cuda" and run.config.bf16
    with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = run.model(images)
    return torch.log_softmax(logits.to(torch.float32 if autocast else logits.dtype), dim=-1)


def train_step(run: _Run) -> None:
    config, model = run.config, run.model
    ids = common.next_batch(run, len(run.data.train))
    images, targets = fetch(run.data.train, ids)
    images = images.to(run.device, next(model.parameters()).dtype)
    targets = targets.to(run.device)
    model.train()
    log_probs = _log_probs(run, images)
    exact_loss = -log_probs.gather(1, targets[:, None]).mean()  # the likelihood objective
    p_exact = log_probs.detach().gather(1, targets[:, None])[:, 0].exp().double().cpu().numpy()
    if config.method == "ce":
        loss, counts = exact_loss, np.zeros(ids.size, dtype=int)
    else:
        counts, weights, fallback, p_used = _plan(run, ids, p_exact)
        rows, labels = rollouts.sample_labels(log_probs.detach().exp(), counts, run.generator)
        rewards, values = rollouts.advantages(config.method, rows, labels, targets, counts)
        per_class = rollouts.class_weights(rows, labels, values, ids.size, run.data.n_classes)
        prompt_weights = torch.as_tensor(weights, device=run.device)
        loss = rollouts.collapsed_loss(log_probs, per_class, prompt_weights, config.budget)
        successes = np.bincount(rows.cpu().numpy(), weights=rewards.cpu().numpy(),
                                minlength=ids.size)
        kept = counts > 0
        run.log("train_reward", successes[kept].sum() / counts[kept].sum())
        run.log("mixed_groups", np.mean((successes[kept] > 0) & (successes[kept] < counts[kept])))
        run.log("allocation_spread", counts[kept].std() / config.n0)
        run.log("retained", kept.mean())
        if config.method == "sera-history":
            run.history.record(ids[rows.cpu().numpy()], rewards.cpu().numpy())
            run.log("history_fallback", float(fallback))
            if not fallback:  # every estimate of the batch was available
                run.log("history_mae", np.abs(p_used - p_exact).mean())
                run.log("history_pearson", np.corrcoef(p_used, p_exact)[0, 1])
    run.log("train_p", p_exact.mean())
    params = [p for p in model.parameters() if p.requires_grad]
    if run.step % config.cosine_every == 0:
        exact = torch.autograd.grad(exact_loss, params, retain_graph=True)
        sampled = torch.autograd.grad(loss, params, retain_graph=True)
        run.log("cosine", rollouts.flat_cosine(sampled, exact))
        if config.method in ("maxrl", "sera", "sera-history"):
            # The expected update: each image's likelihood gradient scaled by its kappa(p, N)
            # and its weight, with no sampling noise; it isolates the scaling distortion.
            scale = torch.as_tensor(kappa(p_exact, np.maximum(counts, 1)) * (counts > 0)
                                    * (weights * counts), device=run.device)
            expected = -(scale.to(log_probs.dtype) * log_probs.gather(1, targets[:, None])[:, 0])
            grads = torch.autograd.grad(expected.sum() / config.budget, params,
                                        retain_graph=True)
            run.log("expected_cosine", rollouts.flat_cosine(grads, exact))
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    run.optimizer.step()
    run.step += 1


@torch.no_grad()
def validation_success(run: _Run, batch_size: int = 512, dataset=None) -> np.ndarray:
    """Exact success probability of every image of dataset (default: validation), eval mode."""
    run.model.eval()
    dataset = run.data.val if dataset is None else dataset
    out = []
    for start in range(0, len(dataset), batch_size):
        images, targets = fetch(dataset, range(start, min(start + batch_size, len(dataset))))
        images = images.to(run.device, next(run.model.parameters()).dtype)
        log_probs = _log_probs(run, images)
        out.append(log_probs.gather(1, targets.to(run.device)[:, None])[:, 0].exp().double())
    return torch.cat(out).cpu().numpy()


def _evaluate(run: _Run, ks) -> np.ndarray:
    p = validation_success(run)
    for k in ks:
        run.log(f"val_pass@{k}", pass_at_k_analytic(p, k).mean())
    return p


def train(config: ClassificationConfig, callback=None) -> pd.DataFrame:
    """Run (or resume) one configuration; returns the tidy metrics table it also saves."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    run = _Run(config)
    state = load_checkpoint(out / "checkpoint.pt", dataclasses.asdict(config))
    if state is not None:
        run.load(state)
    (out / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
    bar = common.progress_bar(config.progress, config.steps, run.step,
                              f"{config.method} n0={config.n0}", leave=False)
    while run.step < config.steps:
        if run.step % config.eval_every == 0:
            _evaluate(run, config.val_k)
        train_step(run)
        if run.step % config.checkpoint_every == 0 and run.step < config.steps:
            save_checkpoint(out / "checkpoint.pt", run.state(), common.metrics_table(run.rows),
                            out)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(common.latest(run.rows, ("cosine", "val_pass@1")), refresh=False)
        if callback is not None:
            callback(run)
    if not any(r["metric"] == "pass@1" for r in run.rows):
        p = _evaluate(run, config.val_k)
        for k in PROFILE_K:
            run.log(f"pass@{k}", pass_at_k_analytic(p, k).mean())
    if bar is not None:
        bar.close()
    table = common.metrics_table(run.rows)
    save_checkpoint(out / "checkpoint.pt", run.state(), table, out)
    return table


def parse_args(argv=None) -> ClassificationConfig:
    """Command-line flags built from the config fields (and their docstrings)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_flags(parser, ClassificationConfig)
    return common.build(ClassificationConfig, vars(parser.parse_args(argv)))


def history_snapshot(out: str | Path) -> pd.DataFrame:
    """For a finished sera-history run: every training image's historical estimate beside its
    exact success probability under the final model (one row per image, available or not)."""
    out = Path(out)
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    config = ClassificationConfig(**{**state["config"], "val_k": tuple(state["config"]["val_k"]),
                                     "progress": False, "device": "cpu"})
    run = _Run(config)
    run.load(state)
    p_hat, available = run.history.estimate()
    p_exact = validation_success(run, dataset=run.data.train)
    return pd.DataFrame({"prompt": np.arange(len(p_hat)), "p_hat": p_hat, "p_exact": p_exact,
                         "available": available})


def run_grid(base: ClassificationConfig, methods, budgets, seeds, runs_dir: str | Path,
             progress: bool = True) -> pd.DataFrame:
    """Every method x budget x seed of the study (CE once per seed: it samples nothing), each in
    its own folder under runs_dir; finished runs are read back from their checkpoints."""
    jobs = [(m, n0, s) for s in seeds for m in methods for n0 in budgets
            if m != "ce" or n0 == budgets[0]]
    tables = []
    bar = common.progress_bar(progress, len(jobs), desc="runs")
    for method, n0, seed in jobs:
        folder = Path(runs_dir) / f"{method}_n0-{n0}_seed-{seed}"
        config = dataclasses.replace(base, method=method, n0=n0, seed=seed, out=str(folder),
                                     progress=False)
        tables.append(train(config))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return pd.concat(tables, ignore_index=True)


def main(argv=None) -> int:
    config = parse_args(argv)
    table = train(config)
    final = table[table["metric"].isin(["pass@1", "pass@128"])]
    cosine = table.loc[table["metric"] == "cosine", "value"]
    print(f"{config.method} n0={config.n0} seed={config.seed}: mean cosine "
          f"{cosine.mean():.4f}; " + ", ".join(f"{m} {v:.4f}" for m, v in
                                               zip(final["metric"], final["value"], strict=True)))
    print(f"metrics: {Path(config.out) / 'metrics.csv'}")
    return 0 if math.isfinite(cosine.mean()) else 1


if __name__ == "__main__":
    sys.exit(main())
