"""The TRL plug-in (sera.integrations.trl): a tiny decoder trains SERA steps end to end on a CPU
through TRL 1.16's GRPOTrainer, with the counts, the advantages and the history checked.

Runs in .venv-scale (`make test-integrations`, SERA_REQUIRE_INTEGRATIONS=1: a missing TRL is an
error there); skips in the main environment.
"""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

if not os.environ.get("SERA_REQUIRE_INTEGRATIONS"):
    pytest.importorskip("trl")

from trl import GRPOConfig  # noqa: E402
from trl_two_processes import level_reward as _level_reward  # noqa: E402
from trl_two_processes import make_trainer, replay  # noqa: E402

import sera  # noqa: E402
from sera.integrations import gsm8k  # noqa: E402
from sera.integrations import trl as plugin  # noqa: E402
from sera.methods import U_MIN  # noqa: E402
from sera.tasks.math import INSTRUCTION  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_sera_trains_through_trls_grpo_trainer(tmp_path):
    trainer = make_trainer(tmp_path / "out", steps=8)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    log = list(trainer.sera_log)
    assert len(log) == 8  # one generation batch per step: 2 prompts x 4 rollouts
    # Counts: the first pass is uniform (no estimates yet), later ones the allocator's plan
    # over a replayed history that folds every 4 batches (8 prompts, 2 per batch).
    reference = replay(log, 8, per_epoch=8)
    assert [e["fallback"] for e in log] == [True] * 4 + [False] * 4
    for entry in log:
        counts = entry["counts"]
        assert (counts >= 2).all() and (counts <= 6).all()
        # Advantages: MaxRL over each prompt's own group times n0 / N_q.
        expected = sera.maxrl_advantages(entry["rewards"], sizes=counts) * np.repeat(4 / counts,
                                                                                    counts)
        np.testing.assert_allclose(entry["advantages"], expected)
    assert any(len(set(e["counts"])) > 1 for e in log[4:]), "SERA never left uniform counts"
    np.testing.assert_allclose(trainer.sera_history.successes, reference.successes)
    assert trainer.sera_history.epoch == 2
    # TRL's completions table shows SERA's advantages, not its own grouped ones.
    np.testing.assert_allclose(list(trainer._logs["advantages"]), log[-1]["advantages"])
    after = trainer.model.parameters()
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and np.isfinite(losses).all()
    assert (tmp_path / "out" / "checkpoint-4" / plugin.HISTORY_FILE).exists()


def test_the_history_folds_at_the_loaders_epoch_not_after_len_dataset_prompts(tmp_path):
    """10 prompts, 4 per generation batch: TRL's sampler drops the last 2 each epoch, so an
    epoch is 2 batches (8 prompts), and the history folds after each of them."""
    levels = [0.5] * 10
    trainer = make_trainer(tmp_path / "out", steps=6, levels=levels,
                           per_device_train_batch_size=16, save_steps=100)
    assert trainer.sera_planner.prompts_per_epoch == 8
    trainer.train()
    assert trainer.sera_history.epoch == 3
    replay(list(trainer.sera_log), 10, per_epoch=8)


def test_unscored_completions_are_left_out_not_counted_as_failures(tmp_path):
    """A completion no reward function can score (None, NaN in TRL) gets advantage 0 and stays
    out of its group's mean and of the history, as TRL leaves it out of its baselines."""
    score = _level_reward()

    def sometimes_unscored(completions, level, **kwargs):
        rewards = score(completions, level, **kwargs)
        return [None if i % 3 == 0 else r for i, r in enumerate(rewards)]

    trainer = make_trainer(tmp_path / "out", steps=8, reward=sometimes_unscored, save_steps=100)
    trainer.train()
    log = list(trainer.sera_log)
    for entry in log:
        rewards, counts = entry["rewards"], entry["counts"]
        unscored = np.isnan(rewards)
        assert unscored.any()
        assert (entry["advantages"][unscored] == 0).all()
        np.testing.assert_allclose(entry["advantages"], plugin.weighted_maxrl(rewards, counts, 4))
    reference = replay(log, 8, per_epoch=8)
    np.testing.assert_allclose(trainer.sera_history.successes, reference.successes)
    np.testing.assert_allclose(trainer.sera_history.failures, reference.failures)
    # Against a history that counted them as failures, the estimates differ.
    trials = sum(np.bincount(np.repeat(e["ids"], e["counts"]), minlength=8) for e in log[:4])
    scored = sum(np.bincount(np.repeat(e["ids"], e["counts"])[~np.isnan(e["rewards"])],
                             minlength=8) for e in log[:4])
    assert (scored < trials).any()


