"""SERA inside the RL frameworks users scale out with: verl (sera.integrations.verl) and TRL
(sera.integrations.trl). Each of those modules imports its framework and is written against one
pinned version (VERL_VERSION, TRL_VERSION); `make test-integrations` tests both in .venv-scale.
Both keep only their hooks; the planning state they share (history by dense row, plan, record,
epoch fold, checkpoint file) is sera.integrations.planner, which imports no framework.
sera.integrations.gsm8k holds the math study's reward in the forms both frameworks call.
"""
