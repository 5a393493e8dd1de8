"""A tiny SeraGRPOTrainer run, and (launched as a script) SERA's global plan checked on two CPU
processes: `accelerate launch --cpu --num_processes 2 tests/trl_two_processes.py OUT`.

tests/test_integration_trl.py builds its trainers with `make_trainer` and launches this file.
Each process prints `SERA two processes OK rank R` once every check has passed.
"""

import hashlib
import json
import os
import sys

import numpy as np
import torch
from datasets import Dataset
from trl import GRPOConfig

import sera
from sera.integrations import trl as plugin
from sera.models import decoder
from sera.tasks.math import build_tokenizer
from sera.trainers.config import AllocatorConfig

LEVELS = [0.05, 0.2, 0.5, 0.9, 0.3, 0.7, 0.1, 0.6, 0.4, 0.8]  # each prompt's success probability


def level_reward(seed: int = 0):
    """A reward function that succeeds with the prompt's level (a `level` column)."""
    rng = np.random.default_rng(seed)

    def reward(completions, level, **_):
        return [float(rng.random() < p) for p in level]

    return reward


def make_trainer(out, steps: int, levels=LEVELS[:8], reward=None, allocator=None,
                 config_class=GRPOConfig, order=None, **overrides):
    """SeraGRPOTrainer on a one-layer decoder over len(levels) prompts, 4 rollouts per prompt
    (n_min 2, n_max 6); `overrides` go to GRPOConfig. `order`: the prompts' order in the
    training set (a permutation of their indices; default as listed)."""
    prompts = [f"Question {i}: what is {i} plus {i}?" for i in range(len(levels))]
    tokenizer = build_tokenizer(prompts + ["The answer is 0123456789."], vocab_size=300)
    torch.manual_seed(0)
    model = decoder(len(tokenizer), width=32, layers=1, heads=2, kv_heads=1, max_positions=64,
                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    settings = dict(output_dir=str(out), per_device_train_batch_size=8, num_generations=4,
                    max_completion_length=6, max_steps=steps, learning_rate=1e-3, use_cpu=True,
                    report_to="none", logging_steps=1, save_steps=4, seed=0, loss_type="dr_grpo",
                    beta=0.0, disable_tqdm=True)
    args = config_class(**{**settings, **overrides})
    order = range(len(levels)) if order is None else order
    data = Dataset.from_dict({"prompt": [prompts[i] for i in order],
                              "level": [levels[i] for i in order]})
    return plugin.SeraGRPOTrainer(model=model, reward_funcs=reward or level_reward(), args=args,
                                  train_dataset=data, processing_class=tokenizer,
                                  allocator=allocator if allocator is not None or
                                  config_class is not GRPOConfig else
                                  AllocatorConfig(n_min=2, n_max=6))


def replay(log, n_prompts: int, per_epoch: int, n0: int = 4) -> sera.SuccessHistory:
    """Check every logged plan against sera.allocate over a replayed history; return it."""
    reference = sera.SuccessHistory(n_prompts)
    for i, entry in enumerate(log):
        ids, counts = entry["ids"], entry["counts"]
        assert counts.sum() == ids.size * n0 and len(set(ids.tolist())) == ids.size
        p_hat, ready = reference.estimate(ids)
        if ready.all():
            expected = sera.allocate(p_hat, ids.size * n0, n_min=2, n_max=6, n0=n0).counts
            np.testing.assert_array_equal(counts, expected)
            assert not entry["fallback"]
        else:
            assert entry["fallback"] and (counts == n0).all()
        rewards = entry["rewards"]
        scored = ~np.isnan(rewards)
        reference.record(np.repeat(ids, counts)[scored], rewards[scored])
        if (i + 1) * ids.size % per_epoch == 0:
            reference.end_epoch()
    return reference


def _digest(trainer) -> str:
    return hashlib.sha256(json.dumps(trainer.sera_planner.state_dict(),
                                     sort_keys=True).encode()).hexdigest()


def main(out: str) -> None:
    from accelerate.utils import gather_object

    seed = int(os.environ.get("RANK", 0))  # each process draws its own rewards

    # 5 prompts per generation batch (20 rows, 10 per process): a group straddles the processes.
    # 10 prompts: an epoch is 2 generation batches; each batch serves 2 optimizer steps.
    def build(steps):
        return make_trainer(out, steps, levels=LEVELS, per_device_train_batch_size=5,
                            steps_per_generation=2, reward=level_reward(seed))

    trainer = build(8)
    assert trainer.accelerator.num_processes == 2
    rank = trainer.accelerator.process_index
    trainer.train()
    log = list(trainer.sera_log)
    assert len(log) == 4, len(log)
    reference = replay(log, len(LEVELS), per_epoch=10)
    assert trainer.sera_history.epoch == reference.epoch == 2
    np.testing.assert_allclose(trainer.sera_history.successes, reference.successes)
    assert any(len(set(e["counts"].tolist())) > 1 for e in log[2:]), "SERA stayed uniform"
    assert any(10 not in np.cumsum(e["counts"]).tolist() for e in log), "no group straddled"
    # Each process generated its slice of the global layout, prompt by prompt.
    last = log[-1]
    rows = np.repeat(last["ids"], last["counts"])
    assert list(trainer._logs["prompt"])[-20:] == [f"Question {r}: what is {r} plus {r}?"
                                                   for r in rows]
    # TRL's completions table logs SERA's advantages, over both processes' rows.
    np.testing.assert_allclose(list(trainer._logs["advantages"])[-20:], log[-1]["advantages"])
    # Both processes hold the same plans and the same history.
    plans = gather_object([[(e["ids"].tolist(), e["counts"].tolist()) for e in log]])
    assert plans[0] == plans[1]
    assert len(set(gather_object([_digest(trainer)]))) == 1

    # Resume on both processes from the checkpoint the main process wrote at step 4 (after the
    # first epoch): the next batch is planned from the saved history.
    # transformers loads the optimizer with map_location=args.device, "cpu:0" on CPU processes,
    # which torch.load cannot place (a CPU-only quirk; "cuda:0" works): read it as "cpu".
    load = torch.load
    torch.load = lambda *a, map_location=None, **k: load(
        *a, map_location="cpu" if str(map_location).startswith("cpu") else map_location, **k)
    saved = json.loads(open(f"{out}/checkpoint-4/{plugin.HISTORY_FILE}").read())["history"]
    again = build(6)
    again.train(resume_from_checkpoint=f"{out}/checkpoint-4")
    first = again.sera_log[0]
    assert not first["fallback"]
    s, f = np.array(saved["successes"]), np.array(saved["failures"])
    p_hat = ((s + 1) / (s + f + 2))[first["ids"]]
    np.testing.assert_array_equal(first["counts"],
                                  sera.allocate(p_hat, 20, n_min=2, n_max=6, n0=4).counts)
    assert len(set(gather_object([_digest(again)]))) == 1
    print(f"SERA two processes OK rank {rank}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