def test_weighted_maxrl_over_scored_responses():
    rewards = np.array([1.0, 0.0, np.nan, 1.0, 0.0, 0.0, np.nan, np.nan])
    counts = np.array([3, 3, 2])
    got = plugin.weighted_maxrl(rewards, counts, n0=4)
    # Prompt 0: scored [1, 0] (mean 1/2), weight 4/2; prompt 1: [1, 0, 0] (mean 1/3), 4/3;
    # prompt 2: nothing scored.
    expected = [2 * 1.0, 2 * -1.0, 0, 4 / 3 * 2.0, 4 / 3 * -1.0, 4 / 3 * -1.0, 0, 0]
    np.testing.assert_allclose(got, expected)


def test_two_processes_plan_once_over_the_global_batch(tmp_path):
    """accelerate launch, two CPU processes (gloo): one plan over both processes' prompts, equal
    to sera.allocate over a replayed history; the same history on both; a group straddling the
    processes; resume on both (tests/trl_two_processes.py holds the checks)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = Path(__file__).with_name("trl_two_processes.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu",
         "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
         "--dynamo_backend", "no", "--num_cpu_threads_per_process", "1",
         "--main_process_port", str(port), str(script), str(tmp_path / "out")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    for rank in (0, 1):
        assert f"SERA two processes OK rank {rank}" in run.stdout, output[-6000:]


def test_resume_restores_the_history_from_the_checkpoint(tmp_path):
    first = make_trainer(tmp_path / "out", steps=4)
    first.train()
    saved = first.sera_history.state_dict()
    again = make_trainer(tmp_path / "out", steps=5)
    again.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-4"))
    assert len(again.sera_log) == 1 and not again.sera_log[0]["fallback"]
    p_hat = (saved["successes"] + 1) / (saved["successes"] + saved["failures"] + 2)
    ids = again.sera_log[0]["ids"]
    np.testing.assert_array_equal(again.sera_log[0]["counts"],
                                  sera.allocate(p_hat[ids], 8, n_min=2, n_max=6, n0=4,
                                                u_min=U_MIN).counts)
    assert again.sera_history.epoch == 1 and again.sera_planner.planned == 2


def _gsm8k_and_tiny_model(folder: Path) -> tuple[Path, Path]:
    """A GSM8K-shaped training file of 8 questions and a one-layer chat model for it."""
    from sera.tasks.math import tiny_chat_model

    rows = [{"question": f"What is {i} plus {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}
            for i in range(8)]
    data = folder / "train.jsonl"
    pd.DataFrame(rows).to_json(data, orient="records", lines=True)
    model = folder / "tiny-model"
    texts = [r["question"] + INSTRUCTION for r in rows] + ["The answer is 0123456789."]
    tiny_chat_model(texts, model, max_positions=128)
    return data, model


def test_the_readme_trl_snippet_trains_on_the_cpu(tmp_path, monkeypatch):
    """The README's TRL snippet as written, with only a tiny model, a GSM8K-shaped file and CPU
    arguments (use_cpu, max_steps, a short completion) put in: batch sizes divide, and each
    process's generation batch holds 4 prompts for SERA to reallocate."""
    from test_readme import needs_a_framework, python_snippets

    snippet = next(s for s in python_snippets() if needs_a_framework(s) and "SeraGRPOTrainer" in s)
    data, folder = _gsm8k_and_tiny_model(tmp_path)
    edits = {'"/models/SmolLM2-360M-Instruct"': repr(str(folder)),
             '"/data/gsm8k/train.jsonl"': repr(str(data)),
             "GRPOConfig(": "GRPOConfig(use_cpu=True, max_steps=12, max_completion_length=8, "}
    for old, new in edits.items():
        assert snippet.count(old) == 1, old
        snippet = snippet.replace(old, new)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    assert namespace["dataset"]["answer"] == [str(2 * i) for i in range(8)]
    log = list(namespace["trainer"].sera_log)
    assert len(log) == 3 and all(e["ids"].size == 4 and e["counts"].sum() == 64 for e in log)
    # One generation batch serves steps_per_generation = 4 steps; 8 prompts: an epoch is 2 batches.
    assert [e["fallback"] for e in log] == [True, True, False]


CPU_FLAGS = ["--use_cpu", "true", "--use_vllm", "false", "--bf16", "false",
             "--gradient_checkpointing", "false", "--num_generations", "4",
             "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
             "--max_completion_length", "8", "--save_steps", "2", "--sera_n_max", "6"]
"""What examples/trl/gsm8k.py needs on a CPU with a tiny model, beside the paths and max_steps."""


