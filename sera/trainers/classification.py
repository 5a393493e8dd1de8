"""The exact-likelihood control study: classification as one-step RL, where p is known exactly.

    python -m sera.trainers.classification --method sera --n0 16 --steps 300 --seed 0 --out DIR

A rollout is a label drawn from the model's softmax, rewarded 1 when it is the true class; the
exact likelihood gradient (cross-entropy, method `ce`) is the reference every sampled update is
compared with. Writes DIR/metrics.csv, DIR/final.csv (each validation image's final p),
DIR/allocations.csv, DIR/config.json and DIR/checkpoint.pt, and resumes from the checkpoint.
`--preset paper` is the paper's ImageNet setting (add --data-path; a GPU); see
notebooks/04_gradient_cosine_study.ipynb.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch

from sera import models, runstore
from sera.fidelity import kappa
from sera.methods import METHODS, supported
from sera.passk import k_grid, pass_at_k_analytic
from sera.tasks.classification import fetch, hold_out, load_data
from sera.trainers import checkpoint, cli, grid, label_rollouts, loop, steps
from sera.trainers.config import AllocatorConfig, RunConfig, as_dict, from_dict
from sera.trainers.presets import register_task

__all__ = ["AllocatorConfig", "ClassificationConfig", "ClassificationStudy", "PRESETS", "build",
           "history_snapshot", "main", "run_grid", "supported", "train"]

ClassificationMethod = Literal[supported(exact=True)]
PROFILE_K = k_grid(128)  # the exact profile is analytic: any K costs the same


@dataclass(frozen=True)
class ClassificationConfig(RunConfig):
    """One run of the exact-likelihood study."""

    method: ClassificationMethod = "sera"
    """ce (the exact likelihood), maxrl, grpo, rloo, sera (waterline on historical estimates),
    sera-oracle (waterline on the exact p), or a rule SERA is compared with (see
    sera.methods)."""
    data: Literal["digits", "cifar", "imagefolder"] = "digits"
    """digits (bundled with scikit-learn), cifar (a local python-format folder) or imagefolder
    (train/<class>/ and val/<class>/, e.g. ImageNet)."""
    data_path: str | None = None
    """Local folder for cifar and imagefolder."""
    model: Literal["auto", "small-cnn", "resnet50"] = "auto"
    """small-cnn, resnet50 or auto (resnet50 for imagefolder, small-cnn otherwise)."""
    lr: float = 0.05
    """SGD learning rate."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 1e-4
    """SGD weight decay."""
    cosine_every: int = 5
    """Steps between gradient-cosine measurements (two extra backward passes)."""
    tune_fraction: float = 0.0
    """Share of the training images held out as a tuning split (never trained on, apart from
    the validation images) whose final Pass@K (metric tune_pass) chooses a learning rate in
    sera.studies.tuning; 0: none."""
    val_k: tuple[int, ...] = (1, 16, 128)
    """K values of validation Pass@K along training."""
    device: str = "auto"
    """cpu, cuda or auto."""
    bf16: bool = True
    """bf16 autocast on CUDA (ignored on the CPU)."""
    dtype: Literal["float32", "float64"] = "float32"
    """Parameter dtype: float32, or float64 for exactness checks."""

    def __post_init__(self):
        super().__post_init__()
        if self.method not in supported(exact=True):
            raise ValueError(f"method must be one of {supported(exact=True)}, got "
                             f"{self.method!r}")
        if self.cosine_every < 1:
            raise ValueError(f"cosine_every must be >= 1, got {self.cosine_every}")
        if not 0 <= self.tune_fraction < 1:
            raise ValueError(f"tune_fraction must be in [0, 1), got {self.tune_fraction}")


PRESETS = register_task("digits", {
    "fast": ClassificationConfig(),
    "long": ClassificationConfig(steps=3000, eval_every=100, cosine_every=10,
                                 checkpoint_every=500),
    "paper": ClassificationConfig(data="imagefolder", model="resnet50", n0=128, batch_size=256,
                                  lr=0.1, steps=100_000, eval_every=2000, cosine_every=200,
                                  checkpoint_every=2000,
                                  allocator=AllocatorConfig(n_max_factor=8)),
}, trainer=__name__)


