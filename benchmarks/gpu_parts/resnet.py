"""The exact-likelihood classification study on a GPU: ResNet-50 on a generated ImageFolder."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpu_parts.common import fit_to_deadline, loop_checks, memory, part
from sera import timing


@part("resnet", budget=80.0)
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
    clock = timing.Clock()
    with clock:
        study = classification.ClassificationStudy(config)
        run, steps = fit_to_deadline(study, budget, clock)
    summary = steps.summary()
    images = batch / summary["step_s_median"]
    return {"setting": f"ResNet-50 from scratch, {classes} classes x {per_class} generated "
                       f"images, {batch} images x N0 = {n0} label rollouts a step, "
                       f"{'float32' if cpu else 'bf16 autocast'}", **summary, **memory(),
            "throughput": f"{images:.0f} images/s, {images * n0:.0f} rollouts/s",
            "checks": loop_checks(run, study.n_prompts, batch)}
