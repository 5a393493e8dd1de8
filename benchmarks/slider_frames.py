"""What an explorer's slider costs: the kernel's tracks, and the frames a browser draws in a drag.

Kernel part (default), explorer by explorer (sera.teaching.widgets): the stops of all its
controls, the milliseconds a stop of a track costs to draw (drawing instructions recorded from
the plot function's figure), the seconds until every track at one setting is drawn (what the
kernel does after a control is let go), the data sent for them (deflated), a frame asked for on
its own, and that frame's cost as a share of drawing the figure whole and encoding a PNG (what a
page fed one picture per move would wait for).

Browser part (--browser): tests/test_browser.py's notebook and static-site tests in Chromium,
which print, per notebook, the frames a second drawn during a one-second mouse drag, the messages
the page sent meanwhile and the time from release to the last frame, in JupyterLab and on the
static site opened from disk. --busy runs one spinning process per core beside them (a machine
doing other work). Ratios are from one run; absolute times drift with the machine.

    python benchmarks/slider_frames.py [explorer ...]
    python benchmarks/slider_frames.py --browser [--busy]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kernel(names: list[str]) -> None:
    from sera.teaching import widgets
    from sera.teaching.page_figure import pack

    print(f"{'explorer':10s} {'stops':>6s} {'ms/stop':>8s} {'all tracks s':>13s} "
          f"{'sent MB':>8s} {'frame ms':>9s} {'PNG ms':>7s} {'frame/PNG':>10s}")
    for name in names or list(widgets.EXPLORERS):
        explorer = widgets.EXPLORERS[name]()
        start, size, stops = time.perf_counter(), 0, 0
        for key, control in explorer._controls.items():
            size += len(pack(explorer.track(key)))
            stops += len(control.stops)
        tracks = time.perf_counter() - start
        frames = []
        for _ in range(10):
            start = time.perf_counter()
            pack(explorer._tracks.track([explorer.settings()]))
            frames.append(time.perf_counter() - start)
        pngs = []
        for _ in range(10):
            start = time.perf_counter()
            explorer.figure.drawn_png()
            pngs.append(time.perf_counter() - start)
        frame, png = statistics.median(frames), statistics.median(pngs)
        print(f"{name:10s} {stops:6d} {tracks / stops * 1e3:8.1f} {tracks:13.1f} "
              f"{size / 1e6:8.2f} {frame * 1e3:9.1f} {png * 1e3:7.1f} {frame / png:10.2f}")
        explorer.close()


def browser(busy: bool) -> int:
    spinners = []
    if busy:
        cores = len(os.sched_getaffinity(0))
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(cores)]
        print(f"{cores} spinning processes beside the browser")
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "browser", "tests/test_browser.py", "-s", "-q",
             "-p", "no:cacheprovider", "-k", "notebook_in_the_browser or static_site"],
            cwd=ROOT, env={**os.environ, "SERA_REQUIRE_BROWSER": "1"}, capture_output=True,
            text=True)
    finally:
        for spinner in spinners:
            spinner.kill()
    for line in run.stdout.splitlines():
        if "frames/s" in line:
            print(line.strip())
    if run.returncode:
        print(run.stdout[-3000:], run.stderr[-2000:])
    return run.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("explorers", nargs="*")
    parser.add_argument("--browser", action="store_true", help="Chromium's frames in a drag")
    parser.add_argument("--busy", action="store_true", help="one spinning process per core")
    args = parser.parse_args()
    if args.browser:
        return browser(args.busy)
    kernel(args.explorers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
