"""Every error and warning the connector raises, grouped by what the caller does next.

    ConnectorError                  root: catch this to catch everything we raise
    ├── ConfigError                 fix the configuration or the command line  (exit 2)
    │   ├── TableNotFound           no table by that id or name; close matches listed
    │   ├── ColumnNotFound          a column named (columns=, a filter) is not in the table
    │   ├── DeleteGuard             a mirror would delete too much: raise the limit to go on
    │   ├── MissingExtra            a destination needs an optional extra: pip install it
    │   ├── NameClash               two tables would share a name in a destination: rename one
    │   └── BaseUrlError            the base URL cannot work: malformed, a host with no address,
    │                               a failed TLS handshake (also an ApiError; never retried)
    ├── InputError                  fix the source data; nothing was written   (exit 1)
    │   ├── SourceError             the file cannot be read as a table (format, sheet, header)
    │   └── ValidationReport        every bad header and cell, with its spreadsheet row
    ├── PlanError                   plan again: the table changed since the plan  (exit 1)
    ├── ExtractionError             the table changed too fast to read; run again (exit 1)
    ├── InexactValue                a number its column's value type cannot hold exactly:
    │                               give the column another type; that table not written (exit 1)
    ├── JobLocked                   another run of the job holds its lock      (exit 75)
    ├── DestinationError            a file or database refused a load; old data kept (exit 1)
    ├── EngineError                 a blocking Client call that cannot run (closed client, or
    │                               called from its own loop); also a RuntimeError (exit 1)
    └── ApiError                    the API said no, or could not be reached   (exit 1)
        ├── AuthError               401: the key is missing or invalid         (exit 2)
        ├── PermissionDenied        403: the key may not touch this table / write
        ├── NotFound                404: the table or row does not exist
        ├── ApiValidationError      400/422 VALIDATION_ERROR: `field` names the column
        ├── BadRequest              other 400s: a parameter we sent is wrong
        ├── RateLimited             429 after retries ran out           (retriable)
        ├── ServerError             5xx after retries ran out           (retriable)
        └── TransportError          connection failed or timed out      (retriable)
            └── NotSent             the connection was never made: the request did not happen

    ConnectorWarning (UserWarning)  root of our warnings: filter this to silence them all
    ├── CellWarning                 a cell unreadable as its column's type was loaded as null
    ├── UnknownColumnTypeWarning    a column type we do not know is read as text
    └── SkippedTableWarning         a table the key may not read was left out

The exit codes are `ExitCode`, the one table every command uses (`EXIT_CODES` in words).
The transport's own exceptions never escape: they are wrapped and chained with ``from``.
Messages never contain the API key. The reference server (`connector.server`) shares nothing with this tree.

This module is the ground: it imports nothing of ours (and nothing heavy), and the CLI imports it
first. A `ValidationReport` lists `Problem`s; `ConnectorError.written` is what a push had written
when an error stopped it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

__all__ = [
    "EXIT_CODES",
    "ApiError",
    "ApiValidationError",
    "AuthError",
    "BadRequest",
    "BaseUrlError",
    "CellWarning",
    "ColumnNotFound",
    "ConfigError",
    "ConnectorError",
    "ConnectorWarning",
    "DeleteGuard",
    "DestinationError",
    "EngineError",
    "ExitCode",
    "ExtractionError",
    "InexactValue",
    "InputError",
    "JobLocked",
    "MissingExtra",
    "NameClash",
    "NotFound",
    "NotSent",
    "PermissionDenied",
    "PlanError",
    "RateLimited",
    "ServerError",
    "SkippedTableWarning",
    "SourceError",
    "TableNotFound",
    "TransportError",
    "UnknownColumnTypeWarning",
    "ValidationReport",
]


class ExitCode(IntEnum):
    """What a `connector` process's exit status means; every command uses these, and
    `EXIT_CODES` says each in words."""

    OK = 0
    FAILED = 1
    USAGE = 2
    PARTIAL = 3
    LOCKED = 75
    INTERRUPTED = 130
    TERMINATED = 143


#: Each exit code in words: the one table that `connector --help`, every command's help
#: (`connector.cli.exit_codes_help`) and the docs (docs/commands.md, held equal to this by
#: tests/test_docs.py) show.
EXIT_CODES: dict[ExitCode, str] = {
    ExitCode.OK: "done",
    ExitCode.FAILED: (
        "failed: a table, push or destination failed, or every table was skipped; a file to "
        "push is invalid (nothing written); a saved plan's rows changed since; the server "
        "could not be reached within --max-wait"
    ),
    ExitCode.USAGE: (
        "bad usage or configuration, found before anything is written: an option, a job file "
        "or a state file; an unknown table (\"did you mean ...?\"); a missing extra; an API key "
        "the server refuses (401) or a base URL that cannot work; a mirror stopped by its "
        "delete guard"
    ),
    ExitCode.PARTIAL: (
        "partial: some tables were skipped (the key may not read them) or frozen (columns "
        "changed under schema = \"freeze\"), or the server rejected rows of a push"
    ),
    ExitCode.LOCKED: "another run of the same job holds its lock (sync; see --wait)",
    ExitCode.INTERRUPTED: "stopped by Ctrl-C: the table in flight is left as it was",
    ExitCode.TERMINATED: "stopped by SIGTERM: the table in flight is left as it was",
}


class Written(Protocol):
    """What a push's writes had done when an error stopped them (`ConnectorError.written`)."""

    @property
    def created(self) -> int: ...
    @property
    def updated(self) -> int: ...
    @property
    def deleted(self) -> int: ...


