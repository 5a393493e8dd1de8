"""The parts of benchmarks/gpu_check.py, one module each; importing a part registers it."""
