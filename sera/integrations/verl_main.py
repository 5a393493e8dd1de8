"""`python -m sera.integrations.verl_main [verl overrides]`: verl's main_ppo with SERA built in.

The config is verl's ppo_trainer with the paper's sera (sera.integrations.verl_recipe's
sera_trainer.yaml: the sera_sync mode, the sera_maxrl estimator, the Ray workers' setup hook and
the allocator's options), so no search path or `+sera=paper` can be lost in a shell script or a
job wrapper. Overrides follow as on main_ppo (`sera.n_min=3`, `actor_rollout_ref.rollout.n=16`).
Before Ray starts, the config is checked for a piece of SERA removed by an override
(refuse_partial) and for settings SERA cannot train under (refuse_unsupported); then verl's own
check and run follow, unchanged. Hydra's own flags work too: `--cfg job` prints the config.
"""

from __future__ import annotations

import hydra
from verl.trainer import main_ppo

from sera.integrations import verl as plugin


@hydra.main(config_path="verl_recipe", config_name="sera_trainer", version_base=None)
def main(config) -> None:
    plugin.refuse_partial(config)
    plugin.refuse_unsupported(config)
    main_ppo.main.__wrapped__(config)  # verl's own: its configuration check, then the run


if __name__ == "__main__":
    main()
