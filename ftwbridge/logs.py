"""Log set-up for every command: the standard library's `logging` to stderr, as text or JSON.

Every line names its level and its logger. The JSON form (`log_format = "json"`) is one object
a line, written by python-json-logger's `JsonFormatter` (not a formatter of our own), with the
stable keys `ts` (UTC, ISO 8601 with milliseconds), `level` (`INFO`, `WARNING`, ...), `logger`
(`ftwbridge.audit`, ...) and `msg` (the whole message, as in the text form). Each `key=%s`
field of a message's format becomes a key of its own as well, so the audit line's `tool`,
`home`, `agent`, `client`, `status` and `duration_ms` can be filtered on without parsing
`msg`; so can fields passed with `extra=`. An exception's traceback goes under `exc_info`.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Literal, TextIO

from pythonjsonlogger.json import JsonFormatter

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
"""The text form: `2026-12-01 01:30:00,123 INFO ftwbridge.audit tool=status ...`."""
JSON_KEYS = {"asctime": "ts", "levelname": "level", "name": "logger", "message": "msg"}
"""`logging.LogRecord` attributes and the JSON keys they are written under."""

_SPEC = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa%]")
"""A printf-style placeholder of a log message's format (`%%` included, to be skipped)."""
_KEY_BEFORE = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)=$")
_RESERVED = (
    frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"} | set(JSON_KEYS.values())
)


class MessageFields(logging.Filter):
    """Copy each `key=%s` placeholder's argument of a record onto the record as `key`, so the
    JSON formatter writes it as a key of its own (a number stays a number). Keys that clash
    with the record's own attributes or the stable JSON keys are left in `msg` only."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the fields; never drops a record."""
        msg, args = record.msg, record.args
        if not (isinstance(msg, str) and isinstance(args, tuple) and "=%" in msg):
            return True
        specs = [m for m in _SPEC.finditer(msg) if m.group() != "%%"]
        if len(specs) != len(args):
            return True
        for spec, value in zip(specs, args, strict=True):
            key = _KEY_BEFORE.search(msg, 0, spec.start())
            if key is not None and key.group(1) not in _RESERVED:
                if spec.group()[-1] in "diu" and isinstance(value, float):
                    value = int(value)  # as the message shows it
                setattr(record, key.group(1), value)
        return True


def _json_formatter() -> logging.Formatter:
    formatter = JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields=JSON_KEYS,
    )
    formatter.converter = time.gmtime
    formatter.default_time_format = "%Y-%m-%dT%H:%M:%S"
    formatter.default_msec_format = "%s.%03dZ"
    return formatter


QUIET_LIBRARIES: tuple[str, ...] = ("httpx2", "httpcore2")
"""Client libraries whose per-request INFO lines never reach the bridge's log."""


def configure_logging(
    level: str, log_format: Literal["text", "json"], *, stream: TextIO | None = None
) -> None:
    """Send every logger's records at `level` (a name, any case) and above to `stream`
    (stderr by default) in `log_format`, replacing whatever handlers the root logger had."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    if log_format == "json":
        handler.setFormatter(_json_formatter())
        handler.addFilter(MessageFields())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in QUIET_LIBRARIES:
        # Their INFO lines are one per request (httpx2 logs every forwarded call); their
        # warnings and errors still come through at any level.
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
