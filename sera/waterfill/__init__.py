"""The water level and its integer roundings: the numerical core behind sera.allocate.

The continuous waterline is solved from the hazards h = -log(1-p) (`hazard`), by one sort or, for
large batches, by selection in expected linear time (`level`); the paper's rounding and the exact
integer max-min both run in O(B) after it (`rounding`). The sum that fixes the level is taken
directly over the prompts it concerns (never as a difference of running totals that include a
huge 1/h), so a batch may mix p = 1e-300 with p = 1 - 1e-16. Derivations:
notebooks/02_waterline_allocation.ipynb; the readable specification of both roundings is kept in
tests/test_allocation.py.

No module imports one after it in the order hazard, level, rounding (rounding reads level's
Solution and sampling thresholds; hazard imports neither). The names below are re-exported so that
`sera.waterfill.solve` and the like read as before the split; a patch meant to change what the
code calls (a test's mock of SELECT_FROM, say) goes on each module that looks the name up, not on
this package. The attribute `sera.waterfill.hazard` is the function; its module is imported by its
full name (`from sera.waterfill.hazard import ...`, or mock.patch("sera.waterfill.hazard.<name>")).
"""

# The private names, imported as themselves, are re-exported for the tests (the readable
# specifications) and benchmarks/allocation_speed.py, which read them as waterfill.<name>.
from sera.waterfill.hazard import _log1p_vectorised as _log1p_vectorised
from sera.waterfill.hazard import hazard
from sera.waterfill.level import _ROUNDS as _ROUNDS
from sera.waterfill.level import SAMPLE, SELECT_FROM, Interior, Solution, select_level, solve
from sera.waterfill.level import _largest_below as _largest_below
from sera.waterfill.level import _pivots as _pivots
from sera.waterfill.rounding import _bracket as _bracket
from sera.waterfill.rounding import _clears as _clears
from sera.waterfill.rounding import _extremes as _extremes
from sera.waterfill.rounding import _near as _near
from sera.waterfill.rounding import _smallest as _smallest
from sera.waterfill.rounding import pick_keys, round_exact, round_paper

__all__ = [
    "SAMPLE",
    "SELECT_FROM",
    "Interior",
    "Solution",
    "hazard",
    "pick_keys",
    "round_exact",
    "round_paper",
    "select_level",
    "solve",
]
