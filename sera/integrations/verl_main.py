"""`python -m sera.integrations.verl_main [verl overrides]`: verl's main_ppo with SERA built in.

The config is verl's ppo_trainer with the paper's sera (sera.integrations.verl_recipe's
sera_trainer.yaml: the sera_sync mode, the sera_maxrl estimator, the Ray workers' setup hook and
the allocator's options), so no search path or `+sera=paper` can be lost in a shell script or a
job wrapper. Overrides follow as on main_ppo (`sera.n_min=3`, `actor_rollout_ref.rollout.n=16`).
Before Ray starts, the config is checked for SERA removed by the overrides
(refuse_without_sera), a piece of it removed (refuse_partial), and settings SERA cannot train
under, an infeasible budget among them (refuse_unsupported); then verl's own check and run
follow, unchanged. Hydra's own flags work too: `--cfg job` prints the config, and
`--config-dir DIR --config-name NAME` composes a YAML of yours (docs/scaling.md has the pattern:
both search paths, `defaults: [ppo_trainer, sera: paper, _self_]`). A file named
sera_trainer.yaml in DIR would not be read (the package's comes first in Hydra's search path),
so it is refused by name.
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import OmegaConf
from verl.trainer import main_ppo

from sera.integrations import verl as plugin

CONFIG = "sera_trainer"


def refuse_shadowed_config(argv) -> None:
    """Raise ValueError when --config-dir holds a sera_trainer.yaml that Hydra would pass over
    for the package's own (the run would silently train without the user's edits)."""
    folder, name = None, CONFIG
    for i, arg in enumerate(argv):
        for flags, value in ((("--config-dir", "-cd"), "dir"), (("--config-name", "-cn"), "name")):
            given = next((arg.split("=", 1)[1] for f in flags if arg.startswith(f + "=")), None)
            if given is None and arg in flags and i + 1 < len(argv):
                given = argv[i + 1]
            if given is not None:
                folder, name = (given, name) if value == "dir" else (folder, given)
    if folder and name == CONFIG and os.path.isfile(os.path.join(folder, f"{CONFIG}.yaml")):
        raise ValueError(f"{os.path.join(folder, CONFIG + '.yaml')} would not be read: the "
                         f"package's own {CONFIG}.yaml comes first in Hydra's search path. Give "
                         f"your copy another name and pass --config-name with it (with "
                         f"hydra.searchpath [pkg://verl.trainer.config, "
                         f"pkg://sera.integrations.verl_recipe] and defaults [ppo_trainer, "
                         f"sera: paper, _self_], as docs/scaling.md shows)")


def refuse_without_sera(config) -> None:
    """Raise ValueError when overrides removed every piece that asks for SERA (the sera: block
    and the sera_sync mode): this entry point runs SERA, verl's main_ppo runs the rest."""
    if OmegaConf.select(config, "sera") is None and \
            OmegaConf.select(config, "trainer.v1.trainer_mode") != plugin.MODE:
        raise ValueError(f"the overrides removed SERA from this config (no sera: block, "
                         f"trainer.v1.trainer_mode="
                         f"{OmegaConf.select(config, 'trainer.v1.trainer_mode')}): "
                         f"sera.integrations.verl_main runs SERA; for a run without it use "
                         f"verl's own `python -m verl.trainer.main_ppo`")


@hydra.main(config_path="verl_recipe", config_name=CONFIG, version_base=None)
def main(config) -> None:
    refuse_without_sera(config)
    plugin.refuse_partial(config)
    plugin.refuse_unsupported(config)
    main_ppo.main.__wrapped__(config)  # verl's own: its configuration check, then the run


if __name__ == "__main__":
    try:
        refuse_shadowed_config(sys.argv[1:])
    except ValueError as error:
        sys.exit(f"sera.integrations.verl_main: {error}")
    main()
