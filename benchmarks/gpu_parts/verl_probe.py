"""A worker setup hook for launching SERA's verl trainer on a CPU (gpu_parts.verl in smoke mode,
tests/test_verl_launch.py): SERA's hook chained with this one, as a user chains theirs
(sera.integrations.verl.chained).

verl 0.9.1 stops on a machine without a GPU where its trainer asks Ray for the GPUs of its
resource pool, after the trainer is built and the data is read. There the probe prints verl's
error, hands the trainer a recorder in place of the agent loop manager (whose rollout servers
need a GPU), and lets the trainer submit its first batch as fit() does: verl's own data loader
fetches it, SERA's hook plans it, verl puts it into TransferQueue, and the recorder prints the
per-prompt counts it was handed. Then verl's error goes on, so the run ends where verl ends.
"""

import functools

from gpu_parts.verl import HANDED, STOPPED
from sera.integrations import verl as plugin


class Recorder:
    """Stands in for verl's AgentLoopManagerTQ: prints what a rollout would have been given."""

    def generate_sequences(self, batch):
        counts = list(batch[plugin.COUNT_KEY])
        print(f"{HANDED} {counts} for {len(batch['uid'])} prompts", flush=True)


@plugin.chained
def setup() -> None:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    init = PPOTrainer.init

    @functools.wraps(init)
    def init_then_plan(self):
        try:
            init(self)
        except ValueError as error:
            print(f"{STOPPED} {error}", flush=True)
            self.agent_loop_manager = Recorder()
            self.global_steps = 1
            self._submit_batch_to_rollout(self._next_train_batch())
            raise

    PPOTrainer.init = init_then_plan
