"""Which table each name in a destination holds: the record the name map reads.

`connector.naming` hands out a table's name from what a destination holds, so a destination
records, for each name it gave a table, that table's id (`Destination.claim`): once a run's
first table is written there, every name of the run at once. A folder (files, Delta,
Iceberg's warehouse) keeps the record in ``_connector_tables.json`` beside the tables
(dataset readers skip a leading ``_``); a database in a table of that name
(`connector.destinations.sql`, `duckdb`).

An object the destination holds that no record names (written before names were recorded,
or by someone else) is held by no known table: `held` lists it with ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from connector.destinations.storage import Store
from connector.errors import DestinationError
from connector.naming import NAME_REGISTRY

__all__ = ["RECORD_FILE", "FolderRecord", "held"]

#: The record's file in a folder.
RECORD_FILE = f"{NAME_REGISTRY}.json"


def held(objects: Iterable[str], recorded: Mapping[str, str]) -> dict[str, str | None]:
    """Every name held: the recorded ones (in the order recorded) with their table ids,
    then the objects no record names, with None."""
    out: dict[str, str | None] = dict(recorded)
    for name in objects:
        out.setdefault(name, None)
    return out


class FolderRecord:
    """The record of a folder of tables: ``_connector_tables.json``, replaced whole."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def read(self) -> dict[str, str]:
        """Name -> table id, in the order recorded (a name recorded again moves last)."""
        path = self.store.readable(RECORD_FILE)
        if path is None:
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = data["tables"]
            return {str(e["name"]): str(e["table_id"]) for e in entries}
        except (ValueError, KeyError, TypeError) as exc:
            raise DestinationError(
                f"{self.store.locate(RECORD_FILE)} is not a record of table names "
                f"({type(exc).__name__}: {exc}); move it away to start a new one (tables "
                "already written then keep their names only where no other table takes them)"
            ) from None

    def claim(self, names: Mapping[str, str]) -> None:
        """Record that each of `names` holds its table id."""
        record = self.read()
        for name, table_id in names.items():
            record.pop(name, None)
            record[name] = table_id
        entries = [{"name": n, "table_id": t} for n, t in record.items()]
        text = json.dumps({"tables": entries}, ensure_ascii=False, indent=1) + "\n"
        with self.store.replace(RECORD_FILE) as temp:
            temp.write_text(text, encoding="utf-8")
