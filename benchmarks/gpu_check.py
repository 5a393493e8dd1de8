"""The prepared GPU check: SERA's three training paths on one GPU in bf16, measured in one report.

    make gpu-check              # a GPU machine: about 8 minutes on one H200 (report in data/gpu/)
    make gpu-check-cpu          # smoke mode: the same code at toy sizes on a CPU (make test)
    python benchmarks/gpu_check.py [--cpu] [--parts trl,resnet,maze] [--out DIR]

Parts, each with a wall-clock budget (a part that fails is reported and the others still run):

- trl: `SeraGRPOTrainer` (sera.integrations.trl) on a randomly initialised decoder of
  SmolLM2-360M's shape (32 layers, width 960, 15 heads, 5 key-value heads, vocabulary 49,152)
  after a short supervised warm-up on the generated math set, rewarded by math-verify.
- resnet: the exact-likelihood classification study, ResNet-50 on a generated ImageFolder
  (random images, so the classes are noise: the check is about speed and SERA's bookkeeping),
  N0 = 128, 256 images a step.
- maze: the maze study's paper preset (17x17 mazes, a 4-layer width-256 decoder, N0 = 128,
  64 mazes a step, responses up to 160 tokens) with 384 training mazes instead of 7,424, so that
  the history folds every 6 steps and SERA allocates within the budget, a shorter warm-up and
  one small validation.

For each part the report gives step times (median, 90th percentile), peak GPU memory, throughput
(tokens or images a second), the share of the step time spent in SERA's planning and history,
and SERA's checks: every planned step spends exactly the budget (batch size x n0) with counts in
[n_min, n_max], the counts equal `sera.allocate` recomputed from the estimates the plan read
(or from a replayed history), and the history folded once per pass over the training set. The
report is written as JSON and Markdown after every part, so a run cut short keeps what finished.

On a machine without network that has torch, torchvision and transformers (and the scientific
stack) but not TRL, datasets or math-verify, `make gpu-wheels` downloads those as wheels into
.whl/ beforehand; install them with `pip install --no-index --no-deps --target DIR .whl/*.whl`
and put DIR on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sera  # noqa: E402
from sera.history import SuccessHistory  # noqa: E402
from sera.trainers import loop, methods  # noqa: E402


class TimeUp(Exception):
    """A part's wall-clock budget ran out; what it measured so far is reported."""


# ----------------------------------------------------------------------------- SERA's share

class SeraClock:
    """Wall time spent inside SERA's planning and history, counted once for nested calls.

    Wraps the history's methods, the method table's `plan`, the loop's `Run.plan` and, where they
    exist, the plug-ins' planners, for as long as the context is open."""

    def __init__(self):
        self.seconds = 0.0
        self._depth = 0
        self._saved: list[tuple[object, str, object]] = []

    def _targets(self):
        yield from ((SuccessHistory, n) for n in ("record", "record_groups", "end_epoch",
                                                   "estimate", "last_rates", "posterior"))
        yield loop.Run, "plan"
        yield from ((methods, n) for n in ("estimate", "plan"))
        with contextlib.suppress(ImportError):
            from sera.integrations import planner

            for value in vars(planner).values():
                if isinstance(value, type) and value.__module__ == planner.__name__:
                    yield from ((value, n) for n in ("plan", "record", "end_epoch", "fold")
                                if callable(vars(value).get(n)))
        trl_plugin = sys.modules.get("sera.integrations.trl")
        if trl_plugin is not None:
            yield trl_plugin.SeraGRPOTrainer, "sera_plan"

    def _wrap(self, function):
        clock = self

        def timed(*args, **kwargs):
            clock._depth += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                clock._depth -= 1
                if clock._depth == 0:
                    clock.seconds += time.perf_counter() - start

        return timed

    def __enter__(self):
        for owner, name in self._targets():
            original = getattr(owner, name, None)
            if original is None or any(o is owner and n == name for o, n, _ in self._saved):
                continue
            raw = vars(owner).get(name, original) if isinstance(owner, type) else original
            self._saved.append((owner, name, raw))
            setattr(owner, name, self._wrap(original))
        return self

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()


