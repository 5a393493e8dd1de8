"""The verl launch path as a user takes it: SERA's trainer built after the workers' setup hook,
a hook of one's own chained to it, refusals before Ray starts, a YAML of one's own, and
`bash examples/verl/single_node.sh` on a CPU as far as verl 0.9.1 goes without a GPU.

Runs in .venv-scale (`make test-integrations`); skips where verl is not installed.
"""

import copy
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

if not os.environ.get("SERA_REQUIRE_INTEGRATIONS"):
    pytest.importorskip("verl")

from omegaconf import OmegaConf, open_dict  # noqa: E402
from test_verl_examples import compose_sera, readme_verl_arguments  # noqa: E402
from verl.trainer.ppo.v1 import get_trainer_cls  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer  # noqa: E402

from sera.integrations import verl as plugin  # noqa: E402
from sera.integrations import verl_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_parts import verl as verl_part  # noqa: E402
from gpu_parts import verl_probe  # noqa: E402

HOOK_KEY = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"


@pytest.fixture(scope="module")
def launcher_config(tmp_path_factory):
    """The README's verl command composed as `python -m sera.integrations.verl_main` does."""
    return compose_sera(readme_verl_arguments(tmp_path_factory.mktemp("readme")))


@pytest.fixture
def hooked():
    """This process as a Ray worker after SERA's setup hook ran; verl's classes restored after."""
    classes = plugin._trainer_classes()
    saved = {cls: cls.__dict__.get("__init__") for cls in classes}
    plugin.setup()
    try:
        yield
    finally:
        for cls, init in saved.items():
            if init is not None:
                cls.__init__ = init


def _with(config, **overrides):
    config = copy.deepcopy(config)
    with open_dict(config):
        for key, value in overrides.items():
            OmegaConf.update(config, key.replace("__", "."), value, force_add=True)
    return config


def test_seras_trainer_builds_after_the_setup_hook(launcher_config, hooked):
    """What verl's TaskRunner does with the launcher's config in a worker the hook set up:
    get_trainer_cls(mode)(config=config). The trainer runs under verl's sync name with verl's
    sync replay buffer; the caller's config keeps the SERA mode."""
    config = copy.deepcopy(launcher_config)
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config=config)
    assert type(trainer) is plugin.SeraTrainerSync
    assert trainer.trainer_mode == "sync" and type(trainer.replay_buffer) is ReplayBuffer
    assert config.trainer.v1.trainer_mode == plugin.MODE


PARTIAL = {
    "the mode": ({"trainer__v1__trainer_mode": "sync"}, "trainer_mode=sera_sync"),
    "the V1 trainer": ({"trainer__use_v1": False}, "trainer.use_v1=true"),
    "the hook": ({HOOK_KEY.replace(".", "__"): "json.dumps"}, "worker_process_setup_hook"),
    "the block": ({"sera": None}, r"the sera: block"),
}


@pytest.mark.parametrize("removed", PARTIAL)
def test_every_partial_sera_config_is_still_refused_by_the_trainer_verl_picks(
        launcher_config, hooked, removed):
    overrides, missing = PARTIAL[removed]
    config = _with(launcher_config, **overrides)
    if config.trainer.use_v1:
        cls = get_trainer_cls(config.trainer.v1.trainer_mode)
    else:
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer as cls
    with pytest.raises(ValueError, match=rf"asks for SERA but lacks .*{missing}"):
        cls(config=config)


def test_a_setup_hook_of_ones_own_chains_seras(launcher_config, monkeypatch):
    ran = []
    monkeypatch.setattr(plugin, "setup", lambda: ran.append("sera"))
    ours = plugin.chained(lambda: ran.append("ours"))
    ours()
    assert ran == ["sera", "ours"]  # SERA's registration first, then the user's
    assert plugin.runs_sera_setup(plugin.HOOK)
    assert plugin.runs_sera_setup("gpu_parts.verl_probe.setup")
    assert verl_probe.setup.runs_sera_setup is True
    plugin.refuse_partial(_with(launcher_config, **{HOOK_KEY: "gpu_parts.verl_probe.setup"}))
    with pytest.raises(ValueError, match=r"lacks ray_kwargs.*setup_hook=sera.integrations.verl."
                                         r"setup \(or a hook of yours made with .*chained\)"):
        plugin.refuse_partial(_with(launcher_config, **{HOOK_KEY: "os.getcwd"}))
    with pytest.raises(ValueError, match=r"setup_hook=nowhere.hook cannot be imported here"):
        plugin.refuse_partial(_with(launcher_config, **{HOOK_KEY: "nowhere.hook"}))


