"""The study notebooks' quoted numbers: every quoted cell is its template filled from the stored
runs (python -m sera.teaching.quotes), no quoted cell writes a decimal by hand, and each field
kind reads the table it names (checked against the tables directly)."""

import nbformat
import pytest

from sera.studies import confirm, diagnosis
from sera.teaching import quotes
from sera.teaching.notebook_files import ROOT, notebooks

QUOTED = [(path, cell) for path in notebooks(ROOT / "notebooks")
          for cell in nbformat.read(path, as_version=4).cells
          if quotes.TAG in cell.metadata.get("tags", [])]


def test_the_results_notebooks_quote_from_the_stored_runs():
    assert {path.name[:2] for path, _ in QUOTED} >= {"05", "06", "07", "08"}
    assert quotes.stale() == [], "run python -m sera.teaching.quotes"


@pytest.mark.parametrize("path, cell", QUOTED, ids=[f"{p.name[:2]}: {c.source[:30]}"
                                                    for p, c in QUOTED])
def test_no_quoted_cell_writes_a_decimal_by_hand(path, cell):
    template, constants = cell.metadata["sera"]["template"], cell.metadata["sera"].get(
        "constants", [])
    assert quotes.FIELD.search(template), path.name
    assert quotes.loose_decimals(template, constants) == [], path.name
    assert all(c in template for c in constants), path.name  # each declared constant is used


@pytest.mark.parametrize("path", [p for p in notebooks(ROOT / "notebooks")
                                  if p.name[:2] in ("05", "06", "07", "08")],
                         ids=lambda p: p.name[:2])
def test_no_prose_check_pins_a_decimal(path):
    checks = [_code(c.source) for c in nbformat.read(path, as_version=4).cells
              if "prose-check" in c.metadata.get("tags", [])]
    assert checks and all(quotes.loose_decimals(source) == [] for source in checks)


def _code(source: str) -> str:
    """A cell's code without its strings and comments (a method named rl2ml-0.5-... is not a
    pinned number)."""
    import io
    import tokenize

    kept = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in (tokenize.STRING, tokenize.COMMENT)]
    return " ".join(kept)


def test_each_field_kind_reads_its_table():
    table = confirm.compare("maze-n0-8-long").set_index(["arm", "k"])
    row = table.loc[("sera-rate", 32)]
    assert quotes.value("gain", "maze-n0-8-long", "sera-rate", 32) == \
        f"{100 * row['measured']:+.1f}"
    assert quotes.value("interval", "maze-n0-8-long", "sera-rate", 32) == \
        f"{100 * row['low']:+.1f} to {100 * row['high']:+.1f}"
    assert quotes.value("size", "maze-n0-8-long", "sera-rate", 1) == \
        f"{abs(100 * table.loc[('sera-rate', 1), 'measured']):.1f}"
    assert quotes.value("seeds", "maze-n0-8-long", "sera-rate") == f"{int(row['seeds'])}"
    guess = confirm.read_prediction("maze-hard-n0-16").set_index(["arm", "k"])
    assert quotes.value("predicted", "maze-hard-n0-16", "sera-rate", 1) == \
        f"{100 * guess.loc[('sera-rate', 1), 'gain']:+.1f}"  # a point with no runs yet
    drift = diagnosis.drift(confirm.load("math-n0-4-long").metrics).set_index("arm")
    below = round(drift.loc["sera-rate", "below"] * drift.loc["sera-rate", "seeds"])
    assert quotes.value("below", "math-n0-4-long", "sera-rate") == f"{below}"
    assert int(quotes.value("above", "math-n0-4-long", "sera-rate")) == \
        drift.loc["sera-rate", "seeds"] - below
    with pytest.raises(KeyError, match="the stored runs hold no"):
        quotes.fill("{gain|maze-n0-8-long|no-such-arm|32}")
    assert quotes.loose_decimals("{gain|a|b|1} and 0.5, not 12 or x1.5") == ["0.5"]


def test_no_release_carries_a_template(tmp_path):
    # an answer key's template holds the answers: the student copy and the site drop it
    from sera.teaching import release

    for path, cell in QUOTED:
        given = release.student_cell(cell)
        assert "sera" not in given.metadata, path.name
        if "### BEGIN SOLUTION" in cell.source:
            assert "BEGIN SOLUTION" not in str(given), path.name