class Steps:
    """Step times and SERA seconds per step, with a deadline."""

    def __init__(self, clock: SeraClock, budget: float):
        self.clock, self.deadline = clock, time.perf_counter() + budget
        self.times: list[float] = []
        self.sera: list[float] = []
        self._start = self._sera0 = None

    def begin(self):
        _sync()
        self._start, self._sera0 = time.perf_counter(), self.clock.seconds

    def end(self):
        _sync()
        now = time.perf_counter()
        self.times.append(now - self._start)
        self.sera.append(self.clock.seconds - self._sera0)
        self._start, self._sera0 = now, self.clock.seconds
        return now > self.deadline

    def summary(self, skip: int = 1) -> dict:
        """Times without the first `skip` steps (compilation and allocator warm-up)."""
        times = np.array(self.times[skip:] or self.times)
        sera_s = np.array(self.sera[skip:] or self.sera)
        return {"steps": len(self.times), "step_s_median": float(np.median(times)),
                "step_s_p90": float(np.quantile(times, 0.9)),
                "sera_share": float(sera_s.sum() / times.sum()),
                "sera_ms_per_step": float(1000 * sera_s.mean()),
                "measured_s": float(times.sum())}


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _memory() -> dict:
    if not torch.cuda.is_available():
        return {"peak_gib": None}
    return {"peak_gib": torch.cuda.max_memory_allocated() / 2**30}


def _check(checks: dict, name: str, ok: bool, detail: str = "") -> None:
    checks[name] = {"ok": bool(ok), "detail": detail}


# ----------------------------------------------------------------------------- loop parts

def _loop_checks(run: loop.Run, n_prompts: int, batch: int) -> dict:
    """SERA's checks on a run of the shared loop, from its allocation records."""
    config = run.config
    table = run.allocation_table()
    checks: dict = {}
    n_min, n_max = config.allocator.n_min, config.allocator.n_max_for(config.n0)
    per_step = table.groupby("step").agg(prompts=("prompt", "size"), rollouts=("rollouts", "sum"),
                                         low=("rollouts", "min"), high=("rollouts", "max"),
                                         allocated=("allocated", "first"))
    _check(checks, "budget", (per_step["rollouts"] == per_step["prompts"] * config.n0).all(),
           f"{len(per_step)} steps, rollouts per step = prompts x n0 = "
           f"{sorted(set((per_step['prompts'] * config.n0).tolist()))}")
    _check(checks, "bounds", ((per_step["low"] >= n_min) & (per_step["high"] <= n_max)).all(),
           f"counts from {int(per_step['low'].min())} to {int(per_step['high'].max())}, "
           f"bounds [{n_min}, {n_max}]")
    allocated = per_step[per_step["allocated"]]
    epoch_steps = -(-n_prompts // batch)
    _check(checks, "allocates_after_first_epoch",
           len(per_step) <= epoch_steps or len(allocated) == len(per_step) - epoch_steps,
           f"{len(allocated)} of {len(per_step)} steps allocated from estimates; the first "
           f"{epoch_steps} (one epoch) are uniform")
    mismatches = 0
    for step in allocated.index:
        rows = table[table["step"] == step]
        expected = sera.allocate(rows["estimate"].to_numpy(), len(rows) * config.n0,
                                 n_min=n_min, n_max=n_max, n0=config.n0,
                                 method=config.allocator.rounding).counts
        mismatches += int(not np.array_equal(expected, rows["rollouts"].to_numpy()))
    _check(checks, "counts_equal_allocate", mismatches == 0,
           f"{len(allocated) - mismatches} of {len(allocated)} allocated steps equal "
           f"sera.allocate on the estimates they read")
    _check(checks, "history_folds", run.history.epoch == run.epoch,
           f"history folded {run.history.epoch} times in {run.epoch} epoch boundaries")
    return checks


def _fit(study, budget: float, clock: SeraClock):
    """Run the shared loop on `study` until its steps or the budget end; returns (run, steps)."""
    steps = Steps(clock, budget)
    captured = {}

    def callback(run):
        captured["run"] = run
        if steps.end():
            raise TimeUp

    steps.begin()
    with contextlib.suppress(TimeUp):
        loop.fit(study, callback)
    return captured["run"], steps


def part_resnet(cpu: bool, budget: float, work: Path) -> dict:
    from PIL import Image

    from sera.trainers import classification

    classes, per_class, val_per_class = (3, 4, 2) if cpu else (100, 24, 2)
    rng = np.random.default_rng(0)
    root = work / "images"
    for split, count in (("train", per_class), ("val", val_per_class)):
        for c in range(classes):
            folder = root / split / f"class{c:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
                    folder / f"{i}.png")
    n0, batch = (4, 4) if cpu else (128, 256)
    config = classification.ClassificationConfig(
        method="sera", data="imagefolder", data_path=str(root), model="resnet50", n0=n0,
        batch_size=batch, steps=6 if cpu else 10_000, eval_every=10**6, cosine_every=20,
        checkpoint_every=10**6, val_k=(1, 4) if cpu else (1, 16, 128),
        device="cpu" if cpu else "cuda", progress=False, out=str(work / "resnet-run"),
        min_allocated_share=0.0)
    clock = SeraClock()
    with clock:
        study = classification.ClassificationStudy(config)
        run, steps = _fit(study, budget, clock)
    summary = steps.summary()
    images = batch / summary["step_s_median"]
    return {"setting": f"ResNet-50 from scratch, {classes} classes x {per_class} generated "
                       f"images, {batch} images x N0 = {n0} label rollouts a step, "
                       f"{'float32' if cpu else 'bf16 autocast'}", **summary, **_memory(),
            "throughput": f"{images:.0f} images/s, {images * n0:.0f} rollouts/s",
            "checks": _loop_checks(run, study.n_prompts, batch)}


