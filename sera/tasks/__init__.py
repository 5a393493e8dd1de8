"""Tasks: data, models and verifiers for the studies."""