def test_stripping_a_notebook_keeps_its_templates(tmp_path):
    # make figures strips every notebook it runs; a quoted cell's template must survive it
    from sera.teaching.notebook_files import strip

    path = next(p for p, _ in QUOTED)
    copy = tmp_path / path.name
    copy.write_text(path.read_text())
    strip(copy)
    kept = [c for c in nbformat.read(copy, as_version=4).cells
            if quotes.TAG in c.metadata.get("tags", [])]
    assert kept and all("template" in c.metadata.get("sera", {}) for c in kept)


def _bracket(gain, low, high, scale=100):
    return f"{scale * gain:+.1f} [{scale * low:+.1f}, {scale * high:+.1f}]"


def test_the_diagnosis_kinds_read_their_tables():
    """Each diagnosis kind against its table, recomputed here from the stored runs."""
    import numpy as np
    from scipy import stats

    from sera.results import paired_gain
    from sera.studies import screen

    maze = confirm.load("maze-n0-8-long")
    profile = confirm.profile(confirm.point("maze-n0-8-long"))
    bands = diagnosis.band_gains(maze.allocations, profile).astype({"band": str})
    row = bands.set_index(["arm", "band"]).loc[("sera-rate", "never solved")]
    field = "maze-n0-8-long", "sera-rate@never solved"
    assert quotes.value("band_bracket", *field) == _bracket(row["gain"], row["low"], row["high"])
    assert quotes.value("band_rollouts", *field) == f"{row['rollouts']:.1f}"
    assert quotes.value("band_signal", *field) == f"{100 * row['signal']:.0f}"
    every = diagnosis.band_gains(maze.allocations).set_index("arm").loc["sera-rate"]
    assert quotes.value("band_size", "maze-n0-8-long", "sera-rate@all") == \
        f"{abs(100 * every['gain']):.1f}"
    cover = diagnosis.coverage(maze.final).set_index(["arm", "share"]).loc[("sera-rate", "solid")]
    assert quotes.value("cover_bracket", "maze-n0-8-long", "sera-rate@solid") == \
        _bracket(cover["gain"], cover["low"], cover["high"])
    # the share of rollouts in mixed groups, by hand from the allocations: per seed and epoch
    # the rollouts of groups with 0 < successes < rollouts over all, then the mean over seeds
    mine = maze.allocations[maze.allocations["method"] == "maxrl"].copy()
    count = "rollouts" if "rollouts" in mine else "n"
    mine["mixed"] = np.where((mine["successes"] > 0) & (mine["successes"] < mine[count]),
                             mine[count], 0)
    shares = mine.groupby(["seed", "epoch"])[["mixed", count]].sum()
    shares = (shares["mixed"] / shares[count]).groupby("epoch").mean()
    later = 100 * shares[shares.index >= 4]
    assert quotes.value("signal_range", "maze-n0-8-long", "maxrl@4") == \
        f"{later.min():.0f}–{later.max():.0f}"
    math = confirm.load("math-n0-4-320-avx2")
    evidence = diagnosis.evidence(math.allocations)
    assert quotes.value("evidence_second", "math-n0-4-320-avx2", "sera lr-half") == \
        f"{evidence.loc['sera lr-half', 'second']:.1f}"
    gap = screen.gaps("math-n0-4-80-avx2").set_index("arm").loc["sera"]
    assert quotes.value("screen_bracket", "math-n0-4-80-avx2", "sera") == \
        _bracket(gap["gap"], gap["low"], gap["high"], scale=1)
    # A vs B: the paired gain of two arms of a point, per seed, with its Student-t interval
    final = math.final.assign(method=math.final["arm"])
    per_seed = paired_gain(final, "sera lr-half", "maxrl lr-half", by=(), ks=[1]).iloc[0]
    per_seed = np.asarray(per_seed["per_seed"])
    low, high = stats.t.interval(0.95, per_seed.size - 1, loc=per_seed.mean(),
                                 scale=stats.sem(per_seed))
    assert quotes.value("bracket", "math-n0-4-320-avx2", "sera lr-half vs maxrl lr-half", 1) == \
        _bracket(per_seed.mean(), low, high)
    drift = diagnosis.drift(confirm.load("math-n0-4-long").metrics, "response_length", None)
    drift = drift.set_index("arm").loc["sera-rate"]
    assert quotes.value("length_change_bracket", "math-n0-4-long", "sera-rate") == \
        _bracket(drift["change"], drift["low"], drift["high"], scale=1)
    with pytest.raises(KeyError):
        quotes.value("band_bracket", "maze-n0-8-long", "sera-rate@no such band")


