"""`make test` on a disk too small for an extra environment: reported, not failed (unless asked)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """probe:
\t@rm -f build/not-run.txt
\t$(call extra_tests,vision,ran-vision)
\t$(call extra_tests,scale,ran-scale)
ran-%:
\t@echo ran $*
"""


def _make(tmp_path, *args):
    env = {**os.environ, "MAKEFILES": str(tmp_path / "probe.mk")}  # seen by the sub-makes too
    return subprocess.run(["make", "--no-print-directory", "probe", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True)


@pytest.fixture
def checkout(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "probe.mk").write_text(PROBE)
    (tmp_path / "build").mkdir()
    return tmp_path


def test_an_environment_without_room_is_reported_and_the_rest_runs(checkout):
    done = _make(checkout, "VISION_GB=1000000", "SCALE_GB=0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ran scale" in done.stdout and "ran vision" not in done.stdout
    assert "needs about 1000000 GB of free disk" in done.stderr
    not_run = (checkout / "build" / "not-run.txt").read_text()
    assert not_run == "ran-vision: .venv-vision does not fit on this disk\n"


def test_require_all_envs_turns_a_short_disk_into_a_failure(checkout):
    done = _make(checkout, "VISION_GB=1000000", "REQUIRE_ALL_ENVS=1")
    assert done.returncode != 0
    assert "ran vision" not in done.stdout and "ran scale" not in done.stdout


def test_an_environment_with_room_runs(checkout):
    done = _make(checkout, "VISION_GB=0", "SCALE_GB=0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ran vision" in done.stdout and "ran scale" in done.stdout
    assert not (checkout / "build" / "not-run.txt").exists()


SIDE_BY_SIDE = """slow-ok:
\t@sleep 2; date +%s.%N > build/browser-done; echo browser ok
slow-fail:
\t@sleep 2; echo browser broke; exit 1
quick-%:
\t@date +%s.%N > build/extras-done; echo extras $*; [ $* = ok ]
"""


@pytest.mark.parametrize("browser, extras, passes", [("ok", "ok", True), ("fail", "ok", False),
                                                     ("ok", "fail", False)])
def test_the_browser_tests_run_beside_the_extras_and_either_failure_counts(checkout, browser,
                                                                           extras, passes):
    (checkout / "probe.mk").write_text(SIDE_BY_SIDE)
    done = subprocess.run(["make", "--no-print-directory", "test-after-suite",
                           f"BROWSER_TARGET=slow-{browser}", f"EXTRAS_TARGET=quick-{extras}"],
                          cwd=checkout, env={**os.environ, "MAKEFILES": str(checkout / "probe.mk")},
                          capture_output=True, text=True)
    assert (done.returncode == 0) == passes, done.stdout + done.stderr
    assert f"extras {extras}" in done.stdout
    log = "browser ok" if browser == "ok" else "browser broke"
    assert done.stdout.index(f"extras {extras}") < done.stdout.index(log)  # printed after both
    assert log in (checkout / "build" / "browser.log").read_text()
    if browser == "ok":  # the extras finished while the browser target was still sleeping
        finished = {name: float((checkout / "build" / f"{name}-done").read_text())
                    for name in ("extras", "browser")}
        assert finished["extras"] < finished["browser"] - 1
