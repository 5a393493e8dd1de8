"""examples/verl: the data preparation on generated GSM8K-format files, and both launchers (one
node, a Ray cluster) through verl's Hydra composition and configuration check, with the step
count, checkpoint and validation frequency and loggers they promise.

Runs in .venv-scale (`make test-integrations`); skips where verl is not installed.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

if not os.environ.get("SERA_REQUIRE_INTEGRATIONS"):
    pytest.importorskip("verl")

from sera.integrations import verl as plugin  # noqa: E402
from sera.tasks import math as math_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "verl"
PRINT_ARGUMENTS = r"printf %s\n"  # the launchers split VERL_MAIN into words
GSM8K_TRAIN = 7473  # openai/gsm8k main/train
STEPS = 2000  # the paper's SmolLM2 run


def compose(arguments):
    """verl's configuration from command-line overrides, composed as main_ppo composes it."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    folder = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        return hydra_compose("ppo_trainer", overrides=arguments)


def compose_sera(arguments):
    """The configuration `python -m sera.integrations.verl_main` composes from the overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="sera.integrations.verl_recipe",
                                  version_base=None):
        return hydra_compose("sera_trainer", overrides=arguments)


def _gsm8k_files(folder: Path) -> tuple[Path, Path]:
    """A GSM8K-format training file and a Platinum-format test file (with two rejected rows)."""
    train, test = math_task.generated_splits(40, 12, seed=3)
    train_path = math_task.write_jsonl(train, folder / "gsm8k" / "train.jsonl")
    platinum = test.assign(cleaning_status=["consensus"] * 10 + ["rejected"] * 2)
    test_path = folder / "gsm8k-platinum" / "test.jsonl"
    test_path.parent.mkdir(parents=True)
    platinum.to_json(test_path, orient="records", lines=True)
    return train_path, test_path


def _environment(**variables) -> dict:
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
    return dict(os.environ, PATH=path, PYTHONPATH=str(ROOT), **variables)


def _readme_block() -> str:
    from test_readme import pages_text

    text = pages_text()
    return re.search(r"```bash\n(pip install -e \"\.\[scale-gpu\]\".*?)```", text, re.S).group(1)


def readme_verl_arguments(tmp_path: Path) -> list[str]:
    """The README's verl commands as written after the install line, on generated data in
    tmp_path, with the launcher printing its arguments instead of starting verl."""
    train, test = _gsm8k_files(tmp_path)
    block = _readme_block().split("\n", 1)[1]
    for old, new in {"/data/gsm8k/train.jsonl": train, "/data/gsm8k-platinum/test.jsonl": test,
                     "/data/sera-gsm8k": tmp_path / "sera-gsm8k"}.items():
        assert block.count(old) >= 1, old
        block = block.replace(old, str(new))
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", block], capture_output=True,
                         text=True, env=_environment(VERL_MAIN=PRINT_ARGUMENTS), cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    # The preparation prints what it wrote; the launcher one override a line.
    return [line for line in out.stdout.splitlines() if re.match(r"^\+?[\w.]+=", line)]


def _check(config, nodes: int = 1):
    """verl's own check, SERA's refusals, and what the launcher promises."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    plugin.refuse_unsupported(config)
    plugin.refuse_partial(config)
    trainer = config.trainer
    per_epoch = GSM8K_TRAIN // config.data.train_batch_size
    # verl stops at whichever comes first (PPOTrainer.fit, _init_dataloader).
    assert min(trainer.total_training_steps, per_epoch * trainer.total_epochs) == STEPS
    assert trainer.save_freq == 100 and trainer.test_freq == 100
    assert list(trainer.logger) == ["console"] and trainer.resume_mode == "auto"
    assert trainer.nnodes == nodes and trainer.n_gpus_per_node == 8
    assert config.trainer.v1.trainer_mode == plugin.MODE


