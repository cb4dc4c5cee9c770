"""Job files are validated once; every mistake is reported with the file and the key at fault."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from connector.errors import ConfigError
from connector.jobs.config import Condition, load_job

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

GOOD_SOURCE = '[source]\napi_key_env = "MY_KEY"\n'
PARQUET = '[[destination]]\nparquet = "out"\n'


def write(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    (tmp_path / "people.csv").write_text("Email,Name\na@x.org,A\n")
    return path


def test_a_minimal_job_gets_documented_defaults(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, GOOD_SOURCE + PARQUET, "nightly.toml"))

    assert job.name == "nightly"
    assert job.source.api_key_env == "MY_KEY"
    assert job.source.base_url is None and job.source.base_url_env == "CONNECTOR_BASE_URL"
    assert job.source.page_size == 100
    assert job.tables.include is None and job.tables.exclude == ()
    assert job.incremental is False and job.deletes == "delete"
    (dest,) = job.destinations
    assert (dest.kind, dest.mode, dest.target) == ("parquet", "replace", str(tmp_path / "out"))
    assert job.state_path == tmp_path / "nightly.state.json"
    assert job.lock_path == tmp_path / "nightly.lock"


def test_a_full_job_is_read_into_typed_objects(tmp_path: Path) -> None:
    job = load_job(
        write(
            tmp_path,
            """
            name = "warehouse"
            [source]
            base_url = "http://127.0.0.1:9/v1/"
            api_key_env = "TABLES_KEY"
            page_size = 500
            [tables]
            include = ["Orders", "tbl_2"]
            exclude = ["tbl_2"]
            [tables.filter]
            Orders = { Status = { eq = "open" }, Amount = { gt = 10 } }
            [sync]
            incremental = true
            deletes = "mark"
            state_dir = "state"
            [[destination]]
            parquet = "pq"
            [[destination]]
            url = "sqlite:///wh.db"
            [[push]]
            file = "people.csv"
            table = "People"
            key = ["Email"]
            mode = "mirror"
            """,
        )
    )
    assert job.source.base_url == "http://127.0.0.1:9/v1"
    assert job.tables.include == ("Orders", "tbl_2")
    assert job.tables.exclude == ("tbl_2",)
    assert job.tables.filters == ((
        "Orders", (Condition("Status", "eq", "open"), Condition("Amount", "gt", 10)),
    ),)
    assert [d.mode for d in job.destinations] == ["merge", "merge"]
    assert job.destinations[1].target == f"sqlite:///{tmp_path / 'wh.db'}"
    assert job.state_dir == tmp_path / "state"
    (push,) = job.pushes
    assert (push.source, push.table, push.key, push.mode) == (
        tmp_path / "people.csv",
        "People",
        ("Email",),
        "mirror",
    )


# (job file body, text the error must contain: the key path and what is wrong)
BAD_CONFIGS = [
    pytest.param("this is = = not toml", "not valid TOML", id="not-toml"),
    pytest.param(PARQUET, "source: missing", id="no-source"),
    pytest.param(GOOD_SOURCE, "destination: missing", id="nothing-to-do"),
    pytest.param(
        '[source]\napi_key = "sk_live_abcdef"\n' + PARQUET,
        "source.api_key: secrets never go in a job file",
        id="literal-key",
    ),
    pytest.param(
        '[source]\napi_key_env = "tdk_9f8a7B6c5D4e3F2a1b0c9d8e"\n' + PARQUET,
        "source.api_key_env: must be the NAME of an environment variable",
        id="key-in-env-name",
    ),
    pytest.param(
        '[source]\napi_key_env = "my key"\n' + PARQUET,
        "source.api_key_env: must be the NAME",
        id="env-name-with-space",
    ),
    pytest.param(
        '[source]\nbase_url = "ftp://x/v1"\n' + PARQUET,
        "source.base_url: must be an http(s) URL",
        id="bad-url",
    ),
    pytest.param(
        '[source]\nbase_url = "https://user:pw@x/v1"\n' + PARQUET,
        "source.base_url: must not carry credentials",
        id="credentials-in-url",
    ),
    pytest.param(
        GOOD_SOURCE.replace("]\n", "]\npage_size = 5000\n", 1) + PARQUET,
        "source.page_size: must be an integer from 2 to 1000",
        id="page-size-too-big",
    ),
    pytest.param(  # extraction pages overlap by one row: a page of one could never advance
        GOOD_SOURCE.replace("]\n", "]\npage_size = 1\n", 1) + PARQUET,
        "source.page_size: must be an integer from 2 to 1000",
        id="page-size-too-small",
    ),
    pytest.param(
        GOOD_SOURCE + PARQUET + "[sync]\nincremental = 'yes'\n",
        "sync.incremental: must be true or false",
        id="incremental-not-bool",
    ),
    pytest.param(
        GOOD_SOURCE + PARQUET + "[sync]\ndeletes = 'purge'\n",
        "sync.deletes: must be one of delete, mark, keep",
        id="bad-delete-policy",
    ),
    pytest.param(
        GOOD_SOURCE + PARQUET + "[sync]\nincremantal = true\n",
        "sync.incremantal: unknown key",
        id="typo-in-key",
    ),
    pytest.param(
        GOOD_SOURCE + PARQUET + "destinaton = 1\n",
        "destinaton: unknown key",
        id="typo-at-top",
    ),
    pytest.param(
        GOOD_SOURCE + '[[destination]]\nparquet = "a"\nurl = "sqlite:///b.db"\n',
        "destination[0]: set exactly one of parquet",
        id="two-targets",
    ),
    pytest.param(
        GOOD_SOURCE + "[[destination]]\nmode = 'merge'\n",
        "destination[0]: set exactly one of parquet",
        id="no-target",
    ),
    pytest.param(
        GOOD_SOURCE + '[[destination]]\nurl = "not a url"\n',
        "destination[0].url: not a database URL",
        id="bad-sql-url",
    ),
    pytest.param(
        GOOD_SOURCE + '[[destination]]\nurl = "postgresql://etl:hunter2@db/x"\n',
        "destination[0].url: holds a password",
        id="password-in-sql-url",
    ),
    pytest.param(
        GOOD_SOURCE + '[destination]\nparquet = "a"\nmode = "upsert"\n',
        "destination.mode: must be one of replace, append, merge",
        id="bad-mode",
    ),
    pytest.param(
        GOOD_SOURCE
        + '[destination]\nparquet = "a"\nmode = "replace"\n[sync]\nincremental = true\n',
        "destination.mode: an incremental sync merges changed rows",
        id="incremental-needs-merge",
    ),
    pytest.param(
        GOOD_SOURCE + '[[destination]]\nparquet = "a"\n[[destination]]\nparquet = "./a"\n',
        "destination[1]: writes to the same place",
        id="same-target-twice",
    ),
    pytest.param(
        GOOD_SOURCE + PARQUET + "[tables]\ninclude = []\n",
        "tables.include: is empty",
        id="empty-include",
    ),
    pytest.param(
        GOOD_SOURCE + PARQUET + "[tables]\ninclude = [1, 2]\n",
        "tables.include: must be a list of non-empty strings",
        id="include-not-strings",
    ),
    pytest.param(
        GOOD_SOURCE + PARQUET + '[tables.filter]\nOrders = { Status = { like = "x" } }\n',
        "tables.filter.Orders.Status.like: unknown operator",
        id="bad-operator",
    ),
    pytest.param(
        GOOD_SOURCE + PARQUET + '[tables.filter]\n"My Orders" = { Status = "open" }\n',
        'tables.filter."My Orders".Status: must be one operator',
        id="filter-without-operator",
    ),
    pytest.param(
        GOOD_SOURCE
        + PARQUET
        + '[tables]\ninclude = ["A"]\n[tables.filter]\nB = { X = { eq = 1 } }\n',
        "tables.filter.B: filters a table that tables.include leaves out",
        id="filter-on-excluded-table",
    ),
    pytest.param(
        GOOD_SOURCE + '[[push]]\nfile = "people.csv"\ntable = "People"\n',
        "push[0].key: missing",
        id="push-without-key",
    ),
    pytest.param(
        GOOD_SOURCE + '[[push]]\nfile = "nope.csv"\ntable = "People"\nkey = "Email"\n',
        "push[0].file: no such file",
        id="push-missing-file",
    ),
    pytest.param(
        GOOD_SOURCE + '[[push]]\nfile = "people.json"\ntable = "People"\nkey = "Email"\n',
        "push[0].file: must end in one of .csv",
        id="push-unknown-format",
    ),
    pytest.param(
        GOOD_SOURCE + '[[push]]\nfile = "people.csv"\ntable = "P"\nkey = "E"\nmode = "merge"\n',
        "push[0].mode: must be one of insert, update, upsert, mirror",
        id="push-bad-mode",
    ),
    pytest.param(
        GOOD_SOURCE + '[[push]]\nfile = "people.csv"\ntable = "P"\nkey = "E"\nsheet = "S"\n',
        "push[0].sheet: only applies to Excel files",
        id="sheet-on-csv",
    ),
    pytest.param(
        'name = "my job!"\n' + GOOD_SOURCE + PARQUET,
        "name: must be letters, digits",
        id="bad-name",
    ),
]


@pytest.mark.parametrize(("body", "expected"), BAD_CONFIGS)
def test_a_bad_job_file_is_refused_naming_the_file_and_key(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = write(tmp_path, body)

    with pytest.raises(ConfigError) as caught:
        load_job(path)

    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message
    assert caught.value.exit_code == 2


def test_a_key_pasted_into_the_file_is_never_echoed(tmp_path: Path) -> None:
    secret = "tdk_9f8a7B6c5D4e3F2a1b0c9d8e"
    path = write(tmp_path, f'[source]\napi_key_env = "{secret}"\n' + PARQUET)

    with pytest.raises(ConfigError) as caught:
        load_job(path)

    assert secret not in str(caught.value)


def test_a_missing_job_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the job file"):
        load_job(tmp_path / "absent.toml")


def test_the_key_is_read_from_the_named_variable_at_run_time(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, GOOD_SOURCE + PARQUET))

    assert job.source.resolve({"CONNECTOR_BASE_URL": "http://h/v1", "MY_KEY": "k"}) == (
        "http://h/v1",
        "k",
    )
    with pytest.raises(ConfigError, match=r"source\.api_key_env: .*MY_KEY is not set"):
        job.source.resolve({"CONNECTOR_BASE_URL": "http://h/v1"})
    with pytest.raises(ConfigError, match="CONNECTOR_BASE_URL is empty"):
        job.source.resolve({"MY_KEY": "k"})


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_config_is_valid(path: Path) -> None:
    job = load_job(path)

    assert job.destinations or job.pushes