def test_the_trl_example_trains_checkpoints_and_resumes_on_the_cpu(tmp_path):
    """The docs' `accelerate launch ... examples/trl/gsm8k.py` command: its script and flags as
    written, with local paths of a tiny model and file, and CPU_FLAGS added."""
    import shlex

    from test_readme import pages_text

    data, model = _gsm8k_and_tiny_model(tmp_path)
    out = tmp_path / "run"
    block = re.search(r"```bash\n(accelerate launch [^`]*examples/trl/gsm8k\.py.*?)```",
                      pages_text(), re.S).group(1)
    words = shlex.split(block.replace("\\\n", " "))
    script = words.index("examples/trl/gsm8k.py")
    paths = {"/models/SmolLM2-360M-Instruct": str(model), "/data/gsm8k/train.jsonl": str(data),
             "/ckpt/smollm2-sera-trl": str(out)}
    assert set(paths) <= set(words[script + 1:])
    command = [sys.executable, str(ROOT / words[script]),
               *(paths.get(w, w) for w in words[script + 1:]), *CPU_FLAGS]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    first = subprocess.run([*command, "--max_steps", "2"], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert plugin.last_complete_checkpoint(out) == str(out / "checkpoint-2")
    saved = torch.load(out / "checkpoint-2" / "training_args.bin", weights_only=False)
    assert type(saved).__name__ == "SeraGRPOConfig" and saved.sera_n_max == 6
    assert (saved.learning_rate, saved.loss_type, saved.beta) == (1e-5, "dapo", 0.0)  # the paper's
    # Started again (another seed, which a new run would sample differently with), it resumes:
    # steps 1-2 in its log are checkpoint-2's, and it goes on to step 4.
    again = subprocess.run([*command, "--max_steps", "4", "--seed", "1"], capture_output=True,
                           text=True, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    before = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and state["log_history"][:2] == before["log_history"][:2]
    assert (out / "checkpoint-4" / plugin.HISTORY_FILE).exists()
    assert (out / "config.json").exists()  # the final model


@pytest.mark.parametrize("setting, match", [
    (dict(use_vllm=True, vllm_mode="server"), "colocate"),
    (dict(beta=0.04), r"beta = 0.04 adds TRL's KL term .* n0 / N_q"),
    (dict(entropy_coef=0.01), r"entropy_coef = 0.01 .* entropy bonus"),
    (dict(use_adaptive_entropy=True), r"use_adaptive_entropy = True"),
    (dict(multi_objective_aggregation="normalize_then_sum"), r"no success indicator in \[0, 1\]"),
])
def test_settings_that_break_the_weighting_are_refused_by_name(tmp_path, setting, match):
    with pytest.raises(ValueError, match=match):
        make_trainer(tmp_path, steps=1, **setting)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                      use_cpu=True, report_to="none", **setting)
    with pytest.raises(ValueError, match=match):  # positional args are checked as well
        plugin.SeraGRPOTrainer(None, [], args, None)


def test_grpo_trainers_positional_order_is_accepted_and_moot_settings_are_logged(tmp_path,
                                                                                caplog):
    keywords = make_trainer(tmp_path / "a", steps=1)
    caplog.clear()
    with caplog.at_level("WARNING", logger=plugin.__name__):
        positional = plugin.SeraGRPOTrainer(keywords.model, keywords.reward_funcs, keywords.args,
                                            keywords.train_dataset, None,
                                            keywords.processing_class,
                                            allocator=keywords.sera_allocator)
    assert len(positional.train_dataset) == 8 and positional.sera_planner.n_prompts == 8
    assert [r.getMessage() for r in caplog.records].count(
        "scale_rewards = 'group' has no effect under SeraGRPOTrainer: SERA replaces TRL's "
        "advantages by MaxRL's (which sets their scale) times n0 / N_q") == 1


def test_the_logged_zero_std_share_is_over_seras_groups(tmp_path):
    assert plugin.zero_std_share(np.array([1, 1, 0, 1, 0, 0, 0, 1.0]), np.array([2, 4, 0, 2])) \
        == pytest.approx(1 / 3)  # groups [1, 1], [0, 1, 0, 0] and [0, 1]
    # One scored response has no spread: [nan, 1] counts, [0, 1] does not.
    assert plugin.zero_std_share(np.array([np.nan, 1, 0, 1.0]), np.array([2, 2])) == 0.5
    trainer = make_trainer(tmp_path / "out", steps=8, save_steps=100)
    trainer.train()
    logged = [h["frac_reward_zero_std"] for h in trainer.state.log_history
              if "frac_reward_zero_std" in h]
    expected = [plugin.zero_std_share(e["rewards"], e["counts"]) for e in trainer.sera_log]
    np.testing.assert_allclose(logged, expected)


def test_unsupported_settings_are_refused_clearly(tmp_path):
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                      num_generations=4, use_cpu=True, report_to="none")
    with pytest.raises(ValueError, match="map-style"):
        plugin.SeraGRPOTrainer(model=None, reward_funcs=[], args=args, train_dataset=None)


