"""vLLM rollouts on this machine, in one run (needs vLLM: `make bench` runs it in .venv-vllm).

1. SERA's uneven counts against uniform counts at the same budget: one vLLM call with one
   SamplingParams(n=N_q) per prompt either way. Limit: SERA's throughput at least 0.95x uniform's.
2. vLLM against the batched transformers engine on the same tiny model and budget.

Every response runs to --max-new-tokens (no stop token), so each setting produces the same number of
tokens and throughput is tokens per second of wall time; each setting is timed --repeats times,
alternating, and the median is reported.

Usage: VLLM_CPU_KVCACHE_SPACE=1 python benchmarks/vllm_speed.py [--prompts 64] [--n0 8]
"""

import argparse
import os
import tempfile
import time

import numpy as np
import torch

import sera
from sera import models
from sera.tasks import math as task_math
from sera.trainers.engines import Sampling, TransformersEngine, VLLMEngine


def tiny_model(folder, width: int, layers: int):
    train, _ = task_math.generated_splits(256, 8, seed=0)
    tokenizer = task_math.build_tokenizer(list(train["question"]) + list(train["answer"]),
                                          folder=folder)
    torch.manual_seed(0)
    model = models.decoder(len(tokenizer), width, layers, width // 32, 1, 256,
                           pad_token_id=tokenizer.pad_token_id,
                           eos_token_id=tokenizer.eos_token_id)
    model.save_pretrained(folder)
    prompts = [tokenizer(q + task_math.INSTRUCTION, add_special_tokens=False)["input_ids"]
               for q in train["question"]]
    return model, prompts


def timed(engine, prompts, counts, sampling, seed):
    start = time.perf_counter()
    out = engine.generate(prompts, counts, sampling, seed)
    seconds = time.perf_counter() - start
    assert len(out) == sum(counts)
    return sum(len(r) for r in out), seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n0", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    folder = tempfile.mkdtemp(prefix="sera-vllm-bench-")
    model, prompts = tiny_model(folder, args.width, args.layers)
    prompts = prompts[:args.prompts]
    budget = args.prompts * args.n0
    p = np.random.default_rng(0).beta(0.6, 1.2, args.prompts)
    counts = {"uniform": np.full(args.prompts, args.n0),
              "sera": sera.allocate(p, budget, n_min=2, n_max=8 * args.n0).counts}
    sampling = Sampling(args.max_new_tokens, stop_token_id=None, pad_token_id=0)
    vllm = VLLMEngine(folder, dtype="float32", seed=0)
    vllm.sync(model)
    engines = {"vllm": vllm, "transformers": TransformersEngine(model)}
    for engine in engines.values():
        engine.generate(prompts[:2], [2, 2], sampling, seed=0)  # warm up

    times = {}
    for repeat in range(args.repeats):
        for name in ("uniform", "sera"):
            times.setdefault(("vllm", name), []).append(
                timed(vllm, prompts, counts[name], sampling, seed=repeat))
        times.setdefault(("transformers", "uniform"), []).append(
            timed(engines["transformers"], prompts, counts["uniform"], sampling, seed=repeat))
    rate = {}
    for (engine, name), runs in times.items():
        tokens = runs[0][0]
        seconds = float(np.median([s for _, s in runs]))
        rate[engine, name] = tokens / seconds
        print(f"{engine:12s} {name:8s} counts (max {counts[name].max():3d}, min "
              f"{counts[name].min()}): {tokens} tokens in {seconds:6.2f} s (median of "
              f"{len(runs)}): {tokens / seconds:8.0f} tokens/s")
    ratio = rate["vllm", "sera"] / rate["vllm", "uniform"]
    versus = rate["vllm", "uniform"] / rate["transformers", "uniform"]
    print(f"threads={torch.get_num_threads()} model "
          f"{sum(q.numel() for q in model.parameters()):,} parameters, budget {budget}")
    print(f"SERA counts / uniform counts throughput (vLLM): {ratio:.3f}x (limit 0.95x)")
    print(f"vLLM / transformers engine throughput (uniform counts): {versus:.2f}x")


if __name__ == "__main__":
    main()
