"""Shared test settings: a fixed hypothesis profile so runs are reproducible, and one build of
the course releases for the tests that only read it."""

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("sera", max_examples=150, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("sera")


def pytest_collection_modifyitems(config, items):
    """The slow tests (notebook executions) first, longest-running notebooks at the front: with
    two workers (make test) the quick tests then fill the gaps instead of one long notebook
    finishing alone at the end."""
    longest = ["06_", "07_", "04_", "05_"]  # notebook run times on two cores, longest first

    def key(item):
        slow = item.get_closest_marker("slow") is not None
        rank = next((i for i, n in enumerate(longest) if n in item.nodeid), len(longest))
        return (not slow, rank)

    items.sort(key=key)


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """One build of both releases (what `make course` writes), shared by the tests that only
    read it: (folder, the files written per release)."""
    from sera.teaching import release

    root = tmp_path_factory.mktemp("course")
    return root, release.release(root)
