"""The time spent in SERA's own bookkeeping (planning and the success history), on demand.

The methods that plan a batch or keep the history carry `@timed`; nothing is measured until a
`Clock` is open, and a call inside another timed call is counted once, with its caller:

    with timing.Clock() as clock:
        trainer.train()
    clock.seconds   # wall time inside SERA's planning and history

A renamed or new method keeps its timing by keeping its decorator (benchmarks/gpu_check.py reads
the clock to report SERA's share of a training step).
"""

from __future__ import annotations

import functools
import time

_OPEN: list[Clock] = []


class Clock:
    """Seconds spent inside @timed calls while the clock is open (the innermost open clock)."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0

    def __enter__(self) -> Clock:
        _OPEN.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _OPEN.remove(self)


def timed(function):
    """Count the wall time of each call of `function` on the open Clock, if there is one."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if not _OPEN:
            return function(*args, **kwargs)
        clock = _OPEN[-1]
        clock._depth += 1
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            clock._depth -= 1
            if clock._depth == 0:
                clock.seconds += time.perf_counter() - start
                clock.calls += 1

    wrapper.timed = True
    return wrapper