def test_the_tuning_kinds_read_the_stored_sweeps():
    """A method's gain over sera-rate with each at its own best rate, recomputed here from the
    sweep's final table: the best rate by mean tuning Pass@1, then per-seed paired gains."""
    import numpy as np
    from scipy import stats

    from sera.studies import tuning

    results = tuning.load("maze-lr")
    tune = results.metrics[(results.metrics["metric"] == "tune_pass")
                           & (results.metrics["k"] == 1)]
    last = tune[tune["step"] == tune.groupby(["method", "lr", "seed"])["step"].transform("max")]
    best = last.groupby(["method", "lr"])["value"].mean().groupby("method").idxmax()
    best = {method: lr for method, (_, lr) in best.items()}
    assert quotes.value("best_lr", "maze-lr", "knapsack") == f"{best['knapsack']:.4g}"
    final = results.final
    runs = {m: final[(final["method"] == m) & (final["lr"] == best[m])] for m in ("dapo",
                                                                               "sera-rate")}
    per_seed = []
    for seed in sorted(set(runs["dapo"]["seed"]) & set(runs["sera-rate"]["seed"])):
        a, b = (runs[m][runs[m]["seed"] == seed].sort_values("prompt") for m in runs)
        per_seed.append(np.mean(a["correct"].to_numpy() / a["n"].to_numpy()
                                - b["correct"].to_numpy() / b["n"].to_numpy()))
    per_seed = np.array(per_seed)
    low, high = stats.t.interval(0.95, per_seed.size - 1, loc=per_seed.mean(),
                                 scale=stats.sem(per_seed))
    assert quotes.value("tuned_bracket", "maze-lr", "dapo", 1) == \
        _bracket(per_seed.mean(), low, high)
    stopped = tuning.load("digits-lr").metrics
    stopped = stopped[stopped["metric"] == "stopped"]
    assert quotes.value("stopped", "digits-lr", "dapo+dapo-maxrl") == \
        f"{stopped['method'].isin(['dapo', 'dapo-maxrl']).sum()}"
    assert quotes.value("stopped_last", "digits-lr", "dapo+dapo-maxrl") == \
        f"{stopped['step'].max()}"


def test_the_step_kinds_read_the_stored_learning_rate_sweep():
    """sera at its chosen step minus MaxRL at its own on the odd held-out mazes, recomputed from
    the final table: each method's step by mean Pass@1 on the even mazes, then Welch's interval
    from scipy's t distribution over the two cells' per-seed means."""
    import math

    import numpy as np
    from scipy import stats

    from sera.studies import sweep
    from sera.studies.confirm.storage import stored_table

    name = "maze-n0-8-long-lr"
    final = stored_table(name, "final")
    final = final.assign(step=final["arm"].map(sweep.multipliers(name)),
                         share=final["correct"] / final["n"])
    even = final[final["prompt"] % 2 == 0]
    by_cell = even.groupby(["method", "step", "seed"])["share"].mean().groupby(
        ["method", "step"]).mean()
    best = {m: by_cell[m].idxmax() for m in ("maxrl", "sera")}
    for method, step in best.items():
        assert quotes.value("step_chosen", name, method) == f"{step:g}"
    odd = final[final["prompt"] % 2 == 1]
    a, b = (odd[(odd["method"] == m) & (odd["step"] == best[m])].groupby("seed")["share"].mean()
            for m in ("sera", "maxrl"))
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = stats.t.ppf(0.975, dof) * np.sqrt(va + vb)
    gain = a.mean() - b.mean()
    assert quotes.value("step_bracket", name, "sera", 1) == _bracket(gain, gain - half,
                                                                       gain + half)
    # the frontier gap's estimate on the odd mazes, from Pass@32 by its combinatorial definition:
    # sera's chosen cell minus the best MaxRL cell whose Pass@1 is at least its own
    def pass_k(part, k):
        n, c = part["n"].to_numpy(), part["correct"].to_numpy()
        return np.mean([1.0 if ni - ci < k else 1.0 - math.comb(ni - ci, k) / math.comb(ni, k)
                        for ni, ci in zip(n, c, strict=True)])

    cells = {(m, step): (np.mean([pass_k(r, 1) for _, r in part.groupby("seed")]),
                         np.mean([pass_k(r, 32) for _, r in part.groupby("seed")]))
             for (m, step), part in odd.groupby(["method", "step"])}
    x, y = cells[("sera", best["sera"])]
    expected = y - max(v32 for (m, _), (v1, v32) in cells.items() if m == "maxrl" and v1 >= x)
    said = quotes.value("frontier_bracket", name, "sera", 32)
    assert said.startswith(f"{100 * expected:+.1f} [")
    with pytest.raises(KeyError, match="unknown field kind"):
        quotes.value("step_nothing", name, "sera", 1)
