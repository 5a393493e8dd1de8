"""RL for language-model policies with verifiable rewards, shared by every sequence task.

A step (inside sera.trainers.loop): allocate the batch's budget through the method table, sample
N_q responses per prompt through a rollout engine, score them, and take one optimizer step on
advantages x weights x log-probs, aggregated by token-mean or seqnorm. The log-probs are those of
the sampling distribution (logits / temperature), so training stays on-policy at any temperature.
A task supplies token-id prompts, a reward, its stop and pad tokens, and reference answers for the
supervised warm-up. See notebooks/05_maze_navigation.ipynb.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import torch

from sera import runstore
from sera.methods import METHODS
from sera.passk import k_grid, pass_at_k
from sera.trainers import grid, loop, steps
from sera.trainers.checkpoint import fingerprint
from sera.trainers.engines import Engine, Sampling, TransformersEngine
from sera.trainers.presets import SequenceConfig, warmup_fingerprint, warmup_folder, warmup_settings
from sera.trainers.token_loss import sequence_loss

UPDATE_NORM_MAX_BYTES = 2**30
"""The largest model (bytes of parameters) whose update norm a sequence study logs: measuring it
copies the parameters once a step."""


class Task(Protocol):
    """A sequence task: prompts as token ids, a verifier, and reference answers."""

    train_prompts: list[list[int]]
    val_prompts: list[list[int]]
    stop_token_id: int
    pad_token_id: int
    tokenizer: object

    def reward(self, split: str, index: int, response: list[int]) -> float: ...

    def answers(self, indices) -> list[list[int]]: ...


class SequenceStudy:
    """A policy, its optimizer and a rollout engine on one task; the loop does the rest."""

    def __init__(self, config: SequenceConfig, task: Task, model, engine: Engine | None = None):
        self.config, self.task, self.model = config, task, model
        self.method = METHODS[config.method]
        self.n_prompts = len(task.train_prompts)
        self.engine = engine or TransformersEngine(model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
        common = dict(max_new_tokens=config.max_new_tokens, stop_token_id=task.stop_token_id,
                      pad_token_id=task.pad_token_id)
        self.training = Sampling(temperature=config.temperature, **common)
        self.evaluation = Sampling(temperature=config.eval_temperature,
                                   top_p=config.eval_top_p, **common)
        self._pool: dict = {}  # this step's (response, reward) pairs per prompt
        self._calls = 0  # sampling calls in this step (each gets its own seed)

    def provenance(self) -> dict:
        """What the loop records beside the library versions: the warm-up's fingerprint."""
        return {runstore.WARMUP_FINGERPRINT: warmup_fingerprint(self.config)}

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.engine.sync(self.model)

    def _sample(self, prompts, counts, sampling, stream: int, step: int, call: int = 0):
        key = [self.config.seed, stream, step] + ([call] if call else [])
        seed = int(np.random.default_rng(key).integers(2**31))
        return self.engine.generate(prompts, counts, sampling, seed)

    def exact_p(self, ids: np.ndarray) -> None:
        """A sequence task does not know its success probabilities."""
        return None

    def sample(self, run: loop.Run, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """counts[i] responses to prompt ids[i], scored and kept for the update."""
        if ids.size == 0:
            return np.zeros(0)
        task = self.task
        prompts = [task.train_prompts[i] for i in ids]
        call = self._calls
        self._calls += 1
        responses = self._sample(prompts, counts, self.training, stream=0, step=run.step,
                                 call=call)
        owner = np.repeat(np.arange(ids.size), counts)
        rewards = np.array([task.reward("train", int(ids[o]), r)
                            for o, r in zip(owner, responses, strict=True)])
        for o, response, reward in zip(owner, responses, rewards, strict=True):
            self._pool.setdefault(int(ids[o]), []).append((response, float(reward)))
        return np.bincount(owner, weights=rewards, minlength=ids.size)

    def update(self, run: loop.Run, outcome) -> None:
        config, task = self.config, self.task
        ids, allocation = outcome.ids, outcome.allocation
        pool, self._pool, self._calls = self._pool, {}, 0
        if ids.size == 0:
            return
        # The observability safeguard may give a prompt no rollouts: it has no pool entry.
        groups = [pool.get(q, []) for q in ids.tolist()]
        counts = np.array([len(g) for g in groups])
        if not counts.any():
            return
        owner = np.repeat(np.arange(ids.size), counts)
        responses = [r for g in groups for r, _ in g]
        rewards = np.array([reward for g in groups for _, reward in g])
        advantages = steps.advantages(self.method, rewards, counts[counts > 0], allocation.n0)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        _, entropy = sequence_loss(self.model, [task.train_prompts[ids[o]] for o in owner],
                                   responses, advantages, allocation.weights[owner], config.agg,
                                   config.max_new_tokens, task.pad_token_id, config.micro_batch,
                                   temperature=config.temperature,
                                   micro_batch_tokens=config.micro_batch_tokens,
                                   dtype=config.dtype)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
        scale = steps.step_scale(self.method, outcome)
        with steps.scaled_lr(self.optimizer, scale):
            moved = self._step_and_measure()
        self.engine.sync(self.model)
        # Per prompt, then averaged over prompts, so that unequal counts do not reweight them.
        kept = counts > 0
        lengths = np.array([len(r) for r in responses], dtype=float)
        per_prompt = lambda values: (np.bincount(owner, values, ids.size)[kept] / counts[kept])
        run.log("token_entropy", per_prompt(entropy).mean())
        run.log("response_length", per_prompt(lengths).mean())
        run.log("grad_norm", float(norm))
        if scale is not None:
            run.log("step_scale", scale)
        if moved is not None:
            run.log("update_norm", moved)
        run.log("mixed_successes", distinct_mixed_successes(groups))
        run.record_rollouts(ids[owner], lengths, rewards)

    def _step_and_measure(self) -> float | None:
        """The optimizer's step, and its length in parameter space (the norm of the parameters'
        change), measured from a copy of the parameters taken before it; None (step only) for a
        model whose parameters take more than UPDATE_NORM_MAX_BYTES, where the copy would cost
        an accelerator's memory."""
        params = list(self.model.parameters())
        size = sum(p.numel() * p.element_size() for p in params)
        if size > UPDATE_NORM_MAX_BYTES:
            self.optimizer.step()
            return None
        before = [p.detach().clone() for p in params]
        self.optimizer.step()
        with torch.no_grad():
            squares = sum(float(((p.detach() - b).double() ** 2).sum())
                          for p, b in zip(params, before, strict=True))
        return squares ** 0.5

    def correct_counts(self, samples: int, stream: int, step: int,
                       split: str = "val") -> np.ndarray:
        """Correct responses out of `samples` for every prompt of a split (the held-out "val",
        the final evaluation's "final" where the task has more of them, or its "tune" ones)."""
        prompts = getattr(self.task, f"{split}_prompts")
        responses = self._sample(prompts, np.full(len(prompts), samples), self.evaluation,
                                 stream, step)
        owner = np.repeat(np.arange(len(prompts)), samples)
        rewards = np.array([self.task.reward(split, int(o), r)
                            for o, r in zip(owner, responses, strict=True)])
        return np.bincount(owner, weights=rewards, minlength=len(prompts)).astype(int)

    def evaluate(self, run: loop.Run) -> None:
        samples = self.config.eval_samples
        memo = self._first_evaluation() if run.step == 0 else None
        correct = np.array(json.loads(memo.read_text())) if memo and memo.exists() else None
        if correct is None:
            correct = self.correct_counts(samples, stream=1, step=run.step)
            if memo is not None:
                runstore.write_json(memo, correct.tolist(), indent=None)
        for k in self.config.val_k:
            run.log("val_pass", pass_at_k(samples, correct, k).mean(), k)

    def _first_evaluation(self) -> Path | None:
        """Where the step-0 evaluation is kept for every run that starts from the same warm-up
        model with the same seed and evaluation settings: before the first update it depends on
        nothing else, and its sampling has its own seed, so reading it back rather than sampling
        it again changes no number of any run. None (sample it) for a model other than a
        warm-up's or an engine other than transformers."""
        folder = warmup_folder(self.config)
        if getattr(self.config, "model", None) is not None or \
                type(self.engine) is not TransformersEngine or not folder.is_dir():
            return None
        import dataclasses
        import hashlib

        key = {"model": fingerprint(self.model), "seed": self.config.seed,
               "samples": self.config.eval_samples, "dtype": self.config.dtype,
               "sampling": dataclasses.asdict(self.evaluation), "torch": torch.__version__,
               "device": next(self.model.parameters()).device.type,
               "chunk": self.engine.chunk, "share_prompts": self.engine.share_prompts,
               "prompts": hashlib.sha256(
                   json.dumps(self.task.val_prompts, default=int).encode()).hexdigest()}
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return runstore.first_evaluation(folder, digest)

    def finish(self, run: loop.Run) -> pd.DataFrame:
        """The final Pass@K profile from one pool of final_samples per held-out prompt; the
        final model and its tokenizer go to OUT/model."""
        samples = self.config.final_samples
        split = "final" if getattr(self.task, "final_prompts", None) else "val"
        correct = self.correct_counts(samples, stream=2, step=run.step, split=split)
        for k in k_grid(samples):
            run.log("pass", pass_at_k(samples, correct, k).mean(), k)
        if getattr(self.task, "tune_prompts", None):  # the learning-rate sweeps' choice
            tune = self.correct_counts(samples, stream=3, step=run.step, split="tune")
            for k in k_grid(samples):
                run.log("tune_pass", pass_at_k(samples, tune, k).mean(), k)
        folder = Path(self.config.out) / runstore.MODEL
        self.model.save_pretrained(folder)
        self.task.tokenizer.save_pretrained(folder)
        return pd.DataFrame({"prompt": np.arange(correct.size), "n": samples,
                             "correct": correct})


def distinct_mixed_successes(groups) -> int:
    """The distinct successful responses (reward > 0, told apart by their tokens) in the groups
    whose rewards are not all equal: the evidence a step's MaxRL update rests on. groups: one
    list of (response tokens, reward) per prompt."""
    found = 0
    for group in groups:
        rewards = {reward for _, reward in group}
        if len(rewards) > 1:
            found += len({tuple(response) for response, reward in group if reward > 0})
    return found


def warm_up(config: SequenceConfig, task: Task, build_model, folder: Path, settings: dict):
    """The supervised warm-up model, trained once per `settings` and reused from `folder`:
    cross-entropy on the reference answers' tokens. Returns (model, metrics rows)."""
    with runstore.claim(folder, wait=True):  # a grid beside this one may be training it
        return _warm_up(config, task, build_model, Path(folder), settings)


def _warm_up(config: SequenceConfig, task: Task, build_model, folder: Path, settings: dict):
    from sera.models import device, load_decoder

    stamp = runstore.warmup_stamp(folder)
    saved = json.loads(stamp.read_text()) if stamp.exists() else None
    if saved is not None and saved["settings"] == settings:
        model = load_decoder(folder).to(device(config.device))
        if "fingerprint" not in saved:  # written before fingerprints were kept
            runstore.write_text(stamp, json.dumps({**saved, "fingerprint": fingerprint(model)}))
        return model, saved["rows"]
    torch.manual_seed(settings.get("seed", 0))
    model = build_model().to(device(config.device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.warmup_lr)
    rng = np.random.default_rng([settings.get("seed", 0), 7])
    rows = []
    for step in range(config.warmup_steps):
        ids = rng.choice(len(task.train_prompts), min(config.warmup_batch,
                                                      len(task.train_prompts)), replace=False)
        ones = np.ones(len(ids))
        optimizer.zero_grad(set_to_none=True)
        loss, _ = sequence_loss(model, [task.train_prompts[i] for i in ids], task.answers(ids),
                                ones, ones, "token-mean", 1, task.pad_token_id)
        optimizer.step()
        rows.append({"step": step, "metric": "warmup_loss", "value": loss})
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    task.tokenizer.save_pretrained(folder)
    runstore.write_text(stamp, json.dumps({"settings": settings, "rows": rows,
                                           "fingerprint": fingerprint(model)}))
    return model, rows


def tiny_decoder(config: SequenceConfig, task: Task):
    """The tiny decoder of config's width, layers and heads after its supervised warm-up on
    `task`, trained once per setting and reused from warmup_folder(config). Its vocabulary and
    special tokens are the task tokenizer's."""
    from sera import models

    tokenizer = task.tokenizer
    longest = max(map(len, task.train_prompts + task.val_prompts
                      + list(getattr(task, "tune_prompts", []))))
    max_positions = longest + config.max_new_tokens + 8
    settings = {**warmup_settings(config, {**config.task_fields(), **config.decoder_fields()}),
                "seed": config.data_seed, "max_positions": max_positions}
    model, _ = warm_up(config, task, lambda: models.decoder(
        len(tokenizer), config.width, config.layers, config.heads, config.kv_heads,
        max_positions, pad_token_id=task.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id), warmup_folder(config), settings)
    return model


def train(config: SequenceConfig, build, callback=None) -> loop.Results:
    """Build the study (warming up when needed), then run, resume or read back its RL stage;
    `build` is the task module's (e.g. sera.trainers.maze.build)."""
    return loop.fit(build(config), callback)


def run_grid(base: SequenceConfig, build, runs, seeds, runs_dir, *, rerun: bool = False,
             progress: bool = True, shared=None, warmup_dir=None,
             warmup_from=None) -> loop.Results:
    """Every (method, agg) in `runs` x seed of a sequence study, all from one warm-up in
    warmup_dir (default runs_dir/warmup), through the package's one grid runner,
    sera.trainers.grid.run_grid, whose keywords rerun, progress and shared are; `build` turns a
    config into its study. Two grids given the same warmup_dir and the same `shared` index
    train the warm-up once and read back each other's finished runs of equal settings.

    warmup_from: a warm-up folder (e.g. `runstore.stored_warmup(point)`) copied to warmup_dir
    where that holds none, so that the runs start from its weights on any machine instead of
    training a warm-up; where base's warm-up settings differ from the copy's, the warm-up is
    trained as without it."""
    import dataclasses

    warmup_dir = Path(warmup_dir) if warmup_dir is not None else runstore.warmup_dir(runs_dir)
    if warmup_from is not None:
        runstore.seed_warmup(warmup_dir, warmup_from)
    base = dataclasses.replace(base, warmup_dir=str(warmup_dir))
    configs = [dataclasses.replace(base, method=method, agg=agg, seed=seed)
               for seed in seeds for method, agg in runs]
    return grid.run_grid(configs, build, runs_dir=runs_dir, rerun=rerun, progress=progress,
                         shared=shared)


def sample_answers(folder, task: Task, index: int, n: int, max_new_tokens: int, seed: int = 0):
    """n responses (token ids) of the model saved in folder/model to held-out prompt `index`,
    with their rewards."""
    from sera.models import load_decoder

    model = load_decoder(Path(folder) / runstore.MODEL)
    sampling = Sampling(max_new_tokens, stop_token_id=task.stop_token_id,
                        pad_token_id=task.pad_token_id)
    out = TransformersEngine(model).generate([task.val_prompts[index]], [n], sampling, seed)
    return out, [task.reward("val", index, r) for r in out]


def main(config_type, presets: dict, build, argv=None, description: str = "") -> int:
    """A sequence task's command line: the config from --preset and the flags, one run, and its
    final Pass@1 and Pass@max printed."""
    from sera.trainers import cli

    config = cli.parse(config_type, presets, argv, description)
    return report(config, train(config, build))


def report(config: SequenceConfig, results: loop.Results) -> int:
    """What a sequence trainer's command line prints at the end: final Pass@1 and Pass@max."""
    table = results.metrics
    final = table[(table["metric"] == "pass") & table["k"].isin([1, config.final_samples])]
    print(f"{config.method} {config.agg} seed={config.seed}: " + ", ".join(
        f"pass@{k} {v:.4f}" for k, v in zip(final["k"], final["value"], strict=True)))
    print(f"metrics: {Path(config.out) / runstore.table_file('metrics')}")
    return 0
