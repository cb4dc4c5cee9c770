"""The API's published limits (API.md section 8), named once."""

from __future__ import annotations

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_BULK_ROWS", "MAX_PAGE_SIZE"]

#: Rows per page unless asked otherwise (the API's default, and its advice for large tables).
DEFAULT_PAGE_SIZE = 100
#: The most rows a page may hold; servers clamp larger limits (and report the applied one).
MAX_PAGE_SIZE = 1000
#: The most rows one bulk create or bulk delete may carry.
MAX_BULK_ROWS = 100