class ConnectorError(Exception):
    """Root of every error the connector raises."""

    #: Process exit code the CLI uses for this error.
    exit_code: int = ExitCode.FAILED
    #: Set on an error that stopped a push's writes part-way: what they had written (the
    #: push's `connector.results.PushResult`, read by `connector.push.written_before`). Rows
    #: in flight may have been written too: a rerun of the push finds them and converges.
    written: Written | None = None


class ConfigError(ConnectorError):
    """A configuration file, environment variable or command-line option is wrong."""

    exit_code = ExitCode.USAGE

    def where(self, prefix: str) -> ConfigError:
        """The same error (same class, same details) with `prefix` before its message: a
        job file names the key at fault (``job.toml: destination[0]: ...``)."""
        located = type(self).__new__(type(self))  # not __init__: its arguments vary by class
        located.__dict__.update(self.__dict__)
        located.args = (f"{prefix}{self}", *self.args[1:])
        return located


class TableNotFound(ConfigError):
    """No table has that id or name, or several share it (the message lists the close matches).

    Raised by `connector.tables.resolve_table`, the one resolver every command uses.
    """

    def __init__(
        self, message: str, *, wanted: str | None = None, suggestions: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        #: The value that was looked up, and the table names it was close to.
        self.wanted = wanted
        self.suggestions = tuple(suggestions)


class ColumnNotFound(ConfigError):
    """A column asked for by name is not in the table (the message lists the close matches)."""


class DeleteGuard(ConfigError):
    """A mirror would delete more rows than allowed; raise the limit explicitly to proceed."""


class MissingExtra(ConfigError):
    """A feature needs an optional dependency that is not installed (`connector.extras`)."""

    def __init__(self, feature: str, extra: str) -> None:
        super().__init__(
            f"{feature} needs an optional dependency: pip install 'table-data-connector[{extra}]'"
        )
        #: The extra that provides it, e.g. ``"s3"``.
        self.extra = extra


class NameClash(ConfigError):
    """A table cannot be given the name asked for, or any name, in a destination without
    sharing an object with another table (`connector.naming`); nothing was written."""


class InputError(ConnectorError):
    """Source data (a spreadsheet, a frame) is invalid; nothing was written."""


class SourceError(InputError):
    """The source file cannot be read as a table (malformed, wrong format, missing sheet)."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a push's source: where (row, column), what value, and why."""

    row: int | None
    column: str | None
    value: Any
    message: str

    def __str__(self) -> str:
        where = [f"row {self.row}"] if self.row is not None else []
        if self.column is not None:
            where.append(f"column {self.column!r}")
        if self.value is not None:
            where.append(f"value {_show(self.value)}")
        return f"{', '.join(where)}: {self.message}" if where else self.message


def _show(value: Any) -> str:
    """A cell's value as a message shows it: text quoted, a double in its short form."""
    return f"{value:g}" if isinstance(value, float) else repr(value)


class ValidationReport(InputError):
    """Every problem found in a source; raised before any write, so nothing was written.

    `problems` are `Problem`s: each names its row, column and value.
    """

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        rows = {p.row for p in self.problems if p.row is not None}
        first = str(self.problems[0]) if self.problems else "no problems"
        more = (
            f" (1 of {len(self.problems)} problems in {len(rows)} row(s), all below)"
            if len(self.problems) > 1
            else ""
        )
        # One headline naming the first problem (what a scheduler's log shows), then every
        # problem on its own indented line when there are more.
        head = f"{source}: {first}{more}; nothing was written"
        lines = [head, *map(str, self.problems)] if len(self.problems) > 1 else [head]
        super().__init__("\n  ".join(lines))


class PlanError(ConnectorError):
    """The table cannot be diffed by this key, or a saved plan no longer matches the table."""


class ExtractionError(ConnectorError):
    """The table changed so much during the read that it could not be repaired; run again."""


class InexactValue(ConnectorError):
    """A number cell its column's value type cannot hold exactly (`connector.values`): an
    integer past 2**53 in a float64 column, a fraction in an int64 one... The table is not
    written; the message names the table, column, row, value and the setting to change."""


class JobLocked(ConnectorError):
    """Another run of the same job is in progress; this one did nothing."""

    exit_code = ExitCode.LOCKED


class DestinationError(ConnectorError):
    """A Parquet/CSV file or a SQL database refused a load; the previous data is intact."""


class EngineError(ConnectorError, RuntimeError):
    """A blocking call that cannot run: the engine is closed, or it was called from a
    coroutine running on the client's own loop (which would wait for itself forever)."""


class ApiError(ConnectorError):
    """The API answered with an error, or could not be reached."""

    #: True when the same request may succeed later (the retry policy gave up).
    retriable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        field: str | None = None,
        method: str | None = None,
        url: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.method = method
        self.url = url
        #: Seconds the server asked us to wait (its ``Retry-After``), when it said.
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f" ({self.method} {self.url})" if self.method and self.url else ""
        status = f"{self.status} " if self.status else ""
        return f"{status}{self.message}{where}"


class AuthError(ApiError):
    """401: set a valid key in CONNECTOR_API_KEY (or the job's key variable). A key the
    server refuses is a configuration error (exit 2): running again will not help."""

    exit_code = ExitCode.USAGE


class PermissionDenied(ApiError):
    """403: the key is read-only or scoped to other tables."""


class NotFound(ApiError):
    """404: the table or row does not exist (or the base URL is wrong)."""


class ApiValidationError(ApiError):
    """The server rejected a value; ``field`` names the column at fault."""


class BadRequest(ApiError):
    """A parameter or body we sent was rejected for a reason other than a value."""


class RateLimited(ApiError):
    """429 persisted past the retry budget."""

    retriable = True


class ServerError(ApiError):
    """5xx persisted past the retry budget."""

    retriable = True


class TransportError(ApiError):
    """The server could not be reached, or the connection broke mid-request."""

    retriable = True


class NotSent(TransportError):
    """The connection was never made, so the request certainly did not happen."""


class BaseUrlError(ConfigError, ApiError):
    """The base URL cannot work as given, and waiting will not change that: it is malformed
    (no scheme, not http/https, no host), its host name has no address (DNS), or the TLS
    handshake fails (https to a plain-HTTP port, a bad certificate). Fix the base URL.

    A `ConfigError` (exit 2) that is also an `ApiError` (`method`, `url` when a request was
    tried); never retried.
    """


# -- warnings -------------------------------------------------------------------------------


class ConnectorWarning(UserWarning):
    """Root of the warnings the connector issues."""


class CellWarning(ConnectorWarning):
    """A cell could not be read as its column's type; it was loaded as null."""


class UnknownColumnTypeWarning(ConnectorWarning):
    """A column has a type this connector does not know; it is read as text."""


class SkippedTableWarning(ConnectorWarning):
    """A table was left out of an all-tables read because the key may not read it."""
