"""Shared test settings: a fixed hypothesis profile so runs are reproducible."""

from hypothesis import HealthCheck, settings

settings.register_profile("sera", max_examples=150, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("sera")
