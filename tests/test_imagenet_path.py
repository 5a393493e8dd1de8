"""The ImageNet path on the CPU: the ImageFolder loader and ResNet-50 from scratch train a few steps
of the exact-likelihood study on a tiny generated image folder.

torchvision's wheels are built against CUDA torch and fail to import beside the CPU torch of the
main environment, where this file skips. `make test-vision` (part of `make test`) sets up
.venv-vision with torch 2.14.1 and torchvision 0.29.1, CUDA builds that also run on a CPU, and runs
it there with SERA_REQUIRE_VISION=1, where a missing torchvision is an error, not a skip.
"""

import os

import numpy as np
import pandas as pd
import pytest

if os.environ.get("SERA_REQUIRE_VISION"):
    import torchvision  # noqa: F401
else:
    pytest.importorskip("torchvision", reason="torchvision runs in .venv-vision (make test-vision)")

from PIL import Image  # noqa: E402

from sera.trainers import classification as trainer  # noqa: E402


def _image_folder(root, classes=("cat", "dog", "owl"), per_class=(4, 2)):
    rng = np.random.default_rng(0)
    for split, count in zip(("train", "val"), per_class, strict=True):
        for name in classes:
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (48, 40, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


def test_resnet50_trains_on_an_image_folder(tmp_path):
    root = _image_folder(tmp_path / "images")
    config = trainer.ClassificationConfig(
        method="sera-oracle", data="imagefolder", data_path=str(root), n0=4, batch_size=4,
        steps=3, eval_every=2, cosine_every=2, checkpoint_every=2, device="cpu", progress=False,
        out=str(tmp_path / "run"))
    study = trainer.ClassificationStudy(config)
    assert type(study.model).__name__ == "ResNet" and study.n_prompts == 12
    results = trainer.train(config)
    metrics = results.metrics
    assert {"cosine", "expected_cosine", "val_pass", "pass", "allocated"} <= set(metrics["metric"])
    assert np.isfinite(metrics["value"]).all()
    final = pd.read_csv(tmp_path / "run" / "final.csv")
    assert len(final) == 6 and final["p"].between(0, 1).all()
    # the last batch of the epoch holds the remaining 4 of 12 images: nothing is skipped
    steps = results.allocations.groupby("step")["prompt"].count().tolist()
    assert steps == [4, 4, 4]
