"""The package installed from a wheel and run from another folder, as a user of PyPI would: the
README's allocation snippet runs and a shipped point's stored runs are found and shown. A
student's kernel on that install (the course guide's JupyterHub recipe) finds none of the
instructor's files: no solution, hidden test or worked answer."""

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """A fresh virtual environment with the wheel of this checkout installed; the libraries it
    needs come from this environment's site-packages through a .pth line (whose own .pth files,
    the editable install of this checkout among them, are not run), so nothing is downloaded."""
    tmp = tmp_path_factory.mktemp("wheel")
    # built from a copy: the build writes into its source folder, and test workers run side by
    # side; the copy keeps the notebooks (with the instructor's solutions), as a clone has them
    source = tmp / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".*", "build", "*.egg-info", "__pycache__", "figures", "tests", "docs", "benchmarks",
        "examples"))
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
    folder.mkdir(parents=True, exist_ok=True)
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


def test_a_student_kernel_on_the_wheel_finds_no_instructor_file(wheel_env):
    from sera.teaching import release

    python, folder = wheel_env
    # what the student's kernel can reach: the installed package's files, and where the package
    # looks for the course's notebooks
    done = _run(python, folder / "student", "-c", "import sera, sera.teaching.notebook_files as n;"
                " print(sera.__file__); print(n.ROOT)")
    assert done.returncode == 0, done.stderr
    package, root = (Path(line).resolve() for line in done.stdout.split())
    package = package.parent
    assert not list(package.rglob("*.ipynb")) and not list((root / "notebooks").glob("**/*"))
    # the hidden tests and the worked answers (the exercises' solution code is not looked for:
    # the package's own functions compute the same things, and a student may read them)
    secrets = set()
    for path in (ROOT / "notebooks").glob("**/*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown" or "### BEGIN HIDDEN TESTS" in cell.source:
                secrets |= {line.strip() for body in release.solution_bodies_of(cell.source)
                            for line in body.splitlines() if len(line.strip()) > 30}
    assert len(secrets) > 100
    texts = [p for p in package.rglob("*") if p.is_file() and p.suffix in
             (".py", ".md", ".txt", ".toml", ".yaml", ".yml", ".json", ".csv", ".cfg")]
    assert len(texts) > 50
    for path in texts:
        text = path.read_text(errors="replace")
        found = [line for line in secrets if line in text]
        assert not found, (path, found[:3])


def test_a_student_kernel_on_the_wheel_finds_the_runs_under_sera_home(wheel_env, tmp_path):
    # the guide's recipe: the finished runs copied to a shared folder, SERA_HOME naming it
    python, folder = wheel_env
    shared = tmp_path / "srv" / "sera"
    (shared / "build" / "runs").mkdir(parents=True)
    folder.mkdir(parents=True, exist_ok=True)
    code = "import sera.runstore as r; print(r.RUNS_ROOT); print(r.STUDY_DIR)"
    done = subprocess.run([str(python), "-c", code], cwd=folder, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(folder),
                               "SERA_HOME": str(shared)}, timeout=300)
    assert done.returncode == 0, done.stderr
    runs, study = done.stdout.split()
    assert Path(runs) == (shared / "build" / "runs").resolve()
    assert study.endswith("sera/_data/study")  # the stored studies still come with the wheel
