"""Difficulty profiles: each training prompt's success probability under a study's starting model.

The simulator (`sera.studies.simulate`) starts from these; the confirmation points measure
their own (`sera.studies.confirm`). Reading them needs pandas only; measuring needs the trainers
and torch, imported when a profile is measured.

    python -m sera.simulate --profiles    # data/difficulty_profiles.csv, a few minutes
"""

from __future__ import annotations

import dataclasses
import tempfile

import numpy as np
import pandas as pd

from sera import runstore

PROFILES_FILE = runstore.DATA_DIR / "difficulty_profiles.csv"


def load_profiles(path=PROFILES_FILE) -> dict[str, np.ndarray]:
    """The stored difficulty profiles: study name -> each training prompt's success probability
    under the study's starting model."""
    table = pd.read_csv(path, comment="#")
    return {name: part["p"].to_numpy() for name, part in table.groupby("study", sort=False)}


def measure_profiles(samples: int = 32, out=PROFILES_FILE, progress: bool = True) -> pd.DataFrame:
    """Each training prompt's success probability under the starting model of the three CPU
    studies (their `fast` presets): digits (the untrained CNN, exact p), mazes and math (the
    supervised warm-up, estimated from `samples` rollouts per prompt at the training
    temperature). Written to `out` with a provenance header."""
    import platform
    import time

    import torch

    from sera.trainers import classification
    from sera.trainers.presets import builder, sequence_tasks

    start = time.time()
    parts = []
    with tempfile.TemporaryDirectory() as folder:
        study = classification.ClassificationStudy(dataclasses.replace(
            classification.PRESETS["fast"], out=f"{folder}/digits", device="cpu"))
        parts.append(pd.DataFrame({"study": "digits", "prompt": np.arange(study.n_prompts),
                                   "p": study.exact_p(np.arange(study.n_prompts)),
                                   "samples": np.nan}))
        for name, task in sequence_tasks().items():  # every registered sequence task
            config = dataclasses.replace(task.presets["fast"], out=f"{folder}/{name}",
                                         device="cpu", progress=progress)
            p = measure_profile(config, builder(name), samples)
            parts.append(pd.DataFrame({"study": name, "prompt": np.arange(p.size),
                                       "p": p, "samples": samples}))
    table = pd.concat(parts, ignore_index=True)
    header = (f"# Difficulty profiles: each training prompt's success probability under the "
              f"starting model of the `fast` presets (python -m sera.simulate --profiles). "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
              f"{platform.machine()}, {time.time() - start:.0f} s, "
              f"{time.strftime('%Y-%m-%d')}\n")
    runstore.write_text(out, header + table.to_csv(index=False))
    return table


def measure_profile(config, build, samples: int = 32) -> np.ndarray:
    """Each training prompt's success probability under a sequence study's starting model (its
    warm-up, trained first if missing), estimated from `samples` rollouts per prompt at the
    training temperature. `build` is the task module's (e.g. sera.trainers.math.build)."""
    study = build(config)
    prompts = study.task.train_prompts
    counts = np.full(len(prompts), samples)
    responses = study.engine.generate(prompts, counts, study.training, seed=0)
    owner = np.repeat(np.arange(len(prompts)), samples)
    rewards = np.array([study.task.reward("train", int(q), r)
                        for q, r in zip(owner, responses, strict=True)])
    return np.bincount(owner, rewards, len(prompts)) / samples
