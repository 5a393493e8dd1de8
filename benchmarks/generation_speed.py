"""Rollout generation on this machine: the batched transformers engine (all rollouts of a batch
in a few generate calls, KV cache, each distinct prompt run once and its cache shared by its
rollouts) against the same engine running every rollout's prompt again, and against one generate
call per rollout, in one run.

Usage: python benchmarks/generation_speed.py [--prompts 16] [--n0 8]
Prints tokens per second of each, the speed-up of sharing the prompts' cache, and the batched
speed-up over one call per rollout (limit: at least 5x).
"""

import argparse
import time

import torch

from sera import models
from sera.tasks.maze import VOCAB, MazeTask
from sera.trainers.engines import Sampling, SingleRolloutEngine, TransformersEngine


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n0", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    task = MazeTask(9, args.prompts, 4)
    torch.manual_seed(0)
    model = models.decoder(len(VOCAB), 64, 2, 4, 2,
                           len(task.train_prompts[0]) + args.max_new_tokens + 8)
    sampling = Sampling(args.max_new_tokens, stop_token_id=task.stop_token_id,
                        pad_token_id=task.pad_token_id)
    prompts = task.train_prompts[:args.prompts]
    counts = [args.n0] * len(prompts)
    results = {}
    for name, engine in (("batched", TransformersEngine(model)),
                         ("batched, prompt per rollout", TransformersEngine(model,
                                                                            share_prompts=False)),
                         ("one call per rollout", SingleRolloutEngine(model))):
        engine.generate(prompts[:1], [1], sampling, seed=0)  # warm up
        start = time.perf_counter()
        out = engine.generate(prompts, counts, sampling, seed=1)
        seconds = time.perf_counter() - start
        tokens = sum(len(r) for r in out)
        results[name] = seconds
        print(f"{name:28s} {len(out)} rollouts, {tokens} tokens in {seconds:6.2f} s: "
              f"{tokens / seconds:8.0f} tokens/s")
    speedup = results["one call per rollout"] / results["batched"]
    shared = results["batched, prompt per rollout"] / results["batched"]
    print(f"threads={torch.get_num_threads()} model {sum(p.numel() for p in model.parameters()):,} "
          f"parameters; sharing each prompt's cache {shared:.2f}x; batched speed-up "
          f"{speedup:.1f}x (limit 5x)")


if __name__ == "__main__":
    main()