class ClassificationStudy:
    """The model, its optimizer and the label sampler; the loop (sera.trainers.loop) does the
    rest."""

    def __init__(self, config: ClassificationConfig):
        self.config = config
        self.method = METHODS[config.method]
        self.device = models.device(config.device)
        self.data = load_data(config.data, config.data_path)
        self.tune = None
        if config.tune_fraction:
            self.data, self.tune = hold_out(self.data, config.tune_fraction)
        self.n_prompts = len(self.data.train)
        torch.manual_seed(config.seed)
        name = config.model if config.model != "auto" else (
            "resnet50" if config.data == "imagefolder" else "small-cnn")
        model = models.classifier(name, self.data.n_classes, self.data.in_channels)
        self.model = model.to(self.device, getattr(torch, config.dtype))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr,
                                         momentum=config.momentum,
                                         weight_decay=config.weight_decay)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed + 1)
        self.data_targets = _targets(self.data.train)
        self._probs: dict = {}  # this step's softmax per image
        self._pool: dict = {}  # this step's sampled labels per image

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])

    def _log_probs(self, images):
        autocast = self.device.type == "cuda" and self.config.bf16
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = self.model(images)
        return torch.log_softmax(logits.to(torch.float32 if autocast else logits.dtype), dim=-1)

    def _batch(self, dataset, ids):
        images, targets = fetch(dataset, ids)
        dtype = next(self.model.parameters()).dtype
        return images.to(self.device, dtype), targets.to(self.device)

    @torch.no_grad()
    def exact_p(self, ids: np.ndarray) -> np.ndarray:
        """Each image's exact success probability under the current (training-mode) model; the
        probabilities are kept for sampling in this step."""
        missing = [q for q in ids.tolist() if q not in self._probs]
        if missing:
            images, _ = self._batch(self.data.train, missing)
            self.model.train()
            probs = self._log_probs(images).exp()
            self._probs.update(zip(missing, probs, strict=True))
        targets = self.data_targets[ids]
        return np.array([float(self._probs[q][t]) for q, t in zip(ids.tolist(), targets,
                                                                 strict=True)])

    def sample(self, run: loop.Run, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """counts[i] labels for image ids[i] from its softmax; kept for the update."""
        if ids.size == 0:
            return np.zeros(0)
        self.exact_p(ids)  # the probabilities, if this step has not computed them yet
        probs = torch.stack([self._probs[q] for q in ids.tolist()])
        rows, labels = label_rollouts.sample_labels(probs, counts, self.generator)
        targets = torch.as_tensor(self.data_targets[ids], device=self.device)
        rewards = (labels == targets[rows]).double()
        for q, chosen in zip(ids.tolist(), torch.split(labels, np.asarray(counts).tolist()),
                             strict=True):
            self._pool.setdefault(q, []).append(chosen)
        return np.bincount(rows.cpu().numpy(), weights=rewards.cpu().numpy(),
                           minlength=ids.size)

    def update(self, run: loop.Run, outcome) -> None:
        ids, allocation = outcome.ids, outcome.allocation
        pool, self._pool, self._probs = self._pool, {}, {}
        if ids.size == 0:
            return
        images, targets = self._batch(self.data.train, ids)
        self.model.train()
        log_probs = self._log_probs(images)
        chosen = log_probs.gather(1, targets[:, None])[:, 0]
        exact_loss = -chosen.mean()  # the likelihood objective
        p_exact = chosen.detach().exp().double().cpu().numpy()
        if allocation is None:
            loss = exact_loss
        else:
            labels = [torch.cat(pool[q]) for q in ids.tolist()]
            counts = np.array([x.numel() for x in labels])
            rows = torch.repeat_interleave(torch.arange(ids.size, device=self.device),
                                           torch.as_tensor(counts, device=self.device))
            labels = torch.cat(labels)
            scorer = functools.partial(steps.advantages, self.method, n0=allocation.n0)
            _, values = label_rollouts.advantages(scorer, rows, labels, targets, counts)
            per_class = label_rollouts.class_weights(rows, labels, values, ids.size,
                                               self.data.n_classes)
            weights = torch.as_tensor(allocation.weights, device=self.device)
            loss = label_rollouts.collapsed_loss(log_probs, per_class, weights, int(counts.sum()))
        run.log("train_p", p_exact.mean())
        if run.step % self.config.cosine_every == 0:
            self._cosines(run, loss, exact_loss, chosen, p_exact, allocation)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        scale = steps.step_scale(self.method, outcome)
        with steps.scaled_lr(self.optimizer, scale):
            self.optimizer.step()
        if scale is not None:
            run.log("step_scale", scale)

    def _cosines(self, run, loss, exact_loss, chosen, p_exact, allocation) -> None:
        """Cosine of the sampled update to the exact gradient and, for MaxRL-type advantages,
        of the expected update sum_q w_q N_q kappa(p_q, N_q) grad log p_q (no sampling noise: the
        scaling distortion alone)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        exact = torch.autograd.grad(exact_loss, params, retain_graph=True)
        sampled = torch.autograd.grad(loss, params, retain_graph=True)
        run.log("cosine", label_rollouts.flat_cosine(sampled, exact))
        if allocation is not None and self.method.maxrl:
            counts = allocation.counts
            scale = kappa(p_exact, np.maximum(counts, 1)) * (counts > 0) * \
                allocation.weights * counts
            expected = -(torch.as_tensor(scale, device=chosen.device).to(chosen.dtype) * chosen)
            grads = torch.autograd.grad(expected.sum() / counts.sum(), params, retain_graph=True)
            run.log("expected_cosine", label_rollouts.flat_cosine(grads, exact))

    @torch.no_grad()
    def success(self, dataset=None, batch_size: int = 512) -> np.ndarray:
        """Exact success probability of every image of dataset (default: validation), eval
        mode."""
        self.model.eval()
        dataset = self.data.val if dataset is None else dataset
        out = []
        for start in range(0, len(dataset), batch_size):
            images, targets = self._batch(dataset, range(start, min(start + batch_size,
                                                                    len(dataset))))
            out.append(self._log_probs(images).gather(1, targets[:, None])[:, 0].exp().double())
        return torch.cat(out).cpu().numpy()

    def evaluate(self, run: loop.Run) -> None:
        p = self.success()
        for k in self.config.val_k:
            run.log("val_pass", pass_at_k_analytic(p, k).mean(), k)

    def finish(self, run: loop.Run) -> pd.DataFrame:
        """The final Pass@K profile (analytic) and every validation image's final p."""
        p = self.success()
        for k in PROFILE_K:
            run.log("pass", pass_at_k_analytic(p, k).mean(), k)
        if self.tune is not None:
            tune = self.success(self.tune)
            for k in self.config.val_k:
                run.log("tune_pass", pass_at_k_analytic(tune, k).mean(), k)
        return pd.DataFrame({"prompt": np.arange(p.size), "p": p})


def _targets(dataset) -> np.ndarray:
    """Every item's label, without loading the images where the dataset keeps them apart."""
    if isinstance(dataset, torch.utils.data.Subset):
        return _targets(dataset.dataset)[np.asarray(dataset.indices)]
    if hasattr(dataset, "tensors"):
        return dataset.tensors[1].numpy()
    if hasattr(dataset, "targets"):
        return np.asarray(dataset.targets)
    return np.array([int(dataset[i][1]) for i in range(len(dataset))])


def build(config: ClassificationConfig) -> ClassificationStudy:
    """A run's study from its configuration: the task's builder (sera.trainers.presets.TASKS)."""
    return ClassificationStudy(config)


def train(config: ClassificationConfig, callback=None) -> loop.Results:
    """Run, resume or read back one configuration."""
    return loop.fit(ClassificationStudy(config), callback)


def run_grid(base: ClassificationConfig, methods, budgets, seeds, runs_dir, *,
             rerun: bool = False, progress: bool = True, shared=None) -> loop.Results:
    """Every method x budget x seed (ce once per seed: it samples nothing), through the
    package's one grid runner, sera.trainers.grid.run_grid, whose keywords these are (rerun;
    progress; shared: the index of finished runs that other grids may read back)."""
    configs = [dataclasses.replace(base, method=m, n0=n0, seed=s)
               for s in seeds for m in methods for n0 in budgets
               if m != "ce" or n0 == budgets[0]]
    return grid.run_grid(configs, ClassificationStudy, runs_dir=runs_dir, rerun=rerun,
                         progress=progress, shared=shared)


def estimator_study(base: ClassificationConfig, settings: dict, seeds, runs_dir,
                    rerun: bool = False, progress: bool = True) -> pd.DataFrame:
    """sera runs that differ only in their history estimator (`settings`: name ->
    AllocatorConfig). One row per run: how the estimates agreed with the exact p, averaged over
    every measured step (history_mae, history_pearson), beside the ideal history-only estimate
    (the exact p at each prompt's previous visit: ideal_mae, ideal_pearson)."""
    from sera.results import summarize_runs

    parts = []
    for name, allocator in settings.items():
        config = dataclasses.replace(base, method="sera", allocator=allocator)
        results = run_grid(config, ["sera"], [base.n0], seeds, Path(runs_dir) / name,
                           rerun=rerun, progress=progress)
        rule = allocator.for_method(METHODS["sera"]).history_rule
        parts.append(summarize_runs(results.metrics).assign(
            estimator=name, rule=rule, gamma=allocator.history_gamma,
            weight=allocator.history_weight if rule == "rate" else np.nan))
    return pd.concat(parts, ignore_index=True)


def history_snapshot(out) -> pd.DataFrame:
    """For a finished run: every training image's historical estimate beside its exact success
    probability under the final model (one row per image, available or not)."""
    config = from_dict(ClassificationConfig, json.loads((Path(out) / runstore.CONFIG).read_text()))
    study = ClassificationStudy(dataclasses.replace(config, device="cpu"))
    run = loop.Run(study)
    run.load_state_dict(checkpoint.load(Path(out) / runstore.CHECKPOINT, as_dict(config)))
    p_hat, available = run.history.estimate()
    p_exact = study.success(study.data.train)
    return pd.DataFrame({"prompt": np.arange(p_hat.size), "p_hat": p_hat, "p_exact": p_exact,
                         "available": available})


def main(argv=None) -> int:
    config = cli.parse(ClassificationConfig, PRESETS, argv, __doc__)
    results = train(config)
    table = results.metrics
    final = table[(table["metric"] == "pass") & table["k"].isin([1, 128])]
    cosine = table.loc[table["metric"] == "cosine", "value"]
    print(f"{config.method} n0={config.n0} seed={config.seed}: mean cosine {cosine.mean():.4f}; "
          + ", ".join(f"pass@{k} {v:.4f}" for k, v in zip(final["k"], final["value"],
                                                           strict=True)))
    print(f"metrics: {Path(config.out) / runstore.table_file('metrics')}")
    return 0 if math.isfinite(cosine.mean()) else 1


if __name__ == "__main__":
    sys.exit(main())
