"""Maze task: generator, splits, verifier, tokenizer; the RL loop's loss by hand; smoke runs."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch

from sera import models
from sera.tasks import maze
from sera.trainers import maze as maze_trainer
from sera.trainers import sequence, token_loss
from sera.trainers.engines import Sampling, TransformersEngine


def test_generator_is_deterministic_and_a_perfect_maze():
    a = maze.generate(9, np.random.default_rng(5))
    b = maze.generate(9, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    assert a[0].all() and a[-1].all() and a[:, 0].all() and a[:, -1].all()  # walls around
    cells = [(r, c) for r in range(1, 9, 2) for c in range(1, 9, 2)]
    assert all(a[cell] == maze.OPEN for cell in cells)
    # A spanning tree on the 16 cells: 15 openings between cells.
    openings = int((a[1:-1, 1:-1] == maze.OPEN).sum()) - len(cells)
    assert openings == len(cells) - 1


def test_splits_are_disjoint_and_seeded():
    train, val = maze.dataset(300, 40, 9, seed=1)
    keys = {g.tobytes() for g in train}
    assert len(keys) == 300 and not keys & {g.tobytes() for g in val}
    again, _ = maze.dataset(300, 40, 9, seed=1)
    assert all((x == y).all() for x, y in zip(train, again, strict=True))
    with pytest.raises(ValueError, match="distinct mazes"):
        maze.dataset(500, 10, 5, seed=0)  # a 5x5 grid has 4 cells: only 4 mazes
    with pytest.raises(ValueError, match="size must be odd"):
        maze.generate(8, np.random.default_rng(0))


def test_a_larger_final_set_keeps_every_split_and_adds_unseen_mazes():
    plain = maze.MazeTask(9, 120, 30, seed=2, n_tune=10)
    wider = maze.MazeTask(9, 120, 30, seed=2, n_tune=10, n_final=90)
    for split in ("train_mazes", "val_mazes", "tune_mazes"):
        assert all((a == b).all() for a, b in
                   zip(getattr(plain, split), getattr(wider, split), strict=True)), split
    assert plain.final_prompts is None and len(wider.final_prompts) == 90
    assert wider.final_prompts[:30] == wider.val_prompts
    seen = {g.tobytes() for split in ("train_mazes", "tune_mazes") for g in getattr(wider, split)}
    final = [g.tobytes() for g in wider.final_mazes]
    assert len(set(final)) == 90 and not seen & set(final)
    answer = maze.answer_text(maze.shortest_path(wider.final_mazes[60])).split()
    ids = wider.tokenizer.convert_tokens_to_ids(answer)
    assert wider.reward("final", 60, ids) == 1.0
    with pytest.raises(ValueError, match="at least n_val"):
        maze.MazeTask(9, 120, 30, seed=2, n_final=20)


GRID = np.array([
    [1, 1, 1, 1, 1, 1, 1],
    [1, 0, 0, 0, 1, 0, 1],
    [1, 1, 1, 0, 1, 0, 1],
    [1, 0, 0, 0, 0, 0, 1],
    [1, 0, 1, 1, 1, 0, 1],
    [1, 0, 1, 0, 0, 0, 1],
    [1, 1, 1, 1, 1, 1, 1],
], dtype=np.uint8)


@pytest.mark.parametrize("answer, expected", [
    ("RIGHT RIGHT DOWN DOWN RIGHT RIGHT DOWN DOWN DONE", 1.0),  # the shortest path
    ("RIGHT RIGHT DOWN DOWN RIGHT RIGHT UP UP DOWN DOWN DOWN DOWN DONE", 1.0),  # a detour
    ("RIGHT RIGHT DOWN DOWN RIGHT RIGHT DOWN DOWN DONE UP UP", 1.0),  # after DONE: ignored
    ("DOWN DONE", 0.0),  # into a wall
    ("LEFT LEFT DONE", 0.0),  # off the grid through the wall
    ("RIGHT RIGHT DOWN DOWN RIGHT RIGHT DOWN DOWN", 0.0),  # no DONE
    ("RIGHT RIGHT DONE", 0.0),  # stops short
    ("RIGHT GOAL WALL DONE", 0.0),  # garbage
    ("", 0.0),
])
def test_verifier(answer, expected):
    assert maze.reward(GRID, answer) == expected


def test_verifier_never_raises_on_garbage():
    rng = np.random.default_rng(0)
    for _ in range(200):
        tokens = list(rng.choice(maze.VOCAB, size=int(rng.integers(0, 40))))
        assert maze.reward(GRID, tokens) in (0.0, 1.0)


def test_shortest_path_is_valid_and_shortest():
    path = maze.shortest_path(GRID)
    assert maze.reward(GRID, maze.answer_text(path)) == 1.0
    assert len(path) == 8


def test_tokenizer_round_trip(tmp_path):
    tokenizer = maze.build_tokenizer(tmp_path)
    text = maze.prompt_text(GRID) + " " + maze.answer_text(maze.shortest_path(GRID))
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert tokenizer.unk_token_id not in ids
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded(text)["input_ids"] == ids


def _small_decoder():
    return models.decoder(len(maze.VOCAB), 16, 1, 2, 1, 64)


def test_loss_equals_a_hand_computation():
    torch.manual_seed(0)
    model = _small_decoder().double()
    prompts = [[4, 10, 6], [4, 11, 11, 6]]
    responses = [[12, 16], [13, 14, 16]]  # moves and DONE
    advantages = np.array([1.5, -0.5])
    weights = np.array([2.0, 0.5])
    for agg, denominator in (("token-mean", 5), ("seqnorm", 2 * 4)):
        model.zero_grad()
        loss, _ = token_loss.sequence_loss(model, prompts, responses, advantages, weights, agg,
                                         4, 0, micro_batch=1)
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        total = 0
        for prompt, response, a, w in zip(prompts, responses, advantages, weights, strict=True):
            ids = torch.tensor([prompt + response])
            log_probs = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)
            for t, token in enumerate(response):
                total = total - w * a * log_probs[len(prompt) - 1 + t, token]
        (total / denominator).backward()
        assert loss == pytest.approx(float(total.detach() / denominator), rel=1e-5)
        for g, p in zip(grads, model.parameters(), strict=True):
            assert torch.allclose(g, p.grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.3])
def test_loss_log_probs_are_the_samplers(temperature):
    # generate's scores are the logits after its temperature warper: their log-softmax is the
    # distribution each token was drawn from, which the loss must differentiate.
    torch.manual_seed(1)
    model = _small_decoder().eval()
    prompt = [4, 10, 6, 11]
    out = model.generate(input_ids=torch.tensor([prompt] * 3), do_sample=True,
                         temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=6,
                         output_scores=True, return_dict_in_generate=True, pad_token_id=0,
                         eos_token_id=None)
    responses = out.sequences[:, len(prompt):].tolist()
    sampler = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], 1)
    sampled = sampler.gather(2, out.sequences[:, len(prompt):, None])[..., 0]
    chosen, mask, _ = token_loss.token_logprobs(model, [prompt] * 3, responses, temperature)
    ours = chosen[:, len(prompt) - 1:]
    assert mask[:, len(prompt) - 1:].all()
    torch.testing.assert_close(ours, sampled, rtol=1e-5, atol=1e-5)


def test_engine_honours_the_counts_and_the_seed():
    torch.manual_seed(0)
    model = _small_decoder()
    engine = TransformersEngine(model, chunk=4)
    sampling = Sampling(max_new_tokens=5, stop_token_id=20, pad_token_id=0)
    prompts = [[4, 10, 6], [4, 11, 11, 6], [4, 7]]
    first = engine.generate(prompts, [3, 0, 5], sampling, seed=7)
    assert len(first) == 8 and all(1 <= len(r) <= 5 for r in first)
    assert engine.generate(prompts, [3, 0, 5], sampling, seed=7) == first


def test_the_tuning_mazes_are_apart_and_leave_the_held_out_ones_alone():
    plain = maze.MazeTask(9, 60, 20, seed=3)
    tuned = maze.MazeTask(9, 60, 20, seed=3, n_tune=16)
    keys = lambda mazes: {g.tobytes() for g in mazes}
    assert len(tuned.tune_prompts) == 16 and len(tuned.train_prompts) == 60
    assert not keys(tuned.tune_mazes) & (keys(tuned.train_mazes) | keys(tuned.val_mazes))
    assert keys(tuned.val_mazes) == keys(plain.val_mazes)  # the held-out mazes do not move
    assert plain.tune_prompts == []
    grid = tuned.tune_mazes[0]
    answer = tuned.tokenizer.convert_tokens_to_ids(
        maze.answer_text(maze.shortest_path(grid)).split())
    assert tuned.reward("tune", 0, answer) == 1.0
    with pytest.raises(ValueError, match="split"):
        tuned.reward("test", 0, answer)
    with pytest.raises(ValueError, match="n_tune"):
        maze.MazeTask(9, 60, 20, n_tune=-1)


def _tiny(tmp_path, **changes):
    config = maze_trainer.MazeConfig(
        size=7, n_train=16, n_val=8, width=16, layers=1, heads=2, kv_heads=1, warmup_steps=3,
        warmup_batch=8, warmup_dir=str(tmp_path / "warmup"), steps=3, batch_size=4, n0=4,
        eval_every=2, eval_samples=4, val_k=(1, 4), final_samples=8, max_new_tokens=12,
        checkpoint_every=1, progress=False, min_allocated_share=0.0, out=str(tmp_path / "run"))
    return dataclasses.replace(config, **changes)


@pytest.mark.parametrize("method, agg", [("maxrl", "token-mean"), ("sera", "seqnorm"),
                                         ("grpo", "token-mean"), ("rloo", "seqnorm")])
def test_every_method_runs_on_a_tiny_budget(method, agg, tmp_path):
    results = sequence.train(_tiny(tmp_path, method=method, agg=agg), maze_trainer.build)
    saved = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert set(saved["agg"]) == {agg} and set(saved["method"]) == {method}
    assert {"train_reward", "token_entropy", "grad_norm", "val_pass", "pass"} <= set(
        results.metrics["metric"])
    final = pd.read_csv(tmp_path / "run" / "final.csv")
    assert len(final) == 8 and (final["correct"] <= 8).all() and set(final["agg"]) == {agg}
    assert (tmp_path / "run" / "model" / "config.json").exists()


def test_sera_allocates_after_the_first_epoch(tmp_path):
    # 16 mazes in batches of 4: steps 0-3 are epoch 0 (uniform), steps 4-7 allocate.
    table = sequence.train(_tiny(tmp_path, method="sera", steps=8), maze_trainer.build).metrics
    allocated = table.loc[table["metric"] == "allocated", "value"].tolist()
    assert allocated == [0.0] * 4 + [1.0] * 4


def test_a_run_that_never_allocates_fails_loudly(tmp_path):
    from sera.trainers.loop import DegenerateRunError

    with pytest.raises(DegenerateRunError, match="allocated from its estimates in 0%"):
        sequence.train(_tiny(tmp_path, method="sera", min_allocated_share=0.5), maze_trainer.build)
    assert (tmp_path / "run" / "metrics.csv").exists()  # the tables were saved first


def test_killed_run_resumes_to_the_same_table(tmp_path):
    config = _tiny(tmp_path, method="sera", steps=6)
    whole = sequence.train(dataclasses.replace(config, out=str(tmp_path / "whole")),
                           maze_trainer.build)

    def kill(run):
        if run.step == 5:
            raise KeyboardInterrupt

    killed = dataclasses.replace(config, out=str(tmp_path / "killed"))
    with pytest.raises(KeyboardInterrupt):
        sequence.train(killed, maze_trainer.build, callback=kill)
    resumed = sequence.train(killed, maze_trainer.build)
    pd.testing.assert_frame_equal(resumed.metrics, whole.metrics)
    pd.testing.assert_frame_equal(resumed.final, whole.final)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "killed" / "rollouts.csv"),
                                  pd.read_csv(tmp_path / "whole" / "rollouts.csv"))


def test_each_response_is_a_row_of_rollouts_csv_that_adds_up_to_the_allocations(tmp_path):
    config = _tiny(tmp_path, method="sera-rate-safeguard", steps=8)  # counts 0 after epoch 0
    params = []
    results = sequence.train(config, maze_trainer.build, callback=lambda run: params.append(
        [p.detach().clone() for p in run.study.model.parameters()]))
    rollouts = pd.read_csv(tmp_path / "run" / "rollouts.csv")
    assert set(rollouts["method"]) == {"sera-rate-safeguard"}
    per_prompt = rollouts.groupby(["step", "prompt"]).agg(
        n=("reward", "size"), successes=("reward", "sum"), group=("group", "first"))
    allocations = results.allocations.set_index(["step", "prompt"])
    sampled = allocations[allocations["rollouts"] > 0]
    assert (allocations["rollouts"] == 0).any()  # a prompt left out has no row
    assert per_prompt.index.equals(sampled.index.sort_values())
    np.testing.assert_array_equal(per_prompt["n"], sampled.loc[per_prompt.index, "rollouts"])
    np.testing.assert_array_equal(per_prompt["group"], per_prompt["n"])
    np.testing.assert_allclose(per_prompt["successes"], sampled.loc[per_prompt.index, "successes"])
    assert rollouts["length"].between(1, config.max_new_tokens).all()
    # update_norm: the parameters' move over each step, against the snapshots taken after steps
    moves = results.metrics[results.metrics["metric"] == "update_norm"]["value"].to_numpy()
    expected = [float(sum(((a - b).double() ** 2).sum() for a, b in zip(after, before,
                                                                        strict=True))) ** 0.5
                for before, after in zip(params, params[1:], strict=False)]
    np.testing.assert_allclose(moves[1:], expected, rtol=1e-9)
    assert (moves > 0).all()


def test_distinct_mixed_successes_counts_each_successful_answer_once_in_mixed_groups():
    groups = [
        [((1, 2), 1.0), ((1, 2), 1.0), ((3,), 0.0)],  # mixed: one distinct success
        [((4,), 1.0), ((5,), 1.0)],                   # all succeed: no signal
        [((6,), 0.0), ((7,), 0.0)],                   # all fail
        [((8,), 1.0), ((9,), 1.0), ((8, 1), 1.0), ((2,), 0.0)],  # mixed: three distinct
        [],
    ]
    assert sequence.distinct_mixed_successes(groups) == 4


def test_command_line(tmp_path):
    code = sequence.main(maze_trainer.MazeConfig, maze_trainer.PRESETS, maze_trainer.build, [
        "--method", "maxrl", "--size", "7", "--steps", "1", "--seed", "2", "--agg", "seqnorm",
        "--out", str(tmp_path / "cli"), "--n-train", "30", "--n-val", "4", "--width", "16",
        "--layers", "1", "--heads", "2", "--kv-heads", "1", "--warmup-steps", "1",
        "--batch-size", "2", "--n0", "2", "--eval-samples", "2", "--val-k", "1", "2",
        "--final-samples", "4", "--max-new-tokens", "8", "--no-progress"])
    assert code == 0
    table = pd.read_csv(tmp_path / "cli" / "metrics.csv")
    assert set(table["seed"]) == {2} and 4 in set(table.loc[table["metric"] == "pass", "k"])


def test_the_safeguard_leaves_mazes_out_and_the_run_goes_on(tmp_path):
    config = _tiny(tmp_path, method="sera-rate-safeguard", steps=8)  # u_min 0.3
    allocations = sequence.train(config, maze_trainer.build).allocations
    dropped = allocations[allocations["rollouts"] == 0]
    assert len(dropped) > 0 and set(dropped["step"]) <= set(range(4, 8))  # after epoch 0
    assert (allocations.groupby("step")["rollouts"].sum() == 4 * 4).all()


@pytest.mark.parametrize("preset", ["fast", "long"])
def test_the_command_line_and_a_notebook_build_the_same_configuration(preset):
    # notebook 05 runs dataclasses.replace(PRESETS[profile], method=..., agg=..., seed=...)
    from sera.trainers import cli

    argv = ["--preset", preset, "--method", "sera", "--agg", "seqnorm", "--seed", "2"]
    parsed = cli.parse(maze_trainer.MazeConfig, maze_trainer.PRESETS, argv)
    notebook = dataclasses.replace(maze_trainer.PRESETS[preset], method="sera", agg="seqnorm",
                                   seed=2)
    assert parsed == notebook


def test_two_grids_share_one_warm_up_and_read_back_each_others_runs(tmp_path):
    # As notebooks 05 and 06 do: the second grid trains only the run the first lacks, and the
    # runs it reads back give the same tables as the first grid's.
    from sera import runstore
    from sera.trainers import sequence as seq

    base = _tiny(tmp_path, steps=2)
    options = {"shared": tmp_path / "index", "warmup_dir": tmp_path / "warmups" / "maze",
               "progress": False}
    first = seq.run_grid(base, maze_trainer.build, [("maxrl", "token-mean")], [0],
                         tmp_path / "05", **options)
    warmed = (tmp_path / "warmups" / "maze" / "warmup.json").stat().st_mtime_ns
    second = seq.run_grid(base, maze_trainer.build, [("sera", "token-mean"),
                                                     ("maxrl", "token-mean")], [0],
                          tmp_path / "06", **options)
    assert (tmp_path / "warmups" / "maze" / "warmup.json").stat().st_mtime_ns == warmed
    assert not (tmp_path / "05" / "warmup").exists() and not (tmp_path / "06" / "warmup").exists()
    assert (tmp_path / "06" / "maxrl_n0-4_token-mean_seed-0").is_symlink()
    read_back = second.final[second.final["method"] == "maxrl"].reset_index(drop=True)
    pd.testing.assert_frame_equal(read_back, first.final.reset_index(drop=True))
    assert set(second.final["method"]) == {"maxrl", "sera"}
    shared_run = tmp_path / "05" / "maxrl_n0-4_token-mean_seed-0"
    assert sum(bool(r.get("finished")) for r in runstore.records(shared_run)) == 1


def test_the_step_0_evaluation_is_kept_beside_the_warm_up_and_changes_no_number(tmp_path,
                                                                               monkeypatch):
    # sera after maxrl from one warm-up reads maxrl's step-0 evaluation back; every table equals
    # that of a sera run that sampled it itself (its warm-up copied, the evaluations left out).
    import shutil

    calls = []
    original = sequence.SequenceStudy.correct_counts

    def spy(self, samples, stream, step, split="val"):
        calls.append((self.config.method, stream, step))
        return original(self, samples, stream, step, split)

    monkeypatch.setattr(sequence.SequenceStudy, "correct_counts", spy)
    sequence.train(_tiny(tmp_path, method="maxrl", out=str(tmp_path / "maxrl")),
                   maze_trainer.build)
    kept = list((tmp_path / "warmup" / "evaluations").glob("step0-*.json"))
    assert len(kept) == 1
    shutil.copytree(tmp_path / "warmup", tmp_path / "alone",
                    ignore=shutil.ignore_patterns("evaluations"))
    calls.clear()
    shared = sequence.train(_tiny(tmp_path, method="sera", out=str(tmp_path / "shared")),
                            maze_trainer.build)
    assert ("sera", 1, 0) not in calls and ("sera", 1, 2) in calls
    alone = sequence.train(_tiny(tmp_path, method="sera", out=str(tmp_path / "sera-alone"),
                                 warmup_dir=str(tmp_path / "alone")), maze_trainer.build)
    assert ("sera", 1, 0) in calls
    for table in ("metrics", "final", "allocations"):
        pd.testing.assert_frame_equal(getattr(shared, table), getattr(alone, table))
    # another seed samples its own
    calls.clear()
    sequence.train(_tiny(tmp_path, method="sera", seed=1, out=str(tmp_path / "seed1")),
                   maze_trainer.build)
    assert ("sera", 1, 0) in calls
    assert len(list((tmp_path / "warmup" / "evaluations").glob("step0-*.json"))) == 2


def test_measuring_the_update_changes_no_number_and_a_large_model_skips_it(tmp_path,
                                                                          monkeypatch):
    measured = sequence.train(_tiny(tmp_path, method="maxrl", out=str(tmp_path / "a")),
                              maze_trainer.build).metrics
    monkeypatch.setattr(sequence, "UPDATE_NORM_MAX_BYTES", 0)  # every model is "large"
    skipped = sequence.train(_tiny(tmp_path, method="maxrl", out=str(tmp_path / "b")),
                             maze_trainer.build).metrics
    assert "update_norm" in set(measured["metric"]) and "update_norm" not in set(skipped["metric"])
    pd.testing.assert_frame_equal(measured[measured["metric"] != "update_norm"]
                                  .reset_index(drop=True), skipped.reset_index(drop=True))


def test_a_grid_started_from_a_stored_warm_up_trains_none_unless_its_settings_differ(tmp_path):
    # As notebooks 05-07 do with the stored study's warm-up: the copy is used as it is, and the
    # runs record its fingerprint; a grid whose warm-up settings differ trains its own.
    from sera import runstore
    from sera.trainers import sequence as seq

    stored = tmp_path / "stored"
    sequence.train(_tiny(tmp_path, method="maxrl", steps=1, warmup_dir=str(stored)),
                   maze_trainer.build)
    record = json.loads(runstore.warmup_stamp(stored).read_text())
    base = _tiny(tmp_path, steps=1)
    seq.run_grid(base, maze_trainer.build, [("sera", "token-mean")], [0], tmp_path / "grid",
                 progress=False, warmup_from=stored)
    here = runstore.warmup_dir(tmp_path / "grid")
    assert json.loads(runstore.warmup_stamp(here).read_text()) == record
    assert ((here / "model.safetensors").read_bytes()
            == (stored / "model.safetensors").read_bytes())
    run = tmp_path / "grid" / "sera_n0-4_token-mean_seed-0"
    starts = [r for r in runstore.records(run) if runstore.WARMUP_FINGERPRINT in r]
    assert {r[runstore.WARMUP_FINGERPRINT] for r in starts} == {record["fingerprint"]}
    other = dataclasses.replace(base, warmup_steps=2)
    seq.run_grid(other, maze_trainer.build, [("sera", "token-mean")], [0], tmp_path / "other",
                 progress=False, warmup_from=stored)
    retrained = json.loads(runstore.warmup_stamp(runstore.warmup_dir(tmp_path / "other"))
                           .read_text())
    assert retrained["settings"]["warmup_steps"] == 2 and len(retrained["rows"]) == 2