def test_the_documented_setup_hook_runs_seras_first_and_passes_the_checks(tmp_path,
                                                                          launcher_config,
                                                                          monkeypatch):
    """docs/scaling.md's hook, as written there, in a package on the path: it is taken as a
    chained hook, and calling it (as Ray does in each worker) runs SERA's setup."""
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", _docs(), re.S)
                   if "import chained" in s)
    package = tmp_path / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hooks.py").write_text(snippet)
    command = re.search(r"worker_process_setup_hook=(\S+)", _docs()).group(1)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin.refuse_partial(_with(launcher_config, **{HOOK_KEY: command}))
    ran = []
    monkeypatch.setattr(plugin, "setup", lambda: ran.append("sera"))
    import my_package.hooks

    my_package.hooks.setup()
    assert ran == ["sera"]


@pytest.mark.parametrize("switch, coefficient", sorted(plugin.KL_COEFFICIENTS.items()))
def test_a_kl_term_with_coefficient_0_is_accepted_with_a_warning(launcher_config, caplog, switch,
                                                                 coefficient):
    config = _with(launcher_config, **{switch: True, coefficient: 0.0})
    with caplog.at_level(logging.WARNING, logger="sera.integrations.verl"):
        plugin.refuse_unsupported(config)
    assert f"{switch}=True with {coefficient}=0 is accepted" in caplog.text
    with pytest.raises(ValueError, match=rf"{re.escape(switch)}=True"):
        plugin.refuse_unsupported(_with(config, **{coefficient: 0.001}))


def _launch(arguments, folder, timeout=600):
    """`python -m sera.integrations.verl_main ARGUMENTS` as a user starts it:
    (exit code, stdout, stderr)."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="1",
                       PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    done = subprocess.run([sys.executable, "-m", "sera.integrations.verl_main", *arguments],
                          capture_output=True, text=True, timeout=timeout, cwd=folder,
                          env=environment)
    return done.returncode, done.stdout, done.stderr


def test_the_launcher_refuses_a_config_stripped_of_sera_and_names_the_mode(launcher_config):
    stripped = _with(launcher_config, sera=None, trainer__v1__trainer_mode="sync",
                     algorithm__adv_estimator="grpo")
    with pytest.raises(ValueError, match=r"removed SERA from this config \(no sera: block, "
                                         r"trainer.v1.trainer_mode=sync\).*main_ppo"):
        verl_main.refuse_without_sera(stripped)
    verl_main.refuse_without_sera(launcher_config)
    # the estimator's refusal names the mode the config has
    with pytest.raises(ValueError, match=r"adv_estimator=grpo with a SERA run "
                                         r"\(trainer.v1.trainer_mode=sync\)"):
        plugin.refuse_unsupported(stripped)


@pytest.mark.parametrize("overrides, why", [
    (["sera.n_max=2"], r"n_max = 2 is below n0 = 4"),
    (["sera.n_min=6"], r"n0 = 4 is below n_min = 6"),
    (["sera.n_max_factor=1", "sera.n_min=5"], r"n0 = 4 is below n_min = 5"),
])
def test_an_infeasible_budget_is_refused_before_ray_starts(tmp_path, overrides, why):
    code, out, err = _launch(["data.train_files=x.parquet", "data.val_files=y.parquet",
                            "actor_rollout_ref.model.path=m", "actor_rollout_ref.rollout.n=4",
                            *overrides], tmp_path, timeout=300)
    output = out + err
    assert code != 0 and re.search(rf"rollout.n=4 is SERA's n0.*{why}", output), output[-2000:]
    assert "ray init kwargs" not in output and "Started a local Ray" not in output


def _docs() -> str:
    return (ROOT / "docs" / "scaling.md").read_text()


def test_a_yaml_of_ones_own_composes_sera_the_documented_way(tmp_path):
    """docs/scaling.md's pattern through the launcher, as written there: both search paths,
    ppo_trainer and sera: paper as defaults, the run's own settings after them."""
    block = re.search(r"```yaml\n(# my_run.yaml.*?)```", _docs(), re.S).group(1)
    (tmp_path / "my_run.yaml").write_text(block)
    command = re.search(r"```bash\n(python -m sera.integrations.verl_main --config-dir .*?)\n```",
                        _docs(), re.S).group(1)
    arguments = command.replace("/path/to/configs", str(tmp_path)).split()[3:]
    assert arguments[-1] == "[overrides]"
    code, output, err = _launch([*arguments[:-1], "--cfg", "job"], tmp_path, timeout=300)
    assert code == 0, err[-2000:]
    config = OmegaConf.create(output)
    mine = OmegaConf.create(block)
    plugin.refuse_partial(config)
    assert config.sera.n_max == mine.sera.n_max and config.data.train_batch_size == \
        mine.data.train_batch_size
    # an edited copy of the launcher's own file under its own name would not be read
    (tmp_path / "sera_trainer.yaml").write_text(block)
    code, _, err = _launch(["--config-dir", str(tmp_path), "--cfg", "job"], tmp_path)
    assert code != 0 and "sera_trainer.yaml would not be read" in err
    assert verl_main.refuse_shadowed_config(["-cd", str(tmp_path), "-cn", "my_run"]) is None


