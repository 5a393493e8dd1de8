"""The math trainer on a CPU scale: the generated set, the tiny decoder, every method, a user's
model folder and GSM8K-format files, the command line, and (in .venv-vllm) vLLM rollouts."""

import dataclasses
import json
import os

import numpy as np
import pandas as pd
import pytest

from sera.tasks import math as task_math
from sera.trainers import math as trainer
from sera.trainers import sequence, token_loss


def _tiny(tmp_path, **changes):
    base = trainer.MathConfig(
        n_train=16, n_val=6, width=64, heads=2, kv_heads=1, steps=4, batch_size=8, n0=2,
        max_new_tokens=16, eval_every=2, eval_samples=2, val_k=(1, 2), final_samples=4,
        warmup_steps=4, warmup_batch=8, checkpoint_every=2, progress=False,
        out=str(tmp_path / "run"), warmup_dir=str(tmp_path / "warmup"))
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize("method, agg", [("maxrl", "token-mean"), ("sera", "seqnorm"),
                                         ("grpo", "token-mean"), ("knapsack-maxrl", "seqnorm")])
def test_methods_train_on_the_generated_set(method, agg, tmp_path):
    config = _tiny(tmp_path, method=method, agg=agg)
    results = sequence.train(config, trainer.build)
    metrics, final = results.metrics, results.final
    assert set(metrics["method"]) == {method} and set(metrics["agg"]) == {agg}
    assert final["correct"].between(0, 4).all() and len(final) == 6
    passes = metrics[metrics["metric"] == "pass"].set_index("k")["value"]
    assert list(passes.index) == [1, 2, 4] and passes.is_monotonic_increasing
    steps = results.allocations.groupby("step")["rollouts"].sum()
    assert (steps == 8 * 2).all()  # the budget is spent exactly every step
    assert (tmp_path / "run" / "model" / "tokenizer.json").exists()


def test_a_larger_final_set_changes_only_the_final_evaluation(tmp_path):
    # n_final: the run trains and evaluates during training exactly as without it, then its
    # final Pass@K reads more held-out prompts (the first ones the usual held-out set)
    plain = sequence.train(_tiny(tmp_path, out=str(tmp_path / "plain")), trainer.build)
    wider = sequence.train(_tiny(tmp_path, n_final=20, out=str(tmp_path / "wider")),
                           trainer.build)
    before = [m[m["metric"] != "pass"].reset_index(drop=True)
              for m in (plain.metrics, wider.metrics)]
    pd.testing.assert_frame_equal(*before)
    assert len(plain.final) == 6 and list(wider.final["prompt"]) == list(range(20))
    assert wider.final["correct"].between(0, 4).all()
    for bad in ({"n_final": 5}, {"n_final": 20, "data": "t.jsonl", "val_data": "v.jsonl"}):
        with pytest.raises(ValueError, match="n_final"):
            _tiny(tmp_path, **bad)


def test_sera_allocates_after_the_first_epoch(tmp_path):
    results = sequence.train(_tiny(tmp_path, method="sera", steps=6), trainer.build)
    allocated = results.allocations.groupby("step")["allocated"].first()
    assert not allocated.loc[:1].any() and allocated.loc[2:].all()  # epoch: steps 0 and 1


def test_killed_run_resumes_to_the_same_table(tmp_path):
    config = _tiny(tmp_path, method="sera", steps=5)
    whole = sequence.train(dataclasses.replace(config, out=str(tmp_path / "whole")), trainer.build)

    def kill(run):
        if run.step == 3:
            raise KeyboardInterrupt

    killed = dataclasses.replace(config, out=str(tmp_path / "killed"))
    with pytest.raises(KeyboardInterrupt):
        sequence.train(killed, trainer.build, callback=kill)
    resumed = sequence.train(killed, trainer.build)
    pd.testing.assert_frame_equal(resumed.metrics, whole.metrics)
    pd.testing.assert_frame_equal(resumed.final, whole.final)


def test_a_users_model_and_gsm8k_files(tmp_path):
    """A local model folder (the tiny warm-up saved as a user would have it) trained on GSM8K-
    format files, with the prompts through its chat template."""
    first = sequence.train(_tiny(tmp_path, method="maxrl", steps=1), trainer.build)
    folder = tmp_path / "run" / "model"
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %} Answer:{% endif %}")
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    train, val = task_math.generated_splits(12, 4, seed=5)
    config = _tiny(tmp_path / "user", model=str(folder),
                   data=str(task_math.write_jsonl(train, tmp_path / "train.jsonl")),
                   val_data=str(task_math.write_jsonl(val, tmp_path / "test.jsonl")),
                   method="grpo", steps=2)
    study = trainer.build(config)
    assert study.task.tokenizer.decode(study.task.train_prompts[0]).endswith("{}. Answer:")
    results = sequence.train(config, trainer.build)
    assert len(results.final) == 4
    assert first.final is not None


