"""SERA's Hydra config group for verl: one override turns on the paper's sera, its counts rule
and its observability-guided selection at u_min 0.05 (sera.integrations.verl).

    python -m verl.trainer.main_ppo hydra.searchpath=[pkg://sera.integrations.verl_recipe] \
        +sera=paper [the run's own overrides]

`sera/paper.yaml` (package _global_) sets together what the plug-in needs
(sera.integrations.verl): the V1 trainer in the `sera_sync` mode, the `sera_maxrl` advantage
estimator, Ray's worker setup hook that registers both in every worker, and the allocator's
options under `sera.*` with the paper's values as typed defaults (override them as
`sera.n_min=3`, no `+`). A setting of the run that contradicts the recipe (another estimator under
the mode, say) is refused by name before the first step (refuse_unsupported).
"""
