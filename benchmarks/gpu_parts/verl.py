"""SERA in verl (sera.integrations.verl) launched as a user launches it: `bash
examples/verl/single_node.sh` with a one-layer model and generated GSM8K-format data made here.

On a GPU, six steps with vLLM rollouts on one GPU: 40 training questions in batches of 8 make
five steps an epoch, so the sixth is planned from the history; the checks read the plan lines,
verl's console metrics and the history the checkpoint holds. On the CPU (smoke mode, and
tests/test_verl_launch.py), verl 0.9.1 stops where its trainer asks Ray for a GPU; the launch
chains the probe's setup hook (gpu_parts.verl_probe), which then has the trainer submit its
first batch, and the checks read how far it went.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_parts.common import check, part

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "examples" / "verl" / "single_node.sh"
PROMPTS, BATCH, N0 = 40, 8, 4
"""Training questions, prompts a step and rollouts a prompt (SERA's n0)."""
GPU_STEPS = 6
HOOK_KEY = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
STOPPED = "verl stopped on CPU:"
HANDED = "agent loop handed counts:"
"""What the CPU probe (gpu_parts.verl_probe) prints where verl stops, and for the first plan."""
STDERR = "\n--- stderr\n"
"""Between the launch's stdout and stderr in work/launch.log."""
PLAN = re.compile(r"sera: (\d+) prompts, counts (\d+)\.\.(\d+), (\d+) rollouts( \(uniform)?")
"""The plan line SeraTrainerSync logs for every batch it submits."""


def model_and_data(folder: Path) -> tuple[Path, Path]:
    """verl's parquet from generated GSM8K-format files (examples/verl/prepare_gsm8k.py, as the
    README prepares the real ones) and a one-layer chat model for them: nothing is downloaded."""
    from sera.tasks import math as math_task

    train, test = math_task.generated_splits(PROMPTS, 12, seed=3)
    files = folder / "gsm8k"
    math_task.write_jsonl(train, files / "train.jsonl")
    math_task.write_jsonl(test, files / "test.jsonl")
    data = folder / "sera-gsm8k"
    subprocess.run([sys.executable, str(ROOT / "examples" / "verl" / "prepare_gsm8k.py"),
                    "--train", str(files / "train.jsonl"), "--test", str(files / "test.jsonl"),
                    "--out", str(data)], check=True, capture_output=True)
    model = folder / "tiny-model"
    math_task.tiny_chat_model([*train["question"], "The answer is 0123456789."], model)
    return model, data


def overrides(cpu: bool) -> list[str]:
    """What the check adds to the launcher's command line: the paper's batch and rollout sizes
    cut to the tiny set, one GPU, and on the CPU the probe's hook (SERA's, chained)."""
    common = [f"data.train_batch_size={BATCH}", f"actor_rollout_ref.actor.ppo_mini_batch_size="
              f"{BATCH}", f"actor_rollout_ref.rollout.n={N0}", "data.max_prompt_length=256",
              "trainer.n_gpus_per_node=1",
              "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]
    if cpu:
        return [*common, "data.max_response_length=16", "ray_kwargs.ray_init.num_cpus=4",
                f"{HOOK_KEY}=gpu_parts.verl_probe.setup"]
    return [*common, "data.max_response_length=64", f"trainer.total_training_steps={GPU_STEPS}",
            f"trainer.save_freq={GPU_STEPS}", "trainer.val_before_train=False",
            "trainer.test_freq=-1", "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"]


def launch(folder: Path, arguments: list[str], timeout: float) -> tuple[int, str, str]:
    """`bash examples/verl/single_node.sh ARGUMENTS` on folder's model and data, checkpoints in
    folder/ckpt: (exit code, stdout, stderr), without Ray's colour codes. Ray forwards each
    worker's stdout and stderr to the driver's, each stream in its own order."""
    model, data = model_and_data(folder)
    environment = dict(os.environ, MODEL=str(model), DATA=str(data), CKPT=str(folder / "ckpt"),
                       PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]),
                       PATH=os.pathsep.join([os.path.dirname(sys.executable),
                                             os.environ["PATH"]]),
                       HYDRA_FULL_ERROR="1", RAY_DEDUP_LOGS="0", PYTHONUNBUFFERED="1")
    done = subprocess.run(["bash", str(LAUNCHER), *arguments], capture_output=True, text=True,
                          timeout=timeout, cwd=folder, env=environment)
    colours = re.compile(r"\x1b\[[0-9;]*m")
    return done.returncode, colours.sub("", done.stdout), colours.sub("", done.stderr)


def plans(err: str) -> list[dict]:
    """The plan lines of a launch's stderr, in order."""
    return [{"prompts": int(m[1]), "low": int(m[2]), "high": int(m[3]), "rollouts": int(m[4]),
             "uniform": bool(m[5])} for m in PLAN.finditer(err)]


def console_metrics(out: str) -> dict[int, dict[str, float]]:
    """verl's console logger lines (`step:N - key:value - ...`), by step."""
    steps = {}
    for line in out.splitlines():
        match = re.search(r"step:(\d+) - (.*)$", line)
        if match:
            pairs = (item.split(":", 1) for item in match[2].split(" - ") if ":" in item)
            steps[int(match[1])] = {k: _number(v) for k, v in pairs}
    return steps


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


