import pytest

pytest_plugins = [
    "tests.fixtures.lanes",
    "tests.fixtures.server",
    "tests.fixtures.postgres",
    "tests.fixtures.s3",
    "tests.fixtures.gcs",
    "tests.fixtures.azurite",
]

#: Files whose tests take 10-60 s each (`pytest --durations`): started first, so the run does
#: not end with one worker alone on one of them while the others are done.
LONG_FIRST = (
    "tests/test_readme.py",
    "tests/test_packaging.py",
    "tests/test_extract.py",
    "tests/jobs/test_lake_reliability.py",
    "tests/push/test_faults.py",
    "tests/test_dagster.py",
    "tests/api/test_polite.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(LONG_FIRST))
