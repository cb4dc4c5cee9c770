"""The suite's plugins, one setting for every Python process it starts, and its order."""

import os

import pytest

# numpy's OpenBLAS starts a thread per core that spins while numpy loads (0.1 s of CPU a
# process on 2 cores); the suite starts hundreds of Python processes that load it (the
# connector program sets this itself, `connector.cli.run`; the rest do not).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Queue the tests marked ``long`` first. Collected by name they came last, and the
    README's walkthrough (~50 s) then held the end of a parallel run while the other workers
    sat idle (26 and 11 s in one run)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


pytest_plugins = [
    "tests.fixtures.lanes",
    "tests.fixtures.server",
    "tests.fixtures.postgres",
    "tests.fixtures.s3",
    "tests.fixtures.gcs",
    "tests.fixtures.azurite",
]
