"""API keys as the server keeps them: only their SHA-256, and what each may do."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

__all__ = ["KEY_SHAPE", "ApiKey", "hash_key", "new_key"]

#: What `new_key` makes: "key_" and 43 URL-safe characters (32 random bytes).
KEY_SHAPE = re.compile(r"key_[A-Za-z0-9_-]{43}")


@dataclass(frozen=True)
class ApiKey:
    """What a key may do: write or only read; every table, or only `tables` (ids); and,
    if `admin`, change a server's faults (``--fault-control``'s ``/v1/_faults``).

    `digest` (the stored hash) identifies the key, e.g. for rate limiting, without the key.
    """

    digest: str
    read_only: bool
    tables: frozenset[str] | None
    admin: bool = False

    def may_read(self, table_id: str) -> bool:
        return self.tables is None or table_id in self.tables

    def may_write(self, table_id: str) -> bool:
        return not self.read_only and self.may_read(table_id)


def hash_key(raw: str) -> str:
    """Keys are random 256-bit tokens, so a plain SHA-256 is a safe one-way store."""
    return hashlib.sha256(raw.encode()).hexdigest()


def new_key() -> str:
    return "key_" + secrets.token_urlsafe(32)
