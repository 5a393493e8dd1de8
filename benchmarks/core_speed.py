"""One core's speed on the work `make figures` does, so that a time taken on one machine can be
read on another: a fixed training step of the maze study's decoder and of the digits study's CNN,
timed alone on one torch thread (the notebooks' kernels run with one each).

Usage: python benchmarks/core_speed.py [--steps 30]

Prints each step's median time and steps a second, torch's CPU capability and numpy's SIMD
dispatch. Under `machine.avx2_limits()` (benchmarks/two_commands.py --avx2 sets them) it times the
AVX2 code a laptop runs. Run it alone: anything else on the cores is in the numbers.
"""

import argparse
import os
import time

import numpy as np
import torch

from sera.models import SmallCNN, decoder
from sera.teaching.machine import simd_level
from sera.trainers.presets import MazeConfig


def median_step(model: torch.nn.Module, batch, steps: int) -> float:
    """Median seconds of a forward, a backward and an AdamW step on batch, after 3 warm-ups."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for i in range(steps + 3):
        start = time.perf_counter()
        loss = batch(model)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= 3:
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def decoder_step(steps: int) -> tuple[str, float]:
    config = MazeConfig()  # the fast profile's model: 64 wide, 2 layers
    model = decoder(vocab_size=32, width=config.width, layers=config.layers,
                    heads=config.heads, kv_heads=config.kv_heads, max_positions=256)
    tokens = torch.randint(1, 32, (64, 96), generator=torch.Generator().manual_seed(0))
    seconds = median_step(model, lambda m: m(input_ids=tokens, labels=tokens).loss, steps)
    return f"maze decoder ({config.width} wide, {config.layers} layers), 64 x 96 tokens", seconds


def cnn_step(steps: int) -> tuple[str, float]:
    images = torch.randn(256, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(256) % 10
    seconds = median_step(SmallCNN(10), lambda m: torch.nn.functional.cross_entropy(
        m(images), labels), steps)
    return "digits CNN, 256 images of 8 x 8", seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print(f"one torch thread; torch {torch.__version__} capability "
          f"{torch.backends.cpu.get_cpu_capability()}, numpy {np.__version__} dispatch "
          f"{simd_level()}; "
          f"MKL_ENABLE_INSTRUCTIONS={os.environ.get('MKL_ENABLE_INSTRUCTIONS', '(unset)')}, "
          f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}")
    total = 0.0
    for what, seconds in (decoder_step(args.steps), cnn_step(args.steps)):
        total += seconds
        print(f"  {what:52s} {1000 * seconds:7.1f} ms a step, {1 / seconds:6.1f} steps/s")
    print(f"per-core speed: {1 / total:.2f} (one step of each a second)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
