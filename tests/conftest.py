pytest_plugins = [
    "tests.fixtures.lanes",
    "tests.fixtures.server",
    "tests.fixtures.postgres",
    "tests.fixtures.s3",
    "tests.fixtures.gcs",
    "tests.fixtures.azurite",
]
