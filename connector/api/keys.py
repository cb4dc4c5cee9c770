"""The API key: checked once when a client is built, then kept out of every line we print.

A key travels in an HTTP header, so whitespace, control characters (a key read from a file
saved with CRLF line endings ends in ``\\r``) and non-ASCII characters can never be part of a
working key: such a key is a configuration error at once, naming where the key came from
(an environment variable) and never its value. Retrying it only hides the mistake.

Every key a client is built with is remembered for the life of the process, so `redact` can
take it out of any text (error messages, tracebacks) and `RedactingFilter` out of any log
record, including httpx's and httpcore's debug lines.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback

from connector.errors import ConfigError

__all__ = [
    "ENV_API_KEY",
    "MIN_REDACTED_LENGTH",
    "REDACTED",
    "RedactingFilter",
    "check_key",
    "describe_variable",
    "is_variable_name",
    "key_problem",
    "looks_like_key",
    "redact",
    "remember_key",
]

#: Where a client looks for its key when none is passed.
ENV_API_KEY = "CONNECTOR_API_KEY"
#: What a key is replaced with in text we show.
REDACTED = "***"
#: Shorter keys are not redacted: a test's key "k" would take every k out of every message,
#: and a real key is far longer.
MIN_REDACTED_LENGTH = 8
#: The loggers that see requests; each gets a `RedactingFilter` when a client learns a key
#: (a logger's filters apply only to its own records, so children are listed).
WATCHED_LOGGERS = (
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "connector",
)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_keys: set[str] = set()
_keys_lock = threading.Lock()
_pattern: re.Pattern[str] | None = None


def key_problem(key: str) -> str | None:
    """What makes `key` unusable as a key, in words that never repeat it; None when it is fine."""
    if not key:
        return "is empty"
    if not key.strip():
        return "is blank (only whitespace)"
    if key.endswith("\r\n") or key.endswith("\r"):
        return (
            "ends with a carriage return (\\r), as a key read from a file saved with Windows "
            "(CRLF) line endings does"
        )
    if key.endswith("\n"):
        return "ends with a newline, as a key read from a file with its line ending does"
    if key != key.strip():
        return "starts or ends with whitespace"
    for char in key:
        if char in " \t":
            return "contains a space or a tab"
        if not char.isascii():
            return "contains a non-ASCII character (a pasted typographic quote or dash?)"
        if not char.isprintable():
            return f"contains a control character (U+{ord(char):04X})"
    return None


def check_key(key: str, source: str = ENV_API_KEY) -> str:
    """`key` if it can be sent; else a `ConfigError` naming `source` (where the key came
    from, such as the environment variable) and what is wrong, never the key itself."""
    problem = key_problem(key)
    if problem is not None:
        raise ConfigError(f"the API key in {source} {problem}; set {source} to the key alone")
    return key


def looks_like_key(value: str) -> bool:
    """Whether `value` is more likely a secret than a name (of a variable, a host...).

    Long strings mixing cases, or letters with many digits, are keys; names of environment
    variables are upper case with few digits.
    """
    if len(value) < 16:
        return False
    has_lower = any(c.islower() for c in value)
    has_upper = any(c.isupper() for c in value)
    digits = sum(c.isdigit() for c in value)
    return (has_lower and has_upper) or (has_lower and digits >= 4) or digits >= 8


def is_variable_name(value: str) -> bool:
    """Whether `value` can be the NAME of an environment variable: a value that looks like
    a key is not, since it may be the very key pasted where the name belongs."""
    return _ENV_NAME.fullmatch(value) is not None and not looks_like_key(value)


def describe_variable(name: str) -> str:
    """`name` as a message may show it: the name of an environment variable as is; a value
    that cannot be one and looks like a key (pasted where the NAME belongs) is withheld."""
    if is_variable_name(name):
        return name
    if looks_like_key(name) or name in _known():
        return "(a value that looks like a key, not a variable name; not shown)"
    return repr(name)


def remember_key(key: str) -> None:
    """Remember `key` so that `redact` and `RedactingFilter` take it out of text; puts the
    filter on the loggers that see requests (once)."""
    global _pattern
    if len(key) < MIN_REDACTED_LENGTH:
        return
    with _keys_lock:
        if key in _keys:
            return
        first = not _keys
        _keys.add(key)
        ordered = sorted(_keys, key=len, reverse=True)
        _pattern = re.compile("|".join(map(re.escape, ordered)))
    if first:
        for name in WATCHED_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, RedactingFilter) for f in logger.filters):
                logger.addFilter(RedactingFilter())


def _known() -> frozenset[str]:
    with _keys_lock:
        return frozenset(_keys)


def redact(text: str) -> str:
    """`text` with every key a client of this process was built with replaced by ``***``."""
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    """Takes every remembered key out of a log record (its message, arguments and exception
    text) before any handler formats it. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _pattern is None:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: the handler reports it (handleError) as usual
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:

            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)))
            record.exc_text = record.exc_text.rstrip("\n")
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
