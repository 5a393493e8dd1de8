"""SERA inside the RL frameworks users scale out with: verl (sera.integrations.verl) and TRL
(sera.integrations.trl). Each of those modules imports its framework and is written against one
pinned version (VERL_VERSION, TRL_VERSION); `make test-integrations` tests both in .venv-scale.
sera.integrations.gsm8k holds the math study's reward in the forms both frameworks call.
"""
