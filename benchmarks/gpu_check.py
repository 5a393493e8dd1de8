"""The prepared GPU check: SERA's three training paths on one GPU in bf16, measured in one report.

    make gpu-check              # a GPU machine: about 8 minutes on one H200 (report in data/gpu/)
    make gpu-check-cpu          # smoke mode: the same code at toy sizes on a CPU (make test)
    python benchmarks/gpu_check.py [--cpu] [--parts trl,resnet,maze,verl] [--out DIR]

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
- verl: `bash examples/verl/single_node.sh` (sera.integrations.verl_main) on one GPU with vLLM
  rollouts, a one-layer model and 40 generated GSM8K-format questions, six steps (the sixth
  planned from the history); the checks read the plan lines, verl's console metrics and the
  saved history. It needs the scale-gpu extra (verl, vLLM, Ray). In smoke mode it runs as far as
  verl goes without a GPU (benchmarks/gpu_parts/verl.py).

Each part is a module of benchmarks/gpu_parts/ registered with `@part(name, budget)`. For each part
the report gives step times (median, 90th percentile), peak GPU memory, throughput (tokens or images
a second), the share of the step time spent in SERA's planning and history (the methods marked
`@sera.timing.timed`), and SERA's checks: every planned step spends exactly the budget (batch size x
n0) with counts in [n_min, n_max], the counts equal `sera.allocate` recomputed from the estimates
the plan read (or from a replayed history), and the history folded once per pass over the training
set. The report is written as JSON and Markdown after every part, so a run cut short keeps what
finished.

On a machine without network that has torch, torchvision and transformers (and the scientific
stack) but not TRL, datasets or math-verify, `make gpu-wheels` downloads those as wheels into
.whl/ beforehand; install them with `pip install --no-index --no-deps --target DIR .whl/*.whl`
and put DIR on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
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

from gpu_parts import maze, resnet, trl, verl  # noqa: E402, F401  (importing a part registers it)
from gpu_parts.common import PARTS  # noqa: E402


def environment() -> dict:
    import transformers

    commit = os.environ.get("SERA_COMMIT")
    if commit is None:
        with contextlib.suppress(Exception):
            commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                    capture_output=True, text=True, check=True).stdout.strip()
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "numpy": np.__version__}
    for name in ("trl", "datasets", "torchvision", "accelerate", "verl", "vllm", "ray"):
        with contextlib.suppress(ImportError):
            versions[name] = __import__(name).__version__
    if torch.cuda.is_available():  # the CUDA runtime torch was built with, and the driver
        versions["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):
            versions["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, check=True, timeout=30).stdout.split()[0]
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
    parser.add_argument("--parts", default="trl,resnet,maze,verl",
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
                chosen = PARTS[name]
                result = chosen.run(args.cpu, chosen.budget * args.scale, Path(work))
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
