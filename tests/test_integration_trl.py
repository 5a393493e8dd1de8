"""The TRL plug-in (sera.integrations.trl): a tiny decoder trains SERA steps end to end on a CPU
through TRL 1.16's GRPOTrainer, with the counts, the advantages and the history checked.

Runs in .venv-scale (`make test-integrations`, SERA_REQUIRE_INTEGRATIONS=1: a missing TRL is an
error there); skips in the main environment.
"""

import os

import numpy as np
import pytest
import torch

if not os.environ.get("SERA_REQUIRE_INTEGRATIONS"):
    pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig  # noqa: E402

import sera  # noqa: E402
from sera.integrations import gsm8k  # noqa: E402
from sera.integrations import trl as plugin  # noqa: E402
from sera.models import decoder  # noqa: E402
from sera.tasks.math import build_tokenizer  # noqa: E402
from sera.trainers.config import AllocatorConfig  # noqa: E402

LEVELS = [0.05, 0.2, 0.5, 0.9, 0.3, 0.7, 0.1, 0.6]  # each prompt's success probability


def _bernoulli_reward():
    rng = np.random.default_rng(0)

    def level_reward(completions, level, **_):
        return [float(rng.random() < p) for p in level]

    return level_reward


def _trainer(tmp_path, steps: int, **overrides):
    prompts = [f"Question {i}: what is {i} plus {i}?" for i in range(len(LEVELS))]
    tokenizer = build_tokenizer(prompts + ["The answer is 0123456789."], vocab_size=300)
    torch.manual_seed(0)
    model = decoder(len(tokenizer), width=32, layers=1, heads=2, kv_heads=1, max_positions=64,
                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=6, max_steps=steps,
                      learning_rate=1e-3, use_cpu=True, report_to="none", logging_steps=1,
                      save_steps=4, seed=0, loss_type="dr_grpo", beta=0.0,
                      disable_tqdm=True, **overrides)
    data = Dataset.from_dict({"prompt": prompts, "level": LEVELS})
    return plugin.SeraGRPOTrainer(model=model, reward_funcs=_bernoulli_reward(), args=args,
                                  train_dataset=data, processing_class=tokenizer,
                                  allocator=AllocatorConfig(n_min=2, n_max=6))


def test_sera_trains_through_trls_grpo_trainer(tmp_path):
    trainer = _trainer(tmp_path, steps=8)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    log = list(trainer.sera_log)
    assert len(log) == 8  # one generation batch per step: 2 prompts x 4 rollouts
    reference = sera.SuccessHistory(len(LEVELS))
    for i, entry in enumerate(log):
        ids, counts = entry["ids"], entry["counts"]
        assert counts.sum() == 8 and (counts >= 2).all() and (counts <= 6).all()
        # Counts: the first pass is uniform (no estimates yet), later ones the allocator's plan.
        p_hat, ready = reference.estimate(ids)
        if i < 4:
            assert entry["fallback"] and (counts == 4).all()
        else:
            assert ready.all() and not entry["fallback"]
            np.testing.assert_array_equal(counts, sera.allocate(p_hat, 8, n_min=2, n_max=6,
                                                                n0=4).counts)
        # Advantages: MaxRL over each prompt's own group times n0 / N_q.
        expected = sera.maxrl_advantages(entry["rewards"], sizes=counts) * np.repeat(4 / counts,
                                                                                    counts)
        np.testing.assert_allclose(entry["advantages"], expected)
        reference.record(np.repeat(ids, counts), entry["rewards"])
        if (i + 1) % 4 == 0:
            reference.end_epoch()
    assert any(len(set(e["counts"])) > 1 for e in log[4:]), "SERA never left uniform counts"
    np.testing.assert_allclose(trainer.sera_history.successes, reference.successes)
    assert trainer.sera_history.epoch == 2
    after = trainer.model.parameters()
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and np.isfinite(losses).all()
    assert (tmp_path / "out" / "checkpoint-4" / plugin.HISTORY_FILE).exists()


def test_resume_restores_the_history_from_the_checkpoint(tmp_path):
    first = _trainer(tmp_path, steps=4)
    first.train()
    saved = first.sera_history.state_dict()
    again = _trainer(tmp_path, steps=5)
    again.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-4"))
    assert len(again.sera_log) == 1 and not again.sera_log[0]["fallback"]
    p_hat = (saved["successes"] + 1) / (saved["successes"] + saved["failures"] + 2)
    ids = again.sera_log[0]["ids"]
    np.testing.assert_array_equal(again.sera_log[0]["counts"],
                                  sera.allocate(p_hat[ids], 8, n_min=2, n_max=6, n0=4).counts)


def test_unsupported_settings_are_refused_clearly(tmp_path):
    with pytest.raises(ValueError, match="colocate"):
        _trainer(tmp_path, steps=1, use_vllm=True, vllm_mode="server")
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                      num_generations=4, use_cpu=True, report_to="none")
    with pytest.raises(ValueError, match="map-style"):
        plugin.SeraGRPOTrainer(model=None, reward_funcs=[], args=args, train_dataset=None)


def test_gsm8k_reward_in_trls_call_form():
    completions = ["so \\boxed{12}", [{"role": "assistant", "content": "It is 7."}], "\\boxed{3}"]
    assert gsm8k.trl_reward(completions, answer=["12", "7", "4"]) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="same length"):
        gsm8k.success_rewards(["1"], ["1", "2"])