def test_gsm8k_reward_in_trls_call_form():
    completions = ["so \\boxed{12}", [{"role": "assistant", "content": "It is 7."}], "\\boxed{3}"]
    assert gsm8k.trl_reward(completions, answer=["12", "7", "4"]) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="same length"):
        gsm8k.success_rewards(["1"], ["1", "2"])


def _position_reward(completions, level, sera_row, **_):
    """A reward that depends on the prompt and the response's place in its group, not on the
    sampled text: plans and histories then repeat exactly, run after run."""
    rewards, place = [], 0
    for i, row in enumerate(sera_row):
        place = place + 1 if i and sera_row[i - 1] == row else 0
        rewards.append(float((0.37 * place + 0.11 * row) % 1 < level[i]))
    return rewards


# (per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation,
#  num_iterations): every one leaves checkpoints inside a generation batch at save_steps=1.
RESUME_MATRIX = [(8, 1, 2, 1), (8, 1, 1, 2), (4, 2, 2, 2), (4, 2, 4, 1), (4, 1, 4, 1)]


@pytest.mark.parametrize("batch, accumulation, per_generation, iterations", RESUME_MATRIX)
def test_resume_inside_a_generation_replans_and_rerecords_nothing(tmp_path, batch, accumulation,
                                                                  per_generation, iterations):
    """Resumed from a checkpoint inside a generation batch, the run ends with the uninterrupted
    run's history bit for bit: the batch in progress is generated again with its saved counts
    (not replanned, not recorded twice) and every later batch is planned as before."""
    settings = dict(steps=12, levels=[0.05, 0.5, 0.9, 0.3], reward=_position_reward, save_steps=1,
                    per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
                    steps_per_generation=per_generation, num_iterations=iterations)
    whole = make_trainer(tmp_path / "whole", **settings)
    whole.train()
    plans = [(e["ids"].tolist(), e["counts"].tolist()) for e in whole.sera_log]
    assert not any(e["replayed"] for e in whole.sera_log)
    assert any(len(set(counts)) > 1 for _, counts in plans), "SERA never left uniform counts"
    micro_steps = per_generation * iterations  # per generation batch
    inside = [s for s in range(1, 12) if s * accumulation % micro_steps]
    assert inside, "the configuration leaves no checkpoint inside a generation batch"
    for step in (inside[0], inside[-1]):
        resumed = make_trainer(tmp_path / f"resumed-{step}", **settings)
        resumed.train(resume_from_checkpoint=str(tmp_path / "whole" / f"checkpoint-{step}"))
        log = list(resumed.sera_log)
        generation = step * accumulation // micro_steps
        assert log[0]["replayed"] and not any(e["replayed"] for e in log[1:])
        assert [(e["ids"].tolist(), e["counts"].tolist()) for e in log] == plans[generation:]
        # Later batches are generated at the uninterrupted run's steps, not shifted by the resume.
        assert [e["step"] for e in log[1:]] == [e["step"] for e in whole.sera_log][generation + 1:]
        assert resumed.sera_planner.state_dict() == whole.sera_planner.state_dict(), step


# The steps of transformers' Trainer._save_checkpoint, in order; a crash is raised at each.
SAVE_STEPS = ["save_model", "_save_optimizer_and_scheduler", "_save_rng_state"]


@pytest.mark.parametrize("crash_at", [*SAVE_STEPS, "rotate_checkpoints"])
def test_a_crash_inside_a_save_leaves_a_checkpoint_that_resumes(tmp_path, monkeypatch, crash_at):
    """The run dies inside its second save (save_total_limit=1): the first checkpoint is still
    there and whole, the half-written one is passed over by resume_from_checkpoint=True and
    refused by name, and the resumed run ends with the uninterrupted run's history."""
    import transformers.trainer as hf

    settings = dict(steps=8, levels=[0.05, 0.5, 0.9, 0.3], reward=_position_reward,
                    save_total_limit=1)
    whole = make_trainer(tmp_path / "whole", **settings)
    whole.train()
    crashed = make_trainer(tmp_path / "out", **settings)
    target = hf if crash_at == "rotate_checkpoints" else type(crashed).__mro__[1]
    original = getattr(target, crash_at)

    def dies(*args, **kwargs):
        if crashed.state.global_step == 8:
            raise KeyboardInterrupt(f"killed inside {crash_at}")
        return original(*args, **kwargs)

    monkeypatch.setattr(target, crash_at, dies)
    with pytest.raises(KeyboardInterrupt):
        crashed.train()
    monkeypatch.undo()
    out = tmp_path / "out"
    assert (out / "checkpoint-4" / "trainer_state.json").exists()
    assert (out / "checkpoint-4" / plugin.HISTORY_FILE).exists()
    assert (out / "checkpoint-8" / plugin.HISTORY_FILE).exists()  # written first
    complete = crash_at == "rotate_checkpoints"  # everything but the clean-up was written
    assert plugin.last_complete_checkpoint(out) == str(out / f"checkpoint-{8 if complete else 4}")
    if not complete:
        with pytest.raises(ValueError, match="checkpoint-8 has no trainer_state.json.*"
                                             "resume from .*checkpoint-4"):
            make_trainer(out, **settings).train(resume_from_checkpoint=str(out / "checkpoint-8"))
    resumed = make_trainer(out, **settings)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.sera_planner.state_dict() == whole.sera_planner.state_dict()