def part_maze(cpu: bool, budget: float, work: Path) -> dict:
    from sera.trainers import maze

    if cpu:
        config = dataclasses.replace(
            maze.PRESETS["fast"], size=7, n_train=16, n_val=4, batch_size=8, n0=4, steps=6,
            warmup_steps=20, width=32, layers=1, max_new_tokens=24, eval_samples=4,
            val_k=(1, 4), final_samples=4)
    else:
        config = dataclasses.replace(
            maze.PRESETS["paper"], n_train=384, n_val=64, steps=10_000, warmup_steps=600,
            eval_samples=16, val_k=(1, 16), final_samples=16, dtype="bfloat16")
    config = dataclasses.replace(config, eval_every=10**6, checkpoint_every=10**6,
                                 device="cpu" if cpu else "cuda", progress=False,
                                 out=str(work / "maze-run"), min_allocated_share=0.0)
    clock = SeraClock()
    start = time.perf_counter()
    with clock:
        study = maze.build(config)
        warm = time.perf_counter() - start
        study.engine.chunk = 8192  # every rollout of a step in one generate call on a GPU
        run, steps = _fit(study, budget, clock)
    summary = steps.summary()
    lengths = [v for _, m, _, v in run.rows if m == "response_length"]
    rollouts = [v for _, m, _, v in run.rows if m == "rollouts"]
    reward = [v for _, m, _, v in run.rows if m == "train_reward"]
    tokens = np.mean(lengths) * np.mean(rollouts) / summary["step_s_median"]
    return {"setting": f"{config.size}x{config.size} mazes ({config.n_train} for training), "
                       f"decoder {config.layers} layers x {config.width}, {config.batch_size} "
                       f"mazes x N0 = {config.n0} a step, up to {config.max_new_tokens} tokens, "
                       f"{config.dtype}; warm-up {config.warmup_steps} steps in {warm:.0f} s",
            **summary, **_memory(),
            "throughput": f"{tokens:.0f} generated tokens/s (training included)",
            "train_reward_first_last": [float(reward[0]), float(reward[-1])] if reward else None,
            "checks": _loop_checks(run, study.n_prompts, config.batch_size)}


# ----------------------------------------------------------------------------- TRL part