def test_data_preparation_writes_what_the_plugin_and_the_reward_read(tmp_path):
    train, test = _gsm8k_files(tmp_path)
    out = tmp_path / "sera-gsm8k"
    run = subprocess.run([sys.executable, str(EXAMPLES / "prepare_gsm8k.py"), "--train",
                          str(train), "--test", str(test), "--out", str(out)],
                         capture_output=True, text=True, env=_environment(), cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    tables = {name: pd.read_parquet(out / f"{name}.parquet") for name in ("train", "test")}
    assert len(tables["train"]) == 40 and len(tables["test"]) == 10  # rejected rows left out
    for name, table in tables.items():
        rows = plugin.dense_rows(table["extra_info"])  # unique indices, as the plug-in needs
        assert list(rows.values()) == list(range(len(table)))
        assert set(table["extra_info"].map(lambda x: x["split"])) == {name}
        # The prompt is the question with the paper's instruction; the ground truth is the
        # number the reward checks a response against.
        first = table.iloc[0]
        assert first["prompt"][0]["content"].endswith(math_task.INSTRUCTION)
        truth = first["reward_model"]["ground_truth"]
        from sera.integrations import gsm8k

        assert gsm8k.compute_score(first["data_source"], f"so \\boxed{{{truth}}}", truth) == 1.0
        # And sera's own reader reads it back (the MaxRL / verl layout).
        back = math_task.read(out / f"{name}.parquet")
        assert list(back["answer"]) == [m["ground_truth"] for m in table["reward_model"]]
    with pytest.raises(ValueError, match="no questions"):
        empty = tmp_path / "empty.jsonl"
        pd.DataFrame({"question": ["q"], "answer": ["#### 1"], "cleaning_status": ["rejected"]})\
            .to_json(empty, orient="records", lines=True)
        from sera.integrations.gsm8k import verl_table

        verl_table(empty, split="test")


def test_the_readme_commands_train_2000_steps_checkpoint_and_validate(tmp_path):
    arguments = readme_verl_arguments(tmp_path)
    config = compose_sera(arguments)
    _check(config)
    assert config.data.train_files == str(tmp_path / "sera-gsm8k" / "train.parquet")
    assert (config.data.train_batch_size, config.actor_rollout_ref.rollout.n) == (256, 128)
    assert config.actor_rollout_ref.actor.loss_agg_mode == "token-mean"  # as the TRL example


def test_the_docs_attention_override_passes_verls_check_and_reaches_the_model_config(tmp_path):
    from test_readme import pages_text

    key = r"\+actor_rollout_ref\.model\.override_config\.attn_implementation"
    override = re.search(rf"`({key}=sdpa)`", pages_text()).group(1)
    launch = subprocess.run(["bash", str(EXAMPLES / "single_node.sh"), override],
                            capture_output=True, text=True,
                            env=_environment(VERL_MAIN=PRINT_ARGUMENTS, MODEL="/models/m",
                                             DATA="/data/d", CKPT="/ckpt/c"))
    assert launch.returncode == 0, launch.stderr[-3000:]
    config = compose_sera(launch.stdout.splitlines())
    _check(config)
    # what verl's HFModelConfig reads (its default is flash_attention_2)
    assert config.actor_rollout_ref.model.override_config.get("attn_implementation") == "sdpa"


def test_the_cluster_launcher_runs_the_same_run_on_n_nodes(tmp_path):
    script = str(EXAMPLES / "cluster.sh")
    env = _environment(RAY="echo ray")
    head = subprocess.run(["bash", script, "head"], capture_output=True, text=True, env=env)
    assert head.stdout.split() == ["ray", "start", "--head", "--port=6379", "--num-gpus=8"]
    worker = subprocess.run(["bash", script, "worker", "10.0.0.1"], capture_output=True,
                            text=True, env=env)
    assert worker.stdout.split() == ["ray", "start", "--address=10.0.0.1:6379", "--num-gpus=8"]
    wrong = subprocess.run(["bash", script], capture_output=True, text=True, env=env)
    assert wrong.returncode == 2 and "usage" in wrong.stderr
    train = subprocess.run(["bash", script, "train"], capture_output=True, text=True,
                           env=_environment(VERL_MAIN=PRINT_ARGUMENTS, NNODES="4",
                                            MODEL="/models/m", DATA="/data/d", CKPT="/ckpt/c"))
    assert train.returncode == 0, train.stderr[-3000:]
    config = compose_sera(train.stdout.splitlines())
    _check(config, nodes=4)
    assert config.ray_kwargs.ray_init.address == "auto"
    assert config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == \
        "sera.integrations.verl.setup"
    missing = subprocess.run(["bash", script, "train"], capture_output=True, text=True,
                             env=_environment(VERL_MAIN=PRINT_ARGUMENTS, MODEL="m"))
    assert missing.returncode != 0 and "NNODES" in missing.stderr


RECIPE = ["hydra.searchpath=[pkg://sera.integrations.verl_recipe]", "+sera=paper",
          "actor_rollout_ref.rollout.n=4"]  # verl's default (1) is below n_min: refused


def test_one_override_turns_the_papers_sera_on_with_typed_options():
    from sera.methods import METHODS, U_MIN
    from sera.trainers.config import AllocatorConfig

    config = compose(RECIPE)
    assert (config.trainer.use_v1, config.trainer.v1.trainer_mode,
            config.algorithm.adv_estimator) == (True, plugin.MODE, plugin.ESTIMATOR)
    assert config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == \
        "sera.integrations.verl.setup"
    plugin.refuse_unsupported(config)
    assert plugin.allocator_from_config(config) == AllocatorConfig(history_rule="counts")
    paper = plugin.allocator_from_config(config).for_method(METHODS["sera"])
    assert (paper.history_rule, paper.u_min) == ("counts", U_MIN)  # the paper's rule and selection
    changed = compose([*RECIPE, "sera.n_min=3", "sera.history_gamma=0.8", "sera.u_min=0"])
    assert plugin.allocator_from_config(changed) == AllocatorConfig(
        n_min=3, history_rule="counts", history_gamma=0.8, u_min=0.0)


@pytest.mark.parametrize("override, named", [
    ("algorithm.adv_estimator=grpo", "algorithm.adv_estimator=grpo"),
    ("algorithm.use_kl_in_reward=True", "use_kl_in_reward=True"),
    ("actor_rollout_ref.actor.use_kl_loss=True", "use_kl_loss=True"),
])
def test_a_setting_that_contradicts_the_recipe_is_refused_by_name(override, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        plugin.refuse_unsupported(compose([*RECIPE, override]))


def test_the_docs_entry_point_command_composes_sera_on():
    import shlex

    from test_readme import pages_text

    block = re.search(r"```bash\n(python -m sera\.integrations\.verl_main .*?)```", pages_text(),
                      re.S).group(1)
    words = shlex.split(block.replace("\\\n", " "))
    config = compose_sera(words[words.index("sera.integrations.verl_main") + 1:])
    plugin.refuse_unsupported(config)
    plugin.refuse_partial(config)
    assert (config.trainer.v1.trainer_mode, config.algorithm.adv_estimator) == (
        plugin.MODE, plugin.ESTIMATOR)
    assert plugin.allocator_from_config(config).n_min == 2


def test_the_entry_point_composes_what_the_recipe_composes_on_main_ppo():
    from omegaconf import OmegaConf

    assert OmegaConf.to_container(compose_sera(RECIPE[2:])) == \
        OmegaConf.to_container(compose(RECIPE))


def test_the_launcher_runs_through_the_entry_points_own_hydra(tmp_path):
    """The launcher's default command, run for real up to Hydra's printout (`--cfg job`)."""
    import yaml

    entry = f"{sys.executable} -m sera.integrations.verl_main --cfg job"
    assert "python3 -m sera.integrations.verl_main" in (EXAMPLES / "single_node.sh").read_text()
    launch = subprocess.run(["bash", str(EXAMPLES / "single_node.sh")], capture_output=True,
                            text=True, cwd=tmp_path,
                            env=_environment(VERL_MAIN=entry, MODEL="/models/m", DATA="/data/d",
                                             CKPT="/ckpt/c"))
    assert launch.returncode == 0, launch.stderr[-3000:]
    config = yaml.safe_load(launch.stdout)
    assert config["trainer"]["v1"]["trainer_mode"] == plugin.MODE
    assert config["algorithm"]["adv_estimator"] == plugin.ESTIMATOR
    assert config["sera"]["history_rule"] == "counts"


PARTIAL = [
    ("trainer.use_v1=false", "lacks trainer.use_v1=true"),
    ("trainer.v1.trainer_mode=sync", "lacks trainer.v1.trainer_mode=sera_sync"),
    ("trainer.v1.trainer_mode=colocate_async", "lacks trainer.v1.trainer_mode=sera_sync"),
    ("trainer.v1.trainer_mode=separate_async", "lacks trainer.v1.trainer_mode=sera_sync"),
    ("algorithm.adv_estimator=grpo", "lacks algorithm.adv_estimator=sera_maxrl"),
    ("ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=null",
     "lacks ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"),
]


@pytest.mark.parametrize("override, named", PARTIAL)
def test_a_config_with_some_of_seras_pieces_is_refused_by_name(override, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        plugin.refuse_partial(compose([*RECIPE, override]))
    with pytest.raises(ValueError, match=re.escape(named)):
        plugin.refuse_partial(compose_sera([*RECIPE[2:], override]))


def test_a_lost_search_path_is_refused_and_the_estimator_alone_is_maxrl():
    # Without the search path Hydra stores +sera=paper as the string "paper"
    lost = compose(["+sera=paper", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4"])
    assert lost.sera == "paper"
    with pytest.raises(ValueError, match=r"sera='paper' is a plain value.*verl_main"):
        plugin.refuse_partial(lost)
    plugin.refuse_partial(compose(["actor_rollout_ref.rollout.n=4"]))  # no SERA asked for
    plugin.refuse_partial(compose([  # MaxRL: the estimator in a plain run, a baseline
        "algorithm.adv_estimator=sera_maxrl", "actor_rollout_ref.rollout.n=4",
        f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={plugin.HOOK}"]))


@pytest.mark.parametrize("override, named", PARTIAL[:4])
def test_the_entry_point_refuses_a_partial_config_before_ray_starts(tmp_path, override, named):
    run = subprocess.run([sys.executable, "-m", "sera.integrations.verl_main", override,
                          "actor_rollout_ref.rollout.n=4"], capture_output=True, text=True,
                         cwd=tmp_path, env=_environment(), timeout=300)
    assert run.returncode != 0 and named in run.stderr, run.stderr[-2000:]
    assert "ray.init" not in run.stderr and "Started a local Ray" not in run.stderr


@pytest.mark.parametrize("override, named", PARTIAL[:4])
def test_the_setup_hook_makes_every_verl_trainer_refuse_a_partial_config(monkeypatch, override,
                                                                          named):
    """What Ray's worker_process_setup_hook does in the task runner, before verl builds a
    trainer of whatever mode (or the legacy V0 trainer) and before its first generation."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, PPOTrainer

    classes = {PPOTrainer, RayPPOTrainer, *TRAINER_REGISTRY.values()}
    for cls in classes:
        if "__init__" in cls.__dict__:
            monkeypatch.setattr(cls, "__init__", cls.__dict__["__init__"])  # undone afterwards
    plugin.setup()
    plugin.setup()  # a second call wraps nothing twice
    assert all(cls.__init__._sera_checked for cls in classes)
    assert not getattr(PPOTrainer.__init__.__wrapped__, "_sera_checked", False)
    config = compose([*RECIPE, override])
    built = RayPPOTrainer if not config.trainer.use_v1 else \
        get_trainer_cls(config.trainer.v1.trainer_mode)
    with pytest.raises(ValueError, match=re.escape(named)):
        built(config, None, {}) if built is RayPPOTrainer else built(config)
