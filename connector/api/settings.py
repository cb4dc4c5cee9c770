"""A client's settings: the base URL and key (from arguments or the environment), checked
before any request, and the cap of requests in flight."""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

import httpx

from connector.api.concurrency import (
    DEFAULT_MAX_CONCURRENCY,
    MAX_CONCURRENCY,
    check_max_concurrency,
)
from connector.api.counts import RequestCounts
from connector.api.keys import ENV_API_KEY, check_key, looks_like_key, remember_key
from connector.api.ratelimit import RateLimiter, limiter_for
from connector.api.retry import RetryPolicy, resolve_policy
from connector.errors import BaseUrlError, ConfigError

__all__ = [
    "BASE_URL_SHAPE",
    "ENV_BASE_URL",
    "ENV_MAX_CONCURRENCY",
    "Settings",
    "check_base_url",
    "resolve_max_concurrency",
]

ENV_BASE_URL = "CONNECTOR_BASE_URL"
#: The cap of requests in flight when none is given (`connector.api.concurrency`).
ENV_MAX_CONCURRENCY = "CONNECTOR_MAX_CONCURRENCY"
#: How a base URL must look, said in every error about one.
BASE_URL_SHAPE = "base URL must look like https://host/v1"


def resolve_max_concurrency(value: int | None) -> int:
    """The cap: `value`, else ``CONNECTOR_MAX_CONCURRENCY``, else the default."""
    where = "max_concurrency"
    if value is None:
        raw = os.environ.get(ENV_MAX_CONCURRENCY, "").strip()
        if not raw:
            return DEFAULT_MAX_CONCURRENCY
        where = ENV_MAX_CONCURRENCY
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(
                f"{where} must be an integer from 1 to {MAX_CONCURRENCY}, got {raw!r}"
            ) from None
    try:
        return check_max_concurrency(value, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_base_url(base_url: str, source: str) -> str:
    """`base_url` without a trailing slash, if a request can be sent to it; else a
    `BaseUrlError` saying what is wrong and where to fix it (`source`), showing the value
    only where it cannot be a secret."""
    secret = looks_like_key(base_url) and re.fullmatch(r"[\w.~+/=-]+", base_url) is not None
    shown = "" if secret else f" ({base_url!r})"
    problem = None
    if base_url != base_url.strip() or not base_url.isprintable():
        problem = "it holds whitespace or a control character"
        shown = ""
    elif "://" not in base_url:
        problem = "it has no scheme (http:// or https://)"
    else:
        parts = urlsplit(base_url)
        if parts.scheme.lower() not in ("http", "https"):
            problem = f"the scheme {parts.scheme!r} is not http or https"
        elif "@" in parts.netloc:
            problem, shown = f"it carries credentials (the key comes from {ENV_API_KEY})", ""
        else:
            try:
                host = httpx.URL(base_url).host
            except (httpx.InvalidURL, ValueError) as exc:
                problem = f"it cannot be parsed ({exc})"
            else:
                if not host:
                    problem = "it has no host"
    if problem is not None:
        raise BaseUrlError(f"{BASE_URL_SHAPE}: {problem}{shown}; fix {source}")
    return base_url.rstrip("/")


class Settings:
    """Where, who (kept secret), how long to wait and retry: a client's settings, checked
    once when it is built."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        retry: RetryPolicy | None,
        limiter: RateLimiter | None,
        *,
        key_source: str | None = None,
        url_source: str | None = None,
        counts: RequestCounts | None = None,
    ) -> None:
        # A library caller is told of parameters; a command passes its own words (its flag
        # and variable) as the sources.
        self._key_source = key_source or ENV_API_KEY
        self._url_source = url_source or f"{ENV_BASE_URL} (or base_url)"
        base_url = base_url or os.environ.get(ENV_BASE_URL)
        api_key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        if not base_url:
            fix = f"set {url_source}" if url_source else f"pass base_url or set {ENV_BASE_URL}"
            raise ConfigError(f"no API base URL: {fix} (it ends in /v1)")
        if not api_key:
            fix = f"set {key_source}" if key_source else f"pass api_key or set {ENV_API_KEY}"
            raise ConfigError(f"no API key: {fix}")
        self._api_key = check_key(api_key, self._key_source)
        remember_key(api_key)
        self.base_url = check_base_url(base_url, self._url_source)
        self.timeout = timeout
        self.retry = resolve_policy(retry)
        self.limiter = limiter if limiter is not None else limiter_for(self.base_url, api_key)
        #: Every try's answer and every retry (`RequestCounts`).
        self.counts = counts if counts is not None else RequestCounts()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"}