def part_trl(cpu: bool, budget: float, work: Path) -> dict:
    from types import SimpleNamespace

    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM, TrainerCallback
    from trl import GRPOConfig

    from sera.integrations import trl as plugin
    from sera.integrations.gsm8k import trl_reward
    from sera.tasks import math as task_math
    from sera.trainers.config import AllocatorConfig
    from sera.trainers.sequence import warm_up

    n_prompts, per_step, n0 = (8, 2, 4) if cpu else (64, 8, 8)
    train, val = task_math.generated_splits(n_prompts, 4, seed=0, steps=1, max_number=5)
    problems = task_math.as_problems(train)
    texts = [m[0]["content"] for m in problems["messages"]] + list(problems["solution"])
    tokenizer = task_math.build_tokenizer(texts)
    if cpu:
        shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2)
    else:  # SmolLM2-360M's shape
        shape = dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                     num_attention_heads=15, num_key_value_heads=5, rope_theta=100_000.0)
        tokenizer.add_tokens([f"<unused{i}>" for i in range(49_152 - len(tokenizer))])
    task = task_math.MathTask(train, val, tokenizer)

    def build():
        return LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tokenizer), max_position_embeddings=2048, tie_word_embeddings=True,
            pad_token_id=task.pad_token_id, eos_token_id=task.stop_token_id,
            bos_token_id=None, **shape))

    start = time.perf_counter()
    settings = SimpleNamespace(warmup_steps=30 if cpu else 150, warmup_batch=16,
                               warmup_lr=1e-3 if cpu else 3e-4, device="cpu" if cpu else "cuda")
    model, rows = warm_up(settings, task, build, work / "trl-warmup", {"seed": 0})
    warm = time.perf_counter() - start
    data = Dataset.from_dict({
        "prompt": [m[0]["content"] for m in problems["messages"]],
        "answer": list(problems["answer"])})
    epoch_steps = n_prompts // per_step
    args = GRPOConfig(
        output_dir=str(work / "trl-out"), per_device_train_batch_size=per_step * n0,
        num_generations=n0, max_completion_length=24 if cpu else 96,
        max_steps=3 * epoch_steps, learning_rate=1e-5, beta=0.0, loss_type="dr_grpo",
        use_cpu=cpu, bf16=not cpu, report_to="none", logging_steps=1, save_strategy="no",
        seed=0, disable_tqdm=True, temperature=1.0)
    allocator = AllocatorConfig(n_min=2, n_max=4 * n0)
    trainer = plugin.SeraGRPOTrainer(model=model, reward_funcs=trl_reward, args=args,
                                     train_dataset=data, processing_class=tokenizer,
                                     allocator=allocator)
    clock = SeraClock()
    steps = Steps(clock, budget)

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            steps.begin()

        def on_step_end(self, args, state, control, **kwargs):
            if steps.end():
                control.should_training_stop = True

    trainer.add_callback(Timer())
    with clock:
        trainer.train()
    summary = steps.summary()
    logs = [h for h in trainer.state.log_history if "num_tokens" in h]
    tokens = (logs[-1]["num_tokens"] - logs[0]["num_tokens"]) / sum(steps.times[1:]) \
        if len(logs) > 1 else float("nan")
    rewards = [h.get("reward") for h in logs]
    return {"setting": f"SeraGRPOTrainer, decoder of {'toy' if cpu else 'SmolLM2-360M'} shape "
                       f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters),"
                       f" {per_step} prompts x {n0} rollouts a step out of {n_prompts}, "
                       f"responses up to {args.max_completion_length} tokens, "
                       f"{'float32' if cpu else 'bf16'}; supervised warm-up "
                       f"{settings.warmup_steps} steps in {warm:.0f} s (loss "
                       f"{rows[0]['value']:.2f} -> {rows[-1]['value']:.2f})",
            **summary, **_memory(),
            "throughput": f"{tokens:.0f} prompt + completion tokens/s",
            "reward_first_last": [rewards[0], rewards[-1]] if rewards else None,
            "checks": _trl_checks(trainer, n0, allocator, epoch_steps)}


def _trl_checks(trainer, n0: int, allocator, epoch_steps: int) -> dict:
    """SERA's checks on the TRL run: budget and bounds per generation batch, counts against a
    replayed history, folds per pass."""
    log = list(trainer.sera_log)
    checks: dict = {}
    reference = allocator.history(trainer.sera_history.n_prompts)
    budget_ok = bounds_ok = True
    equal = planned = 0
    for i, entry in enumerate(log):
        ids, counts = np.asarray(entry["ids"]), np.asarray(entry["counts"])
        budget_ok &= int(counts.sum()) == ids.size * n0
        bounds_ok &= bool((counts >= allocator.n_min).all()
                          and (counts <= allocator.n_max_for(n0)).all())
        p_hat, ready = reference.estimate(ids)
        if ready.all():
            planned += 1
            expected = sera.allocate(p_hat, ids.size * n0, n_min=allocator.n_min,
                                     n_max=allocator.n_max_for(n0), n0=n0,
                                     method=allocator.rounding).counts
            equal += int(np.array_equal(expected, counts))
        reference.record(np.repeat(ids, counts), entry["rewards"])
        if (i + 1) % epoch_steps == 0:
            reference.end_epoch()
    spread = np.concatenate([np.asarray(e["counts"]) for e in log[epoch_steps:]] or [[0]])
    _check(checks, "budget", budget_ok, f"{len(log)} generation batches, each prompts x {n0}; "
           f"counts after the first pass from {spread.min()} to {spread.max()}")
    _check(checks, "bounds", bounds_ok, f"counts in [{allocator.n_min}, {allocator.n_max_for(n0)}]")
    _check(checks, "counts_equal_allocate", planned > 0 and equal == planned,
           f"{equal} of {planned} planned batches equal sera.allocate on a replayed history")
    _check(checks, "history_folds", trainer.sera_history.epoch == len(log) // epoch_steps,
           f"history folded {trainer.sera_history.epoch} times in {len(log)} batches of "
           f"{epoch_steps} per pass")
    _check(checks, "history_matches_replay",
           np.allclose(trainer.sera_history.successes, reference.successes),
           "the trainer's history equals the replay")
    return checks


