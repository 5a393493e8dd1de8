"""SERA inside TRL: GSM8K with SmolLM2-360M-Instruct, the paper's setting on one 8-GPU node.

    accelerate launch --num_processes 8 examples/trl/gsm8k.py \
        --model_name_or_path /models/SmolLM2-360M-Instruct \
        --train_file /data/gsm8k/train.jsonl --output_dir /ckpt/smollm2-sera-trl

One optimizer step is one generation batch of 256 questions x 128 rollouts (8 processes x 64
completions x 64 accumulation steps), planned by SERA (sera.integrations.trl.SeraGRPOTrainer,
the paper's sera: counts rule, selection at its own u_min); token-mean loss (TRL's "dapo"), no
KL term, learning rate 1e-5, 2,000 steps, completions of up to 2,048 tokens sampled by vLLM inside
the training processes, a checkpoint with SERA's history every 100 steps.

Started again with the same --output_dir (after a crash, or to train on with a higher
--max_steps), it resumes from the newest checkpoint there that resumes this run
(sera.integrations.trl.last_complete_checkpoint: its save finished, its files are whole, its
history was kept on the same prompts and batch settings); a relaunch of a finished run trains
nothing and saves the final model again. When output_dir holds checkpoint-* folders of which none
resumes this run, it prints why for each and stops rather than train from step 0 beside them:
fix what it names, choose another --output_dir, or pass --start_over to train from step 0 there
anyway (the old checkpoints stay, and a later relaunch takes the newest checkpoint of either run,
so delete them first unless you mean to).

Every GRPOConfig field and every sera_* field (SeraGRPOConfig) is a flag here, and
`--config run.yaml` reads them from a file (TRL's TrlParser): later flags override these
defaults. Nothing is downloaded: the model and GSM8K's training file (jsonl, json or parquet, as
sera.integrations.gsm8k.trl_dataset reads it) come from local paths. tests/test_integration_trl.py
runs this script on the CPU with a tiny model and a few flags (its CPU_FLAGS).
"""

from __future__ import annotations

import dataclasses
import sys

from trl import TrlParser

from sera.integrations.gsm8k import trl_dataset, trl_reward
from sera.integrations.trl import (
    SeraGRPOConfig,
    SeraGRPOTrainer,
    checkpoint_folders,
    last_complete_checkpoint,
)

PAPER = dict(
    num_generations=128,  # n0: SERA's mean rollouts per question
    per_device_train_batch_size=64, gradient_accumulation_steps=64,  # x 8 processes: 32,768
    max_steps=2000, learning_rate=1e-5, loss_type="dapo", beta=0.0, temperature=1.0,
    max_completion_length=2048, bf16=True, gradient_checkpointing=True,
    use_vllm=True, vllm_mode="colocate", save_steps=100, logging_steps=1, report_to="none")


@dataclasses.dataclass
class Paths:
    """Where the model and the data are (local paths: nothing is downloaded)."""

    model_name_or_path: str = dataclasses.field(
        metadata={"help": "A local copy of the model (a Hugging Face folder)."})
    train_file: str = dataclasses.field(
        metadata={"help": "GSM8K's training split as jsonl, json or parquet."})


@dataclasses.dataclass
class Restart:
    """What to do with earlier checkpoints in output_dir."""

    start_over: bool = dataclasses.field(
        default=False,
        metadata={"help": "Train from step 0 although output_dir holds checkpoint-* folders. "
                          "Without it, a run whose output_dir holds checkpoints of which none "
                          "resumes it says why for each and stops. The old checkpoints stay: "
                          "delete them or use another output_dir, or a later relaunch may "
                          "resume the old run's newest."})


def main(argv=None) -> int:
    parser = TrlParser((Paths, Restart, SeraGRPOConfig))
    parser.set_defaults(**PAPER)
    paths, restart, args = parser.parse_args_and_config(argv)
    trainer = SeraGRPOTrainer(model=paths.model_name_or_path, reward_funcs=trl_reward,
                              train_dataset=trl_dataset(paths.train_file), args=args)
    say = print if trainer.accelerator.is_main_process else lambda *a, **k: None
    old = checkpoint_folders(args.output_dir)
    resume = None
    if not old:
        say(f"no checkpoint in {args.output_dir}: a new run from step 0")
    elif restart.start_over:
        say(f"--start_over: a new run from step 0 beside the {len(old)} checkpoint folders in "
            f"{args.output_dir} (newest {old[0]})", file=sys.stderr)
    else:
        try:
            resume = last_complete_checkpoint(args.output_dir, trainer.sera_planner)
        except ValueError as exc:
            say(f"{exc}\nnot training from step 0 beside these checkpoints: fix what is named "
                f"above, choose another --output_dir, or pass --start_over to train from step 0 "
                f"in {args.output_dir} anyway", file=sys.stderr)
            return 1
        say(f"resuming from {resume}")
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model()
    return 0


if __name__ == "__main__":
    sys.exit(main())
