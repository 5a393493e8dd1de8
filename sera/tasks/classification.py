"""Classification as one-step RL: a rollout is a class label sampled from the model's softmax.

Data sources behind one interface (`load_data`): scikit-learn's bundled digits (the default, no
download), a local CIFAR-10/100 folder in its standard python format, and a torchvision
ImageFolder tree (how to point the study at a local ImageNet). The models live in sera.models.
Used by sera.trainers.classification and notebooks/04_gradient_cosine_study.ipynb.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

SOURCES = ("digits", "cifar", "imagefolder")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm"}


@dataclass
class ClassificationData:
    """Train and validation datasets whose items are (image tensor, label)."""

    train: Dataset
    val: Dataset
    n_classes: int
    in_channels: int
    name: str


def load_data(source: str = "digits", path: str | None = None, val_fraction: float = 0.2,
              split_seed: int = 0) -> ClassificationData:
    """Load a data source by name. digits needs no path; cifar and imagefolder need one."""
    if source == "digits":
        return _digits(val_fraction, split_seed)
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if path is None:
        raise ValueError(f"source {source!r} needs a path to a local copy of the data")
    root = Path(path).expanduser()
    if not root.exists():
        raise ValueError(f"path {str(root)!r} does not exist")
    if not root.is_dir():
        raise ValueError(f"path {str(root)!r} is not a folder")
    return _cifar(root) if source == "cifar" else _image_folder(root)


def _digits(val_fraction: float, split_seed: int) -> ClassificationData:
    """scikit-learn's 1,797 8x8 digits (shipped with the package), scaled to [0, 1]; the split
    is fixed by split_seed so every run of a study shares one validation set."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    images = torch.tensor(images / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    labels = torch.tensor(labels, dtype=torch.long)
    order = np.random.default_rng(split_seed).permutation(len(labels))
    n_val = int(round(val_fraction * len(labels)))
    val, train = order[:n_val], order[n_val:]
    return ClassificationData(TensorDataset(images[train], labels[train]),
                              TensorDataset(images[val], labels[val]), 10, 1, "digits")


def _read_pickle(file: Path) -> dict:
    with open(file, "rb") as handle:
        return pickle.load(handle, encoding="bytes")


def _cifar(root: Path) -> ClassificationData:
    """CIFAR-10 (data_batch_1..5, test_batch) or CIFAR-100 (train, test), python format, as
    unpacked from the official archives; the folder itself or its cifar-*-batches-py child."""
    for candidate in (root, root / "cifar-10-batches-py", root / "cifar-100-python"):
        if (candidate / "data_batch_1").exists() and (candidate / "test_batch").exists():
            train_files = sorted(candidate.glob("data_batch_[0-9]*"))
            val_files, label_key, n_classes = [candidate / "test_batch"], b"labels", 10
            break
        if (candidate / "train").is_file() and (candidate / "test").is_file():
            train_files, val_files = [candidate / "train"], [candidate / "test"]
            label_key, n_classes = b"fine_labels", 100
            break
    else:
        raise ValueError(f"{str(root)!r} is not a CIFAR folder in python format: expected "
                         "data_batch_1..5 and test_batch (CIFAR-10) or train and test "
                         "(CIFAR-100), as in cifar-10-batches-py/")

    def read(files):
        parts = [_read_pickle(f) for f in files]
        images = np.concatenate([np.asarray(d[b"data"], dtype=np.uint8) for d in parts])
        labels = np.concatenate([np.asarray(d[label_key], dtype=np.int64) for d in parts])
        if images.ndim != 2 or images.shape[1] != 3072:
            raise ValueError(f"CIFAR files in {str(root)!r} hold arrays of shape {images.shape}, "
                             "expected (N, 3072)")
        pixels = torch.tensor(images, dtype=torch.float32).reshape(-1, 3, 32, 32) / 255.0
        return TensorDataset((pixels - 0.5) / 0.25, torch.tensor(labels))

    return ClassificationData(read(train_files), read(val_files), n_classes, 3, "cifar")


def check_image_folder(root: Path) -> None:
    """An ImageFolder tree: root/train/<class>/<image> and root/val/<class>/<image>."""
    for split in ("train", "val"):
        folder = root / split
        if not folder.is_dir():
            raise ValueError(f"{str(root)!r} is not an ImageFolder tree: missing {split}/ "
                             "(expected train/<class>/<image> and val/<class>/<image>)")
        classes = [d for d in folder.iterdir() if d.is_dir()]
        if len(classes) < 2:
            raise ValueError(f"{str(folder)!r} holds {len(classes)} class folder(s); need >= 2")
        empty = [d.name for d in classes
                 if not any(f.suffix.lower() in IMAGE_SUFFIXES for f in d.iterdir())]
        if empty:
            raise ValueError(f"class folders without images in {str(folder)!r}: {empty[:5]}")


def _image_folder(root: Path) -> ClassificationData:
    check_image_folder(root)
    try:
        from torchvision import datasets, transforms
    except ImportError as exc:  # torchvision comes with a CUDA torch; see the README
        raise ImportError("the imagefolder source needs torchvision "
                          "(pip install torchvision matching your torch)") from exc
    normalize = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    train = datasets.ImageFolder(root / "train", transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), normalize]))
    val = datasets.ImageFolder(root / "val", transforms.Compose([
        transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(), normalize]))
    return ClassificationData(train, val, len(train.classes), 3, "imagefolder")


def hold_out(data: ClassificationData, fraction: float, seed: int = 0) -> tuple[
        ClassificationData, Dataset]:
    """(data whose training set lost `fraction` of its images, those images): a tuning split
    apart from the validation images, fixed by seed so that every run of a sweep shares it."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    order = np.random.default_rng(seed).permutation(len(data.train))
    n_tune = int(round(fraction * order.size))
    tune, train = np.sort(order[:n_tune]), np.sort(order[n_tune:])
    return (dataclasses.replace(data, train=torch.utils.data.Subset(data.train, train)),
            torch.utils.data.Subset(data.train, tune))


def fetch(dataset: Dataset, indices) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and labels at these indices, stacked (TensorDatasets are sliced directly)."""
    if isinstance(dataset, torch.utils.data.Subset) and isinstance(dataset.dataset,
                                                                   TensorDataset):
        return fetch(dataset.dataset, np.asarray(dataset.indices)[np.asarray(indices)])
    if isinstance(dataset, TensorDataset):
        index = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        return dataset.tensors[0][index], dataset.tensors[1][index]
    items = [dataset[int(i)] for i in indices]
    return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])