def test_a_history_saved_with_other_settings_or_broken_is_refused_with_its_path(tmp_path):
    first = make_trainer(tmp_path / "out", steps=4)
    first.train()
    checkpoint = tmp_path / "out" / "checkpoint-4"
    history = checkpoint / plugin.HISTORY_FILE
    with pytest.raises(ValueError, match=r"sera_history.json: .*n0 = 4.*this run has n0 = 2"):
        make_trainer(tmp_path / "other", steps=5, num_generations=2).train(
            resume_from_checkpoint=str(checkpoint))
    saved = history.read_text()
    for broken, match in (("{not json", "is not a SERA history .not JSON"),
                          ('{"history": {}}', "lacks n0, planned")):
        history.write_text(broken)
        with pytest.raises(ValueError, match=f"{history}.*{match}"):
            make_trainer(tmp_path / "out", steps=5).train(resume_from_checkpoint=str(checkpoint))
    history.write_text(saved)


def test_a_custom_rollout_function_and_fewer_generations_than_n_min_are_refused(tmp_path):
    from sera.trainers.config import AllocatorConfig

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                      use_cpu=True, report_to="none", beta=0.0)
    with pytest.raises(ValueError, match=r"rollout_func: .*prompts\[::num_generations\]"):
        plugin.SeraGRPOTrainer(model=None, reward_funcs=[], args=args,
                               rollout_func=lambda prompts, trainer: {})
    with pytest.raises(ValueError, match=r"num_generations = 4 is SERA's n0.*n_min = 6"):
        make_trainer(tmp_path, steps=1, allocator=AllocatorConfig(n_min=6, n_max=8))


def test_the_allocator_comes_from_sera_grpo_config_through_trls_parser(tmp_path):
    from trl import TrlParser

    from sera.trainers.config import AllocatorConfig

    (config,) = TrlParser([plugin.SeraGRPOConfig]).parse_args_into_dataclasses([
        "--output_dir", str(tmp_path / "out"), "--sera_n_min", "3", "--sera_n_max", "6",
        "--sera_u_min", "0.0", "--sera_history_rule", "rate", "--per_device_train_batch_size",
        "8", "--num_generations", "4", "--max_steps", "1", "--use_cpu", "--report_to", "none",
        "--beta", "0.0"])
    expected = AllocatorConfig(n_min=3, n_max=6, u_min=0.0, history_rule="rate")
    assert config.sera_allocator() == expected
    assert config.to_dict()["sera_n_min"] == 3  # saved with the run's arguments
    trainer = make_trainer(tmp_path / "run", steps=1, allocator=None, sera_n_min=3, sera_n_max=6,
                           sera_u_min=0.0, sera_history_rule="rate",
                           config_class=plugin.SeraGRPOConfig)
    assert trainer.sera_allocator == expected
    with pytest.raises(ValueError, match="n_min must be >= 2"):
        plugin.SeraGRPOConfig(output_dir=str(tmp_path), sera_n_min=1, use_cpu=True)
    with pytest.raises(ValueError, match="allocator= and SeraGRPOConfig's sera_"):
        make_trainer(tmp_path / "both", steps=1, allocator=AllocatorConfig(n_min=2, n_max=6),
                     sera_n_min=3, config_class=plugin.SeraGRPOConfig)


def test_the_plan_metrics_reach_trls_logs_under_the_keys_verl_uses(tmp_path):
    from sera.integrations.planner import METRICS, TIMING_METRICS

    trainer = make_trainer(tmp_path / "out", steps=2)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "sera/count_max" in entry]
    assert logged and set(METRICS) | {"sera/unscored"} <= set(logged[-1])
    assert logged[-1]["sera/count_max"] == trainer.sera_log[-1]["counts"].max()
    # the second step's plan closes the first whole step: its planning time and share
    assert set(TIMING_METRICS) <= set(logged[-1]) and 0 < logged[-1]["sera/planning_share"] < 1


