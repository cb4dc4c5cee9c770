"""The suite's plugins, and one setting for every Python process it starts."""

import os

# numpy's OpenBLAS starts a thread per core that spins while numpy loads (0.1 s of CPU a
# process on 2 cores); the suite starts hundreds of Python processes that load it (the
# connector program sets this itself, `connector.cli.run`; the rest do not).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

pytest_plugins = [
    "tests.fixtures.lanes",
    "tests.fixtures.server",
    "tests.fixtures.postgres",
    "tests.fixtures.s3",
    "tests.fixtures.gcs",
    "tests.fixtures.azurite",
]
