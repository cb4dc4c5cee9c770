pytest_plugins = ["tests.fixtures.server", "tests.fixtures.postgres", "tests.fixtures.s3"]