def test_a_prompt_the_selection_leaves_out_is_planned_again_next_epoch(tmp_path):
    """Rows that never and always succeed, with a history that says so (0 of 400, 400 of 400):
    the paper's selection leaves some of them out (count 0; with n_max 6 at least 6 of the 8
    prompts keep the budget of 32), and each later epoch (one step of all 8 prompts) plans them
    again and trains on (before, the planner still held them as pending and refused the rows)."""
    levels = [0.0, 1.0, 0.5, 0.3, 0.0, 0.6, 0.4, 1.0]
    trainer = make_trainer(tmp_path / "out", steps=3, levels=levels,
                           per_device_train_batch_size=32)
    trainer.sera_history.record_groups(np.arange(8), [0, 400, 10, 6, 0, 12, 8, 400],
                                       [400, 400, 20, 20, 400, 20, 20, 400])
    trainer.sera_history.end_epoch()
    trainer.train()
    log = list(trainer.sera_log)
    assert len(log) == 3 and trainer.sera_history.epoch == 4  # an epoch folded per step
    assert (log[0]["counts"] == 0).sum() == 2
    left_out = {int(i) for e in log for i, n in zip(e["ids"], e["counts"], strict=True) if n == 0}
    assert left_out <= {0, 1, 4, 7}  # the rows that never or always succeed
    assert all(sorted(e["ids"].tolist()) == list(range(8)) for e in log)
    assert not trainer.sera_planner.pending


def test_resume_falls_back_past_a_checkpoint_whose_history_is_cut_short(tmp_path, caplog):
    """The newest checkpoint's sera_history.json was truncated (a copy tool, a full disk):
    resume_from_checkpoint=True takes the older whole checkpoint, says which it passed over and
    why, and ends with the uninterrupted run's history."""
    settings = dict(steps=8, levels=[0.05, 0.5, 0.9, 0.3], reward=_position_reward)
    whole = make_trainer(tmp_path / "whole", **settings)
    whole.train()
    out = tmp_path / "out"
    make_trainer(out, **settings).train()
    history = out / "checkpoint-8" / plugin.HISTORY_FILE
    history.write_text(history.read_text()[:200])
    with caplog.at_level("WARNING", logger=plugin.__name__):
        resumed = make_trainer(out, **settings)
        resumed.train(resume_from_checkpoint=True)
    said = caplog.text
    assert f"resuming from {out / 'checkpoint-4'}, not from the newer {out / 'checkpoint-8'}" \
        in said and "is not a SERA history" in said
    assert resumed.sera_planner.state_dict() == whole.sera_planner.state_dict()
    history.write_text(history.read_text()[:200])  # the resumed run wrote it whole again
    (out / "checkpoint-4" / plugin.HISTORY_FILE).write_text("{}")
    with pytest.raises(ValueError, match=r"no checkpoint in .*\n.*checkpoint-8: .*not a "
                                         r"SERA history.*\n.*checkpoint-4: .*lacks"):
        plugin.last_complete_checkpoint(out, resumed.sera_planner)


@pytest.mark.parametrize("argument, value, named", [
    ("--sera_history_rule", "x", r"sera_history_rule must be one of \('rate', 'counts'\)"),
    ("--sera_history_gamma", "7", r"sera_history_gamma must lie in \[0.0, 1.0\], got 7"),
    ("--sera_history_weight", "0", r"sera_history_weight must lie in \(0.0, inf\]"),
    ("--sera_rounding", "nearest", r"sera_rounding must be one of"),
])
def test_a_bad_sera_option_stops_trls_parser_before_any_model_loads(tmp_path, argument, value,
                                                                     named):
    from trl import TrlParser

    with pytest.raises(ValueError, match=named):
        TrlParser([plugin.SeraGRPOConfig]).parse_args_into_dataclasses([
            "--output_dir", str(tmp_path), "--use_cpu", "--report_to", "none", argument, value])


def test_every_history_option_is_a_sera_field_and_reaches_the_allocator(tmp_path):
    import dataclasses

    from trl import TrlParser

    from sera.trainers.config import AllocatorConfig

    fields = {f.name for f in dataclasses.fields(AllocatorConfig)}
    assert {f"sera_{name}" for name in fields} <= {f.name for f in
                                                   dataclasses.fields(plugin.SeraGRPOConfig)}
    (config,) = TrlParser([plugin.SeraGRPOConfig]).parse_args_into_dataclasses([
        "--output_dir", str(tmp_path), "--use_cpu", "--report_to", "none",
        "--sera_history_prior", "2", "3", "--sera_history_gamma", "0.8"])
    assert config.sera_allocator() == AllocatorConfig(history_prior=(2.0, 3.0),
                                                      history_gamma=0.8)


