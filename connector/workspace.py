"""The notebook API: one workspace, its tables by name or id, read into typed DataFrames.

    >>> ws = Workspace()                       # CONNECTOR_BASE_URL / CONNECTOR_API_KEY
    >>> ws.tables()                            # [TableSummary(...), ...]
    >>> ws.schema("Orders").columns            # (Column(...), ...)
    >>> ws.read("Orders", filter={"Status": {"eq": "Open"}}, columns=["Status", "Total"])
    >>> ws.read("Orders", types={"OrderNo": "int64", "Total": "decimal(18,2)"})
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

from connector.api import DEFAULT_PAGE_SIZE, Client
from connector.api.endpoints import Filter
from connector.api.models import TableSummary
from connector.errors import PermissionDenied, SkippedTableWarning
from connector.extract import Extraction
from connector.push.spec import PushSpec
from connector.schema import Table
from connector.tables import fetch

if TYPE_CHECKING:
    import pandas as pd

    from connector.results import PushResult

__all__ = ["Workspace"]


class Workspace:
    """The tables one API key can see. Pass `client` to share a configured `Client`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        client: Client | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_concurrency: int | None = None,
    ) -> None:
        self._owns_client = client is None
        self.client = (
            client if client is not None
            else Client(base_url, api_key, max_concurrency=max_concurrency)
        )
        self.page_size = page_size

    def __repr__(self) -> str:
        return f"Workspace(base_url={self.client.base_url!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def tables(self) -> list[TableSummary]:
        """Every table the key may read, with its column and row counts."""
        return self.client.list_tables()

    def schema(self, table: str) -> Table:
        """The column definitions of a table, given by name or id."""
        return self._resolve(table)

    def extraction(
        self, table: str, *, filter: Filter | None = None, columns: Sequence[str] | None = None,
        types: Mapping[str, str] | None = None,
    ) -> Extraction:
        """A streamed read of a table (record batches), for tables too big for one frame."""
        if isinstance(columns, str):
            columns = [columns]  # one column, not its letters
        return Extraction(
            self.client,
            self._resolve(table),
            filter=filter,
            columns=columns,
            page_size=self.page_size,
            types=types,
        )

    def read(
        self, table: str, *, filter: Filter | None = None, columns: Sequence[str] | None = None,
        types: Mapping[str, str] | None = None,
    ) -> pd.DataFrame:
        """A table as a DataFrame typed from its schema; `filter` uses ``eq`` / ``gt``.

        System columns lead as ``_id``, ``_created_at``, ``_updated_at``. `types` holds
        number columns as ``int64``, ``decimal(P,S)`` or ``text`` instead of float64
        (`connector.values`); a number float64 cannot hold exactly raises `InexactValue`.
        """
        return self.extraction(table, filter=filter, columns=columns, types=types).to_pandas()

    def read_all(self) -> dict[str, pd.DataFrame]:
        """Every table by name; a table the key may not read is skipped with a warning."""
        frames: dict[str, pd.DataFrame] = {}
        for summary in self.tables():
            try:
                frames[summary.name] = self.read(summary.id)
            except PermissionDenied as exc:
                warnings.warn(
                    f"skipped table {summary.name!r} ({summary.id}): {exc.message}",
                    SkippedTableWarning,
                    stacklevel=2,
                )
        return frames

    def push(
        self, source: Any, *, dry_run: bool = False, progress: bool | None = None,
        **settings: Any,
    ) -> PushResult:
        """Makes ``table`` match `source` (a DataFrame, a CSV/Excel/Parquet path, a `Query`)
        by ``key``, and says what it did (or, on a `dry_run`, its plan).

        `settings` are `connector.push.PushSpec`'s (``table``, ``key``, ``mode``...); see
        `connector.push.push`, which this calls with the workspace's client.
        """
        from connector.push.pipeline import push  # the source readers: loaded on use

        return push(self.client, PushSpec(source, **settings), dry_run=dry_run, progress=progress)

    def _resolve(self, name_or_id: str) -> Table:
        """A table by the one resolver's rules (`connector.tables`); an unlisted id the
        server does not know is a `TableNotFound`, one the key may not read `PermissionDenied`."""
        return self.client.run(fetch(self.client.aio, name_or_id))