# ----------------------------------------------------------------------------- report

PARTS = {"trl": part_trl, "resnet": part_resnet, "maze": part_maze}
BUDGETS = {"trl": 110.0, "resnet": 80.0, "maze": 150.0}  # seconds of timed steps on a GPU


def environment() -> dict:
    import transformers

    commit = os.environ.get("SERA_COMMIT")
    if commit is None:
        with contextlib.suppress(Exception):
            commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                    capture_output=True, text=True, check=True).stdout.strip()
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "numpy": np.__version__}
    for name in ("trl", "datasets", "torchvision", "accelerate"):
        with contextlib.suppress(ImportError):
            versions[name] = __import__(name).__version__
    return {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "versions": versions}


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# GPU check ({'CPU smoke mode' if report['cpu'] else env['device']})", "",
             f"Commit {env['commit']}, {env['date']}; " + ", ".join(
                 f"{k} {v}" for k, v in env["versions"].items()) + ".", "",
             "| part | steps | step s (median / p90) | SERA share | peak GiB | throughput |",
             "|---|---|---|---|---|---|"]
    for name, part in report["parts"].items():
        if "error" in part:
            lines.append(f"| {name} | failed: {part['error'].splitlines()[-1]} | | | | |")
            continue
        peak = "-" if part["peak_gib"] is None else f"{part['peak_gib']:.1f}"
        lines.append(f"| {name} | {part['steps']} | {part['step_s_median']:.3f} / "
                     f"{part['step_s_p90']:.3f} | {100 * part['sera_share']:.3f}% "
                     f"({part['sera_ms_per_step']:.1f} ms) | {peak} | {part['throughput']} |")
    for name, part in report["parts"].items():
        lines += ["", f"## {name}", "", part.get("setting", ""), ""]
        for check, result in part.get("checks", {}).items():
            lines.append(f"- {'ok' if result['ok'] else 'FAILED'} {check}: {result['detail']}")
        if "error" in part:
            lines += ["```", part["error"], "```"]
    lines += ["", f"Total wall time {report['wall_s']:.0f} s. Verdict: "
              f"{'all checks passed' if report['ok'] else 'FAILED'}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="smoke mode: toy sizes on the CPU")
    parser.add_argument("--parts", default="trl,resnet,maze",
                        help="comma-separated parts to run, of " + ", ".join(PARTS))
    parser.add_argument("--out", default="data/gpu", help="folder of the report")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every part's time budget by this")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {sorted(PARTS)}")
    if not args.cpu and not torch.cuda.is_available():
        parser.error("no GPU is visible to torch; use --cpu for the smoke mode")
    if not args.cpu:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"cpu": args.cpu, "environment": environment(), "parts": {}, "ok": True,
              "wall_s": 0.0}
    start = time.perf_counter()
    for name in parts:
        print(f"gpu-check: {name} ...", flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        part_start = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory() as work:
                result = PARTS[name](args.cpu, BUDGETS[name] * args.scale, Path(work))
            result["ok"] = all(c["ok"] for c in result["checks"].values())
        except Exception:  # reported, and the next part still runs
            result = {"error": traceback.format_exc(), "ok": False}
        result["part_wall_s"] = time.perf_counter() - part_start
        report["parts"][name] = result
        report["ok"] &= result["ok"]
        report["wall_s"] = time.perf_counter() - start
        (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
        (out / "gpu_check.md").write_text(markdown(report))
        print(f"gpu-check: {name} {'ok' if result['ok'] else 'FAILED'} in "
              f"{result['part_wall_s']:.0f} s", flush=True)
    print(markdown(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