@part("verl", budget=420.0)
def part_verl(cpu: bool, budget: float, work: Path) -> dict:
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        raise RuntimeError("verl is not installed in this environment: install the scale-gpu "
                           "extra (pip install -e '.[scale-gpu]'; on the CPU, .venv-scale)")
    start = time.perf_counter()
    code, out, err = launch(work, overrides(cpu), timeout=max(budget, 300.0))
    wall = time.perf_counter() - start
    (work / "launch.log").write_text(out + STDERR + err)
    checks = _cpu_checks(out, err, work) if cpu else _gpu_checks(code, out, err, work)
    steps = console_metrics(out)
    times = np.array([s["timing_s/step"] for s in steps.values() if "timing_s/step" in s])
    share = np.array([s["sera/planning_share"] for s in steps.values()
                      if "sera/planning_share" in s])
    planning = np.array([s["sera/planning_s"] for s in steps.values() if "sera/planning_s" in s])
    nan = float("nan")
    return {"setting": f"bash examples/verl/single_node.sh, one-layer model, {PROMPTS} questions,"
                       f" {BATCH} prompts x n0 = {N0} a step, "
                       + ("CPU: as far as verl goes without a GPU" if cpu else
                          f"{GPU_STEPS} steps with vLLM rollouts on one GPU"),
            "steps": len(steps),
            "step_s_median": float(np.median(times)) if times.size else nan,
            "step_s_p90": float(np.quantile(times, 0.9)) if times.size else nan,
            "sera_share": float(share.mean()) if share.size else nan,
            "sera_ms_per_step": float(1000 * planning.mean()) if planning.size else nan,
            "peak_gib": None, "throughput": f"whole launch {wall:.0f} s", "exit_code": code,
            "log_tail": (out + err)[-3000:], "checks": checks}


def _cpu_checks(out: str, err: str, work: Path) -> dict:
    checks: dict = {}
    check(checks, "trainer_built", "sera: SeraTrainerSync built" in err,
          "SERA's trainer built in verl's TaskRunner after the setup hook")
    from sera.integrations.planner import fingerprint

    read = re.search(rf"sera: history over {PROMPTS} training rows \(prompts ([0-9a-f]+)", err)
    mine = fingerprint(pd.read_parquet(work / "sera-gsm8k" / "train.parquet")["prompt"])
    check(checks, "history_read", read is not None and mine.startswith(read[1]),
          f"the history covers the {PROMPTS} rows, their prompts' fingerprint "
          f"{read[1] if read else None}... as read here from the parquet ({mine[:12]}...)")
    stop = f"{STOPPED} Total available GPUs 0 is less than total desired GPUs 1"
    check(checks, "stops_at_the_gpu_ask", stop in out,
          "verl stops where its trainer asks Ray for a GPU")
    first = plans(err)
    handed = re.search(rf"{HANDED} \[([\d, ]+)\]", out)
    counts = [int(n) for n in handed[1].split(",")] if handed else []
    check(checks, "first_plan", first[:1] == [{"prompts": BATCH, "low": N0, "high": N0,
                                                "rollouts": BATCH * N0, "uniform": True}]
          and counts == [N0] * BATCH,
          f"first batch planned uniform ({first[:1]}), counts handed to the agent loop {counts}")
    return checks


def _gpu_checks(code: int, out: str, err: str, work: Path) -> dict:
    from sera.integrations import verl as plugin  # noqa: F401  (the GPU machine has verl)
    from sera.integrations.planner import Planner, fingerprint

    checks: dict = {}
    steps = console_metrics(out)
    check(checks, "runs", code == 0 and sorted(steps) == list(range(1, GPU_STEPS + 1)),
          f"exit code {code}, console metrics for steps {sorted(steps)}")
    planned = plans(err)
    check(checks, "budget", len(planned) == GPU_STEPS
          and all(p["rollouts"] == BATCH * N0 for p in planned),
          f"{len(planned)} plans, rollouts {[p['rollouts'] for p in planned]}")
    uniform = [p["uniform"] for p in planned]
    epoch = PROMPTS // BATCH
    check(checks, "allocates_after_first_epoch",
          uniform == [True] * epoch + [False] * (GPU_STEPS - epoch),
          f"uniform plans {uniform}: the first epoch ({epoch} steps) knows nothing yet")
    logged = [s for s in steps.values() if "sera/count_max" in s and "sera/epoch" in s]
    check(checks, "metrics", len(logged) == GPU_STEPS,
          f"sera/* metrics on {len(logged)} of {GPU_STEPS} console lines")
    frame = pd.read_parquet(work / "sera-gsm8k" / "train.parquet")
    planner = Planner(PROMPTS, N0, plugin.allocator_from_config({"sera": {}}),
                      prompts_per_epoch=epoch * BATCH, batch_size=BATCH,
                      prompts=fingerprint(frame["prompt"]))
    folder = work / "ckpt" / f"global_step_{GPU_STEPS}"
    why = planner.loads_from(folder)
    check(checks, "history_saved", why is None,
          why or f"{folder.name}/sera_history.json resumes a planner on the same parquet")
    return checks