@pytest.mark.slow
def test_the_single_node_launcher_runs_on_cpu_as_far_as_verl_goes(tmp_path):
    """`bash examples/verl/single_node.sh` with a tiny model and data (the GPU check's verl part
    in smoke mode), on this CPU: Ray starts, verl's TaskRunner runs in it, the setup hook
    (SERA's, chained with the probe's) registers the mode, SERA's trainer is built, the training
    set is read into the history, and verl stops where it asks Ray for a GPU. The probe then has
    the trainer submit its first batch as fit() does: verl's data loader fetches it, SERA plans
    it (uniform: nothing is known yet) and the per-prompt counts reach the agent loop's seat."""
    report = verl_part.part_verl(cpu=True, budget=600.0, work=tmp_path)
    out, err = (tmp_path / "launch.log").read_text().split(verl_part.STDERR, 1)
    # Ray forwards a worker's stdout and stderr to the driver's as two streams, each in order.
    _in_order(err, [r"Started a local Ray instance",
                    r"\(TaskRunnerV1 pid=\d+\) sera: SeraTrainerSync built "
                    r"\(trainer.v1.trainer_mode=sera_sync",
                    r"sera: history over 40 training rows \(prompts [0-9a-f]{12}\.\.\.\), 40 "
                    r"prompts an epoch in data loader batches of 8, n0 = 4",
                    r"sera: 8 prompts, counts 4\.\.4, 32 rollouts \(uniform: some prompts have "
                    r"no estimate yet\)",
                    r"ValueError: Total available GPUs 0 is less than total desired GPUs 1\s*$"])
    _in_order(out, [r"ray init kwargs: .*worker_process_setup_hook': "
                    r"'gpu_parts.verl_probe.setup'",
                    rf"\(TaskRunnerV1 pid=\d+\) {verl_part.STOPPED} Total available GPUs 0 "
                    rf"is less than total desired GPUs 1",
                    rf"{verl_part.HANDED} \[4, 4, 4, 4, 4, 4, 4, 4\] for 8 prompts"])
    assert report["exit_code"] != 0 and report["steps"] == 0
    assert all(c["ok"] for c in report["checks"].values()), report["checks"]
    assert set(report["checks"]) == {"trainer_built", "history_read", "stops_at_the_gpu_ask",
                                      "first_plan"}


def _in_order(text: str, patterns: list[str]) -> None:
    at = 0
    for pattern in patterns:
        found = re.compile(pattern).search(text, at)
        assert found, f"{pattern!r} not found after position {at}:\n{text[-4000:]}"
        at = found.end()