def test_a_history_resumes_only_on_its_training_prompts_in_their_order(tmp_path):
    """The same prompts in another order: row r is another prompt, so the saved history would
    steer each prompt by another one's record. Resuming is refused, naming the file and both
    fingerprints."""
    from sera.integrations.planner import fingerprint

    make_trainer(tmp_path / "out", steps=4).train()
    history = tmp_path / "out" / "checkpoint-4" / plugin.HISTORY_FILE
    prompts = [f"Question {i}: what is {i} plus {i}?" for i in range(8)]
    saved, now = fingerprint(prompts), fingerprint(prompts[::-1])
    reordered = make_trainer(tmp_path / "out", steps=5, order=range(7, -1, -1))
    with pytest.raises(ValueError, match=rf"{re.escape(str(history))}: .*fingerprint {saved}, "
                                         rf"this run's are {now}"):
        reordered.train(resume_from_checkpoint=str(history.parent))
    assert json.loads(history.read_text())["prompts"] == saved


def test_a_changed_batch_size_is_refused_on_resume_and_by_resume_true(tmp_path):
    """Resumed with per_device_train_batch_size 4 (one prompt per generation batch) from a run
    with 8 (two prompts): the data loader's position and the history's epoch would no longer
    agree, and prompts would be planned twice in one history epoch. Refused, naming the saved
    setting; resume_from_checkpoint=True falls back to no older checkpoint and does not start
    anew: it says why each checkpoint cannot resume this run."""
    out = tmp_path / "out"
    make_trainer(out, steps=4, save_steps=2).train()
    history = out / "checkpoint-4" / plugin.HISTORY_FILE
    saved = history.read_text()
    named = r"2 prompts per generation batch, this run has 1.*per_device_train_batch_size"
    with pytest.raises(ValueError, match=rf"{re.escape(str(history))}: .*{named}"):
        make_trainer(out, steps=6, save_steps=2, per_device_train_batch_size=4).train(
            resume_from_checkpoint=str(history.parent))
    smaller = make_trainer(out, steps=6, save_steps=2, per_device_train_batch_size=4)
    with pytest.raises(ValueError, match=rf"no checkpoint in {re.escape(str(out))} resumes this "
                                         rf"run.*\n.*checkpoint-4: .*{named}.*\n"
                                         rf".*checkpoint-2: .*{named}"):
        smaller.train(resume_from_checkpoint=True)
    assert not smaller.sera_log and history.read_text() == saved
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


def test_a_changed_step_layout_with_the_same_prompts_per_batch_is_refused(tmp_path):
    """generation_batch_size held at 16 rows (4 prompts) while per_device_train_batch_size goes
    from 8 to 4 (after running out of memory, say): steps_per_generation doubles, the prompts
    per generation batch stay, and transformers' resumed data position (global_step batches of
    the loader) falls one generation batch behind what the history recorded. Refused, naming
    the settings; the history file is untouched."""
    out = tmp_path / "out"
    make_trainer(out, steps=4, save_steps=4, generation_batch_size=16).train()
    history = out / "checkpoint-4" / plugin.HISTORY_FILE
    saved = history.read_text()
    again = make_trainer(out, steps=8, save_steps=4, generation_batch_size=16,
                         per_device_train_batch_size=4)
    with pytest.raises(ValueError, match=rf"{re.escape(str(history))}: the history has planned 8 "
                                         rf"prompts, but this run resumes after 1 generation "
                                         rf"batches of 4.*steps_per_generation 4"):
        again.train(resume_from_checkpoint=str(history.parent))
    assert history.read_text() == saved and not again.sera_log


@pytest.mark.parametrize("flags, named", [
    (["--sera_n_max", "3"], r"sera_n_max = 3 is below num_generations = 4"),
    (["--sera_n_min", "6", "--sera_n_max", "8"], r"num_generations = 4 is below sera_n_min = 6"),
])
def test_bounds_that_cannot_spend_num_generations_stop_trls_parser(tmp_path, flags, named):
    """Every plan spends num_generations (n0) rollouts per prompt on average, the first ones
    exactly: sera_n_max below it or sera_n_min above it admit no plan. The parser refuses
    them with the fields' TRL names, before any model loads; the trainer refuses an
    AllocatorConfig beside a plain GRPOConfig the same way."""
    from trl import TrlParser

    from sera.trainers.config import AllocatorConfig

    parser = TrlParser([plugin.SeraGRPOConfig])
    common = ["--output_dir", str(tmp_path), "--use_cpu", "--report_to", "none",
              "--per_device_train_batch_size", "8", "--num_generations", "4"]
    with pytest.raises(ValueError, match=named):
        parser.parse_args_into_dataclasses([*common, *flags])
    (config,) = parser.parse_args_into_dataclasses([*common, "--sera_n_max", "4"])
    assert config.sera_allocator().n_max == 4  # n_max = num_generations: uniform plans only
    with pytest.raises(ValueError, match=r"num_generations = 4 is SERA's n0.*n_max = 3 is below"):
        make_trainer(tmp_path, steps=1, allocator=AllocatorConfig(n_min=2, n_max=3))


