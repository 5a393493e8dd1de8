#!/usr/bin/env bash
# SERA in verl on one node of 8 GPUs: SmolLM2-360M-Instruct on GSM8K, the paper's setting
# (256 prompts x 128 rollouts a step, 2,000 steps, token-mean), checkpoints with SERA's
# history every 100 steps, validation on GSM8K-Platinum every 100 steps, logs on the console.
#
#   MODEL=/models/SmolLM2-360M-Instruct DATA=/data/sera-gsm8k CKPT=/ckpt/smollm2-sera \
#       bash examples/verl/single_node.sh [more verl overrides]
#
# DATA holds train.parquet and test.parquet (examples/verl/prepare_gsm8k.py). Add
# trainer.logger='["console","wandb"]' to log to Weights & Biases (needs WANDB_API_KEY).
# A run stopped early resumes from its last global_step_N/ when started again (verl's
# trainer.resume_mode=auto). VERL_MAIN replaces the launcher (the tests print the arguments).
set -euo pipefail
MODEL=${MODEL:?set MODEL to a local copy of SmolLM2-360M-Instruct}
DATA=${DATA:?set DATA to the folder prepare_gsm8k.py wrote}
CKPT=${CKPT:?set CKPT to the checkpoint folder}
REWARD=$(python3 -c "import sera.integrations.gsm8k as m; print(m.__file__)")

# GSM8K's 7,473 training questions make 29 steps of 256 prompts an epoch, and verl stops at
# whichever of total_epochs and total_training_steps comes first: 69 epochs reach step 2,000.
# token-mean is the loss of MaxRL's public SmolLM2 script, of sera's smollm2-gsm8k preset and of
# examples/trl/gsm8k.py; sera's seqnorm is loss_agg_mode=seq-mean-token-sum-norm with
# actor_rollout_ref.actor.loss_scale_factor=2048 (data.max_response_length).
# sera.integrations.verl_main is verl's main_ppo with SERA built in: the V1 sera_sync trainer
# mode, the sera_maxrl estimator, the Ray workers' setup hook and the allocator's options (sera.*).
${VERL_MAIN:-python3 -m sera.integrations.verl_main} \
  reward.custom_reward_function.path="$REWARD" reward.custom_reward_function.name=compute_score \
  data.train_files="$DATA/train.parquet" data.val_files="$DATA/test.parquet" \
  data.train_batch_size=256 data.max_prompt_length=512 data.max_response_length=2048 \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.optim.lr=1e-5 actor_rollout_ref.actor.use_kl_loss=False \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  actor_rollout_ref.actor.ppo_mini_batch_size=256 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32 \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=128 \
  actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.rollout.val_kwargs.n=32 actor_rollout_ref.rollout.val_kwargs.do_sample=True \
  actor_rollout_ref.rollout.val_kwargs.temperature=0.6 \
  actor_rollout_ref.rollout.val_kwargs.top_p=0.95 \
  algorithm.use_kl_in_reward=False trainer.n_gpus_per_node=8 trainer.nnodes="${NNODES:-1}" \
  trainer.total_epochs=69 trainer.total_training_steps=2000 \
  trainer.save_freq=100 trainer.test_freq=100 trainer.logger='["console"]' \
  trainer.default_local_dir="$CKPT" \
  "$@"
