"""Reading a job file: typed reads from its TOML tables, every error naming the file and
the key path (``destination[1].url``); unknown keys are errors, and a key that would hold a
secret is refused with a pointer to where secrets go."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from connector.api.keys import is_variable_name
from connector.errors import ConfigError

__all__ = [
    "JobFile",
    "Section",
    "check_env_name",
    "check_url",
    "key_path",
    "kind",
    "parse_duration",
    "quote",
]

#: Names a secret would go under; refused with a pointer to ``api_key_env``.
SECRET_KEYS = frozenset({"api_key", "key", "token", "secret", "password", "apikey"})
#: Storage credentials: they come from the provider's own chain (environment, profile, role).
STORAGE_SECRETS = frozenset({
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "access_key",
    "secret_key", "account_key", "sas_token", "connection_string", "credentials",
    "client_secret", "storage_options",
})


class JobFile:
    """A job file being read: its name as the user spelled it (for messages) and the folder
    its relative paths start from."""

    def __init__(self, file: Path) -> None:
        self.file = file  # as the user spelled it, for messages
        self.base = file.resolve().parent

    def error(self, where: str, what: str) -> ConfigError:
        return ConfigError(f"{self.file}: {where}: {what}")

    def path(self, value: str) -> Path:
        return (self.base / os.path.expanduser(value)).resolve()

    def duration(self, section: Section, name: str, default: float) -> float:
        """A duration: seconds as a number, or text like ``"90s"``, ``"5m"``, ``"1h"``."""
        value = section.get(name)
        if value is None:
            return default
        try:
            return parse_duration(value)
        except ValueError:
            raise self.error(
                section.key(name),
                f'must be a duration like "5m", "90s" or 0 (seconds), got {value!r}',
            ) from None


class Section:
    """Typed reads from one TOML table; `done()` rejects the keys nobody asked for."""

    def __init__(self, parser: JobFile, data: Any, where: str) -> None:
        self.parser = parser
        self.where = where
        if not isinstance(data, dict):
            raise parser.error(where, f"must be a table, got {kind(data)}")
        self.data: dict[str, Any] = data
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str) -> Any:
        self.seen.add(name)
        return self.data.get(name)

    def string(self, name: str, default: str | None = None) -> str | None:
        value = self.get(name)
        if value is None:
            return default
        if not isinstance(value, str) or not value.strip():
            raise self.parser.error(
                self.key(name), f"must be a non-empty string, got {kind(value)}"
            )
        return value

    def integer(self, name: str, default: int, *, low: int, high: int) -> int:
        value = self.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.parser.error(
                self.key(name), f"must be an integer from {low} to {high}, got {value!r}"
            )
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.parser.error(self.key(name), f"must be true or false, got {value!r}")
        return value

    def choice(self, name: str, options: Sequence[str], default: str | None) -> str | None:
        value = self.string(name, default)
        if value is not None and value not in options:
            raise self.parser.error(
                self.key(name), f"must be one of {', '.join(options)}; got {value!r}"
            )
        return value

    def strings(self, name: str) -> tuple[str, ...] | None:
        value = self.get(name)
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.parser.error(
                self.key(name), f"must be a list of non-empty strings, got {kind(value)}"
            )
        return tuple(value)

    def done(self) -> None:
        for name in self.data:
            if name in self.seen:
                continue
            if name.lower() in SECRET_KEYS:
                raise self.parser.error(
                    self.key(name),
                    "secrets never go in a job file: put the API key in an environment "
                    "variable and set source.api_key_env to that variable's name",
                )
            if name.lower() in STORAGE_SECRETS:
                raise self.parser.error(
                    self.key(name),
                    "credentials never go in a job file: object storage takes them from its "
                    "provider's chain (AWS_* variables or a profile, GOOGLE_APPLICATION_CREDENTIALS, "
                    "AZURE_* variables, an instance role)",
                )
            known = ", ".join(sorted(self.seen)) or "none"
            raise self.parser.error(self.key(name), f"unknown key (known keys here: {known})")



def check_env_name(parser: JobFile, where: str, value: str) -> None:
    if not is_variable_name(value):
        # The value is not shown: it may be the very key we must not print.
        raise parser.error(
            where,
            "must be the NAME of an environment variable (like CONNECTOR_API_KEY), not a "
            "key or URL; the value is not shown in case it is a secret",
        )


def check_url(parser: JobFile, where: str, url: str) -> None:
    if not re.match(r"https?://[^/\s]+", url):
        raise parser.error(where, "must be an http(s) URL like https://host/v1 (value not shown)")
    if "@" in url.split("/")[2]:
        raise parser.error(
            where, "must not carry credentials; the key comes from source.api_key_env"
        )


def quote(name: str) -> str:
    """A TOML-style key path segment: bare when it can be, quoted otherwise."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'"{name}"'


def parse_duration(value: object) -> float:
    """Seconds from a number, or from text like ``"90s"``, ``"5m"``, ``"1h"``, ``"0"``;
    ValueError for anything else (or a negative time)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", value)
        if match is None:
            raise ValueError(value)
        number, unit = float(match.group(1)), match.group(2) or "s"
        seconds = number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    else:
        raise ValueError(value)
    if not 0 <= seconds < float("inf"):
        raise ValueError(value)
    return seconds


def key_path(*parts: str) -> str:
    """``tables.filter."My Orders".Status``: a key path as a TOML file spells it."""
    return ".".join(quote(p) for p in parts)


def kind(value: Any) -> str:
    return {
        dict: "a table",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)