def test_a_cut_short_file_in_the_newest_checkpoint_is_passed_over(tmp_path, caplog):
    """optimizer.pt or model.safetensors cut to half its bytes (a copy, a full disk) in the newest
    checkpoint, whose trainer_state.json is there: resume falls back to the older checkpoint and
    says which file it found cut short; with no older one it refuses naming the file."""
    out = tmp_path / "out"
    make_trainer(out, steps=8).train()
    newest, older = out / "checkpoint-8", out / "checkpoint-4"
    planner = make_trainer(tmp_path / "other", steps=8).sera_planner
    for name in ("optimizer.pt", "model.safetensors"):
        path = newest / name
        whole = path.read_bytes()
        path.write_bytes(whole[:len(whole) // 2])
        caplog.clear()
        with caplog.at_level("WARNING", logger=plugin.__name__):
            assert plugin.last_complete_checkpoint(out) == str(older)
            assert plugin.last_complete_checkpoint(out, planner) == str(older)
        assert f"resuming from {older}, not from the newer {newest}: {path} is cut short" \
            in caplog.text
        with pytest.raises(ValueError, match=rf"{re.escape(str(path))} is cut short.*resume "
                                             rf"from {re.escape(str(older))}"):
            make_trainer(out, steps=8).train(resume_from_checkpoint=str(newest))
        path.write_bytes(whole)
    assert plugin.last_complete_checkpoint(out) == str(newest)
    optimizer = newest / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    import shutil

    shutil.rmtree(older)
    with pytest.raises(ValueError, match=rf"no checkpoint in .*\n.*checkpoint-8: "
                                         rf"{re.escape(str(optimizer))} is cut short"):
        plugin.last_complete_checkpoint(out)


def _example() -> dict:
    """examples/trl/gsm8k.py's names (main, __doc__), to call its main() in this process."""
    import runpy

    return runpy.run_path(str(ROOT / "examples" / "trl" / "gsm8k.py"), run_name="trl_example")


def test_the_trl_example_starts_over_beside_old_checkpoints_only_when_told(tmp_path, capsys):
    """The output folder holds a checkpoint it cannot resume (its save was killed): the example
    says why and stops, instead of training from step 0 beside (and over) the old run;
    --start_over trains from step 0 anyway."""
    data, model = _gsm8k_and_tiny_model(tmp_path)
    out = tmp_path / "run"
    (out / "checkpoint-2").mkdir(parents=True)
    argv = ["--model_name_or_path", str(model), "--train_file", str(data), "--output_dir",
            str(out), *CPU_FLAGS, "--max_steps", "1", "--report_to", "none"]
    main = _example()["main"]
    assert main(argv) != 0
    said = capsys.readouterr().err
    assert f"{out / 'checkpoint-2'}: no trainer_state.json" in said and "--start_over" in said
    assert not (out / "checkpoint-1").exists()
    assert main([*argv, "--start_over"]) == 0
    assert json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())[
        "global_step"] == 1
    assert "--start_over" in _example()["__doc__"]


def test_relaunching_a_finished_run_trains_and_records_nothing(tmp_path, caplog):
    """A run relaunched once it reached max_steps (a job re-queued): transformers resumes inside
    an epoch and takes one step past max_steps (6 steps, 4 per epoch), which would generate,
    plan and record one more batch and write checkpoint-7. Here it takes none."""
    out = tmp_path / "out"
    make_trainer(out, steps=6, save_steps=2).train()
    history = out / "checkpoint-6" / plugin.HISTORY_FILE
    saved = history.read_text()
    again = make_trainer(out, steps=6, save_steps=2)
    with caplog.at_level("WARNING", logger=plugin.__name__):
        again.train(resume_from_checkpoint=True)
    assert "checkpoint-6 is at step 6, max_steps = 6: nothing is left to train" in caplog.text
    assert again.state.global_step == 6 and not again.sera_log
    assert again.sera_planner.state_dict() == json.loads(saved)
    assert history.read_text() == saved and not (out / "checkpoint-7").exists()
