"""Registration in one place: a new task is one `register_task` call beside its configuration and
a trainer module with a `build`; a new allocation rule is one function and one `Rule` in
sera.baselines. A toy of each is registered here and found everywhere it should be."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sera
from sera.studies import confirm, tuning
from sera.trainers import presets

TOY_TRAINER = "def build(config):\n    return ('toy study', config.steps, config.method)\n"


@pytest.fixture
def toy_task(tmp_path, monkeypatch):
    """A task registered as a new one would be: its presets and its trainer module."""
    (tmp_path / "toy_trainer.py").write_text(TOY_TRAINER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(presets, "TASKS", dict(presets.TASKS))  # the registration is undone after
    return presets.register_task("toy", {"fast": presets.MazeConfig(steps=3, size=7)},
                                 trainer="toy_trainer")


def test_a_task_registers_once_and_the_points_and_sweeps_find_it(toy_task, tmp_path,
                                                                  monkeypatch):
    assert presets.TASKS["toy"].presets is toy_task and "toy" in presets.sequence_tasks()
    with pytest.raises(ValueError, match="task 'toy' is registered twice"):
        presets.register_task("toy", {"fast": presets.MazeConfig()})
    with pytest.raises(ValueError, match="task 'empty' has no presets"):
        presets.register_task("empty", {})
    # a confirmation point names it in its point.toml, and its runs are built by its trainer
    folder = tmp_path / "study" / "toy-point"
    folder.mkdir(parents=True)
    (folder / "point.toml").write_text(textwrap.dedent("""\
        task = "toy"
        preset = "fast"
        seeds = 6
        treatment = "sera"
        [config]
        steps = 4
        [[arms]]
        method = "maxrl"
        [[arms]]
        method = "sera"
        """))
    point = confirm.registered(tmp_path / "study")["toy-point"]
    assert (point.task, point.config.steps, point.config.size) == ("toy", 4, 7)
    assert confirm.builder("toy")(point.configs(tmp_path / "runs")[0]) == \
        ("toy study", 4, "maxrl")
    # a tuning sweep of it trains through the same builder
    built = []
    monkeypatch.setattr(tuning.grid, "work_through",
                        lambda configs, build, **_: built.append([build(c) for c in configs]))
    monkeypatch.setattr(tuning, "load", lambda name: name)
    sweep = tuning.Sweep("toy-lr", "toy", toy_task["fast"], ("maxrl",), seeds=1, factors=(1.0,))
    assert tuning.run(sweep, tmp_path / "tuning", progress=False) == "toy-lr"
    assert built == [[("toy study", 3, "maxrl")]]
    # a task that is not registered is refused by name
    with pytest.raises(ValueError, match="task must be one of .*'toy'"):
        confirm.builder("sudoku")


# The toy rule, written into a copy of the package as a contributor would add it: the function
# and its Rule in sera/baselines.py, nothing else.
TOY_RULE = '''

def toy(p, budget, n_min, n_max, n0):
    """Everything beyond n_min to the first prompt (a toy rule)."""
    counts = np.full(len(p), n_min, dtype=np.int64)
    counts[0] += budget - counts.sum()
    return counts


COMPARED.update(_checks.registry([*COMPARED.items(), ("toy", Rule(
    "toy", toy, "#123456", "arXiv:0000.00000; code: example/toy", raft_advantages,
    "a toy rule: the budget beyond n_min to the first prompt"))], "allocation rule"))
BASELINE_RULES["toy"] = toy
'''

CHECK = '''
import numpy as np
import sera
from sera.allocation import RULES
from sera.methods import METHODS, supported
from sera.plotting.style import method_style

counts = sera.allocate(np.array([0.2, 0.5, 0.7]), 12, 2, 8, rule="toy").counts
print(counts.tolist(), "toy" in RULES, METHODS["toy"].allocator, METHODS["toy-maxrl"].maxrl,
      METHODS["toy"].weighted, "toy-maxrl" in supported(exact=False),
      method_style("toy").color, method_style("toy-maxrl").ls, sera.__file__)
'''


def test_a_rule_registered_in_baselines_alone_reaches_every_table(tmp_path):
    package = Path(sera.__file__).parent
    copy = tmp_path / "sera"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "_data"))
    baselines = copy / "baselines.py"
    source = baselines.read_text()
    anchor = ('"""The one-shot rules SERA is compared with: name -> (p, budget, n_min, n_max, '
              'n0) -> counts."""\n')
    assert source.count(anchor) == 1
    baselines.write_text(source.replace(anchor, anchor + TOY_RULE))
    found = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True,
                           text=True, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert found.returncode == 0, found.stderr
    *said, where = found.stdout.split()
    assert where.startswith(str(copy))  # the copy ran, not the package under test
    assert said == ["[8,", "2,", "2]", "True", "toy", "True", "False", "True", "#123456", "--"]


def test_every_compared_rule_is_cited_and_styled_with_its_variant():
    page = (Path(__file__).parents[1] / "docs" / "baselines.md").read_text()
    from sera.baselines import COMPARED
    from sera.methods import METHODS
    from sera.plotting.style import method_style

    for rule in COMPARED.values():
        assert rule.source.split(";")[0].replace("arXiv:", "") in page, rule.name
        assert METHODS[rule.name].allocator == rule.name
        assert method_style(rule.name).color == rule.colour
        if rule.maxrl_variant:
            assert METHODS[f"{rule.name}-maxrl"].maxrl
            assert method_style(f"{rule.name}-maxrl").color == rule.colour
        else:
            assert f"{rule.name}-maxrl" not in METHODS
