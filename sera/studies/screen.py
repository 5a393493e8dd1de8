"""The screen: how far an arm's training reward falls behind MaxRL's early in a run.

A collapse of the paper's SERA on the long math runs shows long before its held-out Pass@1 does:
over epochs 2-5 (the first epoch plans uniform counts; from the second the history plans) the
arms that later fell behind MaxRL already earned less training reward. `gaps` measures it from a
point's stored metrics, per arm against the point's control (MaxRL) at the same seed, so that a
remedy candidate can be screened with short runs (math-n0-4-80-avx2) before it is confirmed with
long ones.

The statistic is the mean over the steps of epochs 2-5 of each step's training reward (the mean
success rate over the step's prompts, sera.trainers.loop), the arm's minus MaxRL's at the same
seed, in points; the interval is Student-t over seeds. A candidate passes when its mean is at
least PASS. The rule was set on the math runs stored before it, where it separated every arm that
ended more than 5 points behind MaxRL at Pass@1 from every arm that ended within 3; a later arm
breaks it (MISSES: an arm that ended within 3 points yet fails the screen), so the rule is an
in-sample one. On the mazes it
does not (there `sera lr-half` trails MaxRL's training reward as far as `sera` does, yet ends
far closer at Pass@1), so it screens math candidates only. The results page shows each arm's
gap beside its final Pass@1 gain: the screen ranks candidates and decides nothing on its own.
"""

from __future__ import annotations

import pandas as pd

from sera.studies import confirm
from sera.studies.confirm.storage import stored_table
from sera.studies.diagnosis import paired

EPOCHS = (2, 5)
"""The epochs the screen averages over, counted from 1, both included."""
PASS = -1.0
"""The least mean gap, in points of training reward, at which a candidate passes the screen."""
MISSES = (("math-n0-4-320-lr", "sera-evidence-waterline"),)
"""Long math arms the rule misclassifies: within 3 points of MaxRL at Pass@1 with an interval
reaching zero, yet below PASS (the results page gives both numbers)."""


def steps_of(name: str) -> tuple[int, int]:
    """The first and last step (both included) of the screen's epochs at a point: an epoch is
    the point's training prompts over its batch size."""
    config = confirm.point(name).config
    per_epoch = config.n_train // config.batch_size
    return (EPOCHS[0] - 1) * per_epoch, EPOCHS[1] * per_epoch - 1


def gaps(name: str) -> pd.DataFrame:
    """Per arm of a stored point other than MaxRL: the mean gap in points, its 95% interval over
    the seeds both arms ran, the seeds, the per-seed gaps and whether it passes (mean >= PASS).
    Empty where the point's runs stop before the screen's last step."""
    first, last = steps_of(name)
    metrics = stored_table(name, "metrics")
    rewards = metrics[(metrics["metric"] == "train_reward") & metrics["step"].between(first, last)]
    columns = ["point", "arm", "seeds", "gap", "low", "high", "per_seed", "passes"]
    if rewards.empty or int(rewards["step"].max()) < last:
        return pd.DataFrame(columns=columns)
    per_seed = 100 * rewards.groupby(["seed", "arm"])["value"].mean().unstack("arm")
    control = confirm.point(name).control
    if control not in per_seed.columns:
        return pd.DataFrame(columns=columns)
    rows = []
    for arm in per_seed.columns.drop(control):
        gap = paired(per_seed, arm, control, 0.95)
        differences = (per_seed[arm] - per_seed[control]).dropna()
        rows.append({"point": name, "arm": arm, "seeds": gap["seeds"], "gap": gap["gain"],
                     "low": gap["low"], "high": gap["high"],
                     "per_seed": tuple(float(v) for v in differences),
                     "passes": gap["gain"] >= PASS})
    return pd.DataFrame(rows, columns=columns)
