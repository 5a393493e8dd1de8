"""Model builders for the studies, in one place: classifiers and small decoders. Imports torch.

- `classifier(name, n_classes, in_channels)`: a small CNN for the CPU, or ResNet-50 from scratch
  (torchvision) for ImageNet-style folders;
- `decoder(vocab_size, width, layers, heads, kv_heads, max_positions)`: a Qwen2-style causal LM
  (transformers), saved and loaded like any Hugging Face checkpoint.
"""

from __future__ import annotations

import torch
from torch import nn

CLASSIFIERS = ("small-cnn", "resnet50")


class SmallCNN(nn.Module):
    """Two 3x3 convolutions and a linear head: fast on a CPU for 8x8 or 32x32 images. No batch
    statistics, so one forward per image equals one forward per rollout (see rollouts)."""

    def __init__(self, n_classes: int, in_channels: int = 1, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.head = nn.Linear(8 * width, n_classes)

    def forward(self, x):
        return self.head(self.features(x))


def classifier(name: str, n_classes: int, in_channels: int) -> nn.Module:
    """'small-cnn' or 'resnet50' (torchvision's, from scratch, for 3-channel images)."""
    if name == "small-cnn":
        return SmallCNN(n_classes, in_channels)
    if name == "resnet50":
        try:
            from torchvision.models import resnet50
        except ImportError as exc:
            raise ImportError("model 'resnet50' needs torchvision built for your torch; see the "
                              "README (GPU: pip install torchvision matching your CUDA torch)"
                              ) from exc
        if in_channels != 3:
            raise ValueError(f"resnet50 takes 3-channel images, got {in_channels} channel(s)")
        return resnet50(weights=None, num_classes=n_classes)
    raise ValueError(f"model must be one of {CLASSIFIERS}, got {name!r}")


def decoder(vocab_size: int, width: int, layers: int, heads: int, kv_heads: int,
            max_positions: int, pad_token_id: int = 0, bos_token_id: int | None = None,
            eos_token_id: int | None = None):
    """A Qwen2-style decoder with tied embeddings and an MLP of 3 x width."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=width, intermediate_size=3 * width,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id)
    return Qwen2ForCausalLM(config)


def load_decoder(folder):
    """A saved causal LM (any transformers architecture) from a local folder."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(folder)


def device(name: str = "auto") -> torch.device:
    """cpu, cuda or auto (cuda when available)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
