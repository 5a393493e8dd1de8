"""Tasks: data, verifiers and rewards for the studies (the models live in sera.models)."""
