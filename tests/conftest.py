"""Shared test settings: a fixed hypothesis profile so runs are reproducible, and one build of
the course releases for the tests that only read it."""

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("sera", max_examples=150, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("sera")


def pytest_collection_modifyitems(config, items):
    """The slow tests (notebook executions) first, longest-running notebooks at the front. Under
    make test's `-n 2 --dist worksteal` they all land in the first worker's half of this order
    (worksteal steals only from the end of a queue), so 06, 07, 04 and 05 run one after another
    there while the other worker takes the quick tests; 05 then reads back the maze runs 06
    trained. Dealing them to both workers was measured no faster (suite 865 s against 844-869 s).
    After `make figures` each of them checks the recorded execution instead (a few seconds)."""
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
