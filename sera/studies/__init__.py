"""The studies built on the trainers: the model-free simulator (`simulate`), the stored
confirmation points (`confirm`), the learning-rate sweeps (`tuning`), why a measurement departs
from its prediction (`diagnosis`) and the Monte Carlo checks of the estimators (`analysis`).

Their command lines: python -m sera.confirm, python -m sera.tuning, python -m sera.simulate (the
names the stored runs' provenance records)."""
