"""Shared test settings: a fixed hypothesis profile so runs are reproducible, and one build of
the course releases for the tests that only read it."""

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("sera", max_examples=150, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("sera")


LANES = (("06_", "05_"), ("07_", "04_", "08_"))
"""The notebook executions each of two workers starts with (make test's `-n 2 --dist worksteal`),
about 600 s of training apiece. 05 runs after 06 in its lane, so it reads back the maze warm-up
and runs that 06 trained (tests/test_notebooks.py shares one run store), and 04 reads back 06's
digits runs."""


def pytest_collection_modifyitems(config, items):
    """The slow tests (notebook executions) first, longest first. Under two workers, each
    worker's share starts with its lane: pytest-xdist's worksteal hands the first half of this
    order to one worker and the rest to the other, and steals only from the end of a queue (never
    a queue's last two tests), so notebooks bunched at the front would run one after another on
    one worker while the other ran out of work."""
    def rank(item):
        found = [i for lane in LANES for i, name in enumerate(lane) if name in item.nodeid]
        return (item.get_closest_marker("slow") is None, found[0] if found else len(LANES[1]))

    items.sort(key=rank)
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers != len(LANES):
        return
    lanes = [[i for i in items if any(n in i.nodeid for n in lane)] for lane in LANES]
    rest = [i for i in items if not any(i in lane for lane in lanes)]
    first = len(items) // 2 - len(lanes[0])  # the first worker's share: len(items) // 2 tests
    items[:] = lanes[0] + rest[:first] + lanes[1] + rest[first:]


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """One build of both releases (what `make course` writes), shared by the tests that only
    read it: (folder, the files written per release)."""
    from sera.teaching import release

    root = tmp_path_factory.mktemp("course")
    return root, release.release(root)
