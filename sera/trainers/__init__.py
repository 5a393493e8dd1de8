"""Training loops; they import torch (the math core does not)."""