def test_missing_model_and_data_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="huggingface-cli download .*SmolLM2"):
        trainer.build(_tiny(tmp_path, model=str(tmp_path / "nowhere")))
    with pytest.raises(ValueError, match="both --data and --val-data"):
        _tiny(tmp_path, data="train.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        trainer.build(_tiny(tmp_path, data=str(tmp_path / "nope.jsonl"),
                            val_data=str(tmp_path / "nope.jsonl")))


def test_paper_presets_say_what_the_paper_ran():
    smol = trainer.PRESETS["smollm2-gsm8k"]
    assert (smol.batch_size, smol.n0, smol.lr, smol.max_new_tokens) == (256, 128, 1e-5, 2048)
    assert (smol.steps, smol.final_samples, smol.eval_temperature) == (2000, 256, 0.6)
    assert (smol.engine, smol.dtype, smol.warmup_steps) == ("vllm", "bfloat16", 0)
    for name, steps in (("qwen2.5-math-1.5b", 600), ("qwen3-4b-base", 1000)):
        preset = trainer.PRESETS[name]
        assert (preset.steps, preset.final_samples, preset.eval_temperature,
                preset.eval_top_p, preset.agg) == (steps, 512, 0.6, 0.95, "token-mean")


def test_token_sized_micro_batches():
    parts = token_loss.micro_batches([5, 5, 5, 20, 1, 1], sequences=4, tokens=12)
    assert parts == [slice(0, 2), slice(2, 3), slice(3, 4), slice(4, 6)]
    assert token_loss.micro_batches([3] * 10, sequences=4) == [slice(0, 4), slice(4, 8),
                                                             slice(8, 10)]


def test_command_line(tmp_path, capsys):
    config = _tiny(tmp_path)
    flags = ["--n-train", "16", "--n-val", "6", "--width", "64", "--heads", "2", "--kv-heads",
             "1", "--steps", "2", "--batch-size", "8", "--n0", "2", "--max-new-tokens", "16",
             "--eval-every", "2", "--eval-samples", "2", "--val-k", "1", "2",
             "--final-samples", "4", "--warmup-steps", "2", "--warmup-batch", "8",
             "--method", "maxrl", "--no-progress", "--out", config.out]
    assert sequence.main(trainer.MathConfig, trainer.PRESETS, trainer.build, flags) == 0
    assert "maxrl token-mean seed=0: pass@1" in capsys.readouterr().out
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["n_train"] == 16 and saved["engine"] == "transformers"


def _vllm():
    if os.environ.get("SERA_REQUIRE_VLLM"):
        import vllm  # noqa: F401
    else:
        pytest.importorskip("vllm", reason="vLLM runs in .venv-vllm (make test-vllm)")


def test_training_with_vllm_rollouts(tmp_path):
    """The trainer with engine vllm: vLLM samples, the model trains, and the weights go back to
    vLLM after every step (its log-probs then match the model's)."""
    _vllm()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    config = _tiny(tmp_path, engine="vllm", method="sera", steps=4)
    study = trainer.build(config)
    from sera.trainers import loop

    results = loop.fit(study)
    assert (results.allocations.groupby("step")["rollouts"].sum() == 16).all()
    prompts = study.task.val_prompts[:2]
    responses, logprobs = study.engine.generate_with_logprobs(prompts, [3, 3],
                                                              study.training, seed=9)
    owner = np.repeat([0, 1], 3)
    import torch

    with torch.no_grad():
        chosen, _, _ = token_loss.token_logprobs(study.model, [prompts[o] for o in owner],
                                               responses, pad_token_id=study.task.pad_token_id)
    for j, o in enumerate(owner):
        start = len(prompts[o]) - 1
        ours = chosen[j, start:start + len(logprobs[j])].numpy()
        assert np.abs(ours - np.array(logprobs[j])).max() < 1e-5


def test_the_safeguard_leaves_problems_out_and_the_run_goes_on(tmp_path):
    config = _tiny(tmp_path, method="sera", steps=8)
    config = dataclasses.replace(config, allocator=dataclasses.replace(config.allocator,
                                                                       u_min=0.3))
    allocations = sequence.train(config, trainer.build).allocations
    assert (allocations["rollouts"] == 0).any()  # some problems got no rollouts
    assert (allocations.groupby("step")["rollouts"].sum() == 8 * 2).all()


@pytest.mark.parametrize("preset", ["fast", "long"])
def test_the_command_line_and_a_notebook_build_the_same_configuration(preset):
    # notebook 07 runs dataclasses.replace(PRESETS[profile], method=..., agg=..., seed=...)
    from sera.trainers import cli

    argv = ["--preset", preset, "--method", "grpo", "--agg", "seqnorm", "--seed", "3"]
    parsed = cli.parse(trainer.MathConfig, trainer.PRESETS, argv)
    notebook = dataclasses.replace(trainer.PRESETS[preset], method="grpo", agg="seqnorm", seed=3)
    assert parsed == notebook
