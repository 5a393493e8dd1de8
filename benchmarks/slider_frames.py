"""What a slider's frame costs in the kernel, explorer by explorer (sera.teaching.widgets).

Each explorer's first slider is dragged as tests/test_browser.py drags it (0.4 of the track in
60 moves, three times back and forth), inside an asyncio loop as in a kernel, so that frames are
blitted as they are in the notebook. Printed per explorer: the frames a second the kernel answers
a drag with (one over the median frame: the most a page can show, before the page's own work and
the transport, which tests/test_browser.py measures end to end in Chromium and prints as frames a
second in a drag), the median milliseconds of a frame
(the plot function, then the paint and PNG that send it), the share of frames blitted, and the
frame's cost as a share of drawing the figure whole and encoding it (the frame a plain
matplotlib redraw would send). Ratios are from one run; absolute times drift with the machine.

    python benchmarks/slider_frames.py [explorer ...]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from sera.teaching import widgets

MOVES, DRAGS = 60, 3


async def _drag(explorer) -> tuple[list[float], list[float]]:
    """(seconds per frame, seconds of the plot function per frame) over the drags."""
    plot, plotting = explorer.plot, []

    def timed_plot(**values):
        start = time.perf_counter()
        figure = plot(**values)
        plotting.append(time.perf_counter() - start)
        return figure

    explorer.plot = timed_plot
    control = next(iter(explorer.controls.values()))
    span = 0.4 * (control.max - control.min)
    frames = []
    for _ in range(DRAGS):
        direction = 1 if control.value < (control.min + control.max) / 2 else -1
        origin = control.value
        for move in range(1, MOVES + 1):
            start = time.perf_counter()
            target = origin + direction * span * move / MOVES
            control.value = round(target / control.step) * control.step
            await asyncio.sleep(0)  # the frame runs here, as the kernel's loop would run it
            frames.append(time.perf_counter() - start)
        await asyncio.sleep(widgets.SETTLE * 2)  # the figure comes to rest between drags
    explorer.plot = plot
    return frames, plotting


def _whole(explorer, repeats: int = 10) -> float:
    """Median seconds to draw the explorer's figure whole and encode it."""
    canvas, times = explorer.figure.canvas, []
    for _ in range(repeats):
        start = time.perf_counter()
        canvas.draw()
        widgets._png(canvas)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(names: list[str]) -> None:
    print(f"{'explorer':10s} {'frames/s':>9s} {'frame ms':>9s} {'plot ms':>8s} {'rest ms':>8s} "
          f"{'blitted':>8s} {'whole ms':>9s} {'frame/whole':>12s}")
    for name in names or list(widgets.EXPLORERS):
        explorer = widgets.EXPLORERS[name]()
        frames, plotting = asyncio.run(_drag(explorer))
        frame, plot = statistics.median(frames), statistics.median(plotting)
        whole = _whole(explorer)
        print(f"{name:10s} {1 / frame:9.1f} {frame * 1e3:9.1f} {plot * 1e3:8.1f} "
              f"{(frame - plot) * 1e3:8.1f} {explorer.blits / explorer.draws:8.0%} "
              f"{whole * 1e3:9.1f} {frame / whole:12.2f}")
        explorer.close()


if __name__ == "__main__":
    main(sys.argv[1:])
