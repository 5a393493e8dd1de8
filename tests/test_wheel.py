"""The package installed from a wheel and run from another folder, as a user of PyPI would: the
README's allocation snippet runs and a shipped point's stored runs are found and shown."""

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """A fresh virtual environment with the wheel of this checkout installed; the libraries it
    needs come from this environment's site-packages through a .pth line (whose own .pth files,
    the editable install of this checkout among them, are not run), so nothing is downloaded."""
    tmp = tmp_path_factory.mktemp("wheel")
    # built from a copy: the build writes into its source folder, and test workers run side by
    # side
    source = tmp / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".*", "build", "*.egg-info", "__pycache__", "figures", "notebooks", "tests", "docs",
        "benchmarks", "examples"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp / "dist"), str(source)], check=True)
    wheel = next((tmp / "dist").glob("sera-*.whl"))
    env = tmp / "env"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True)
    return python, tmp / "elsewhere"


def _run(python, folder, *args):
    folder.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(python), *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_wheel_is_imported_and_reads_its_shipped_data(wheel_env):
    python, folder = wheel_env
    done = _run(python, folder, "-c", "import sera, sera.runstore as r; print(sera.__file__); "
                "print(r.STUDY_DIR); print(r.ROOT)")
    assert done.returncode == 0, done.stderr
    where, study, root = done.stdout.split()
    assert str(ROOT) not in where and "site-packages" in where
    assert study.endswith("sera/_data/study") and Path(study, "maze-n0-8", "final.csv.gz").exists()
    assert Path(root) == folder.resolve()


def test_the_readme_snippet_runs_from_the_wheel(wheel_env):
    python, folder = wheel_env
    readme = (ROOT / "README.md").read_text()
    snippet = re.search(r"## Allocating a budget.*?```python\n(.*?)```", readme, re.S).group(1)
    done = _run(python, folder, "-c", snippet)
    assert done.returncode == 0, done.stderr


def test_a_shipped_point_is_shown_from_the_wheel(wheel_env):
    python, folder = wheel_env
    done = _run(python, folder, "-m", "sera.confirm", "show", "maze-n0-8")
    assert done.returncode == 0, done.stderr
    stored = re.search(r"maze-n0-8\s+maze\s+8\s+80\s+(\d+)", done.stdout)
    assert stored and int(stored.group(1)) > 0, done.stdout
    assert "measured" in done.stdout
