"""Log lines an operator can use (docs/operations.md, "Logs"): level and logger on every line, and JSON
with stable keys and the audit line's fields as keys of their own."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from ftwbridge.logs import configure_logging


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """The root logger's handlers and level, put back after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = io.StringIO()
    yield out
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def _audit() -> None:
    """The audit line as `ftwbridge/mcp/server.py` writes it."""
    logging.getLogger("ftwbridge.audit").info(
        "tool=%s home=%s agent=%s client=%s status=%s duration_ms=%d",
        "status",
        "demo-home",
        "agent-1c7f92c9",
        "demo",
        "ok",
        3.7,
    )


def test_json_has_stable_keys_and_the_audit_fields(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream)
    _audit()
    logging.getLogger("ftwbridge.door").warning("uplink down home=%s (100%% gone)", "H")
    logging.getLogger("ftwbridge.pool").debug("not written at info")
    audit, door = (json.loads(line) for line in stream.getvalue().splitlines())
    assert list(audit)[:4] == ["ts", "level", "logger", "msg"]
    assert audit["level"] == "INFO" and audit["logger"] == "ftwbridge.audit"
    assert audit["msg"] == (
        "tool=status home=demo-home agent=agent-1c7f92c9 client=demo status=ok duration_ms=3"
    )
    assert {k: audit[k] for k in ("tool", "home", "agent", "client", "status")} == {
        "tool": "status",
        "home": "demo-home",
        "agent": "agent-1c7f92c9",
        "client": "demo",
        "status": "ok",
    }
    assert audit["duration_ms"] == 3  # a number, as the message shows it
    assert door["level"] == "WARNING" and door["home"] == "H"
    assert door["msg"] == "uplink down home=H (100% gone)"
    assert audit["ts"].endswith("Z") and "T" in audit["ts"]


def test_json_keeps_extra_fields_and_tracebacks(stream: io.StringIO) -> None:
    configure_logging("debug", "json", stream=stream)
    log = logging.getLogger("ftwbridge.x")
    log.info("with extra", extra={"home": "H", "tun": 7})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("it failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["home"] == "H" and first["tun"] == 7
    assert second["level"] == "ERROR" and "RuntimeError: boom" in second["exc_info"]


def test_text_names_level_and_logger(stream: io.StringIO) -> None:
    configure_logging("WARNING", "text", stream=stream)
    _audit()  # info: below the level
    logging.getLogger("ftwbridge.door").warning("uplink down home=%s", "H")
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(" WARNING ftwbridge.door uplink down home=H")


def test_a_forwarded_call_leaves_no_client_library_line(stream: io.StringIO) -> None:
    """httpx2 logs each request it sends at INFO; at the bridge's INFO level that would be one
    line per forwarded call. Its warnings still reach the log."""
    configure_logging("INFO", "text", stream=stream)
    try:
        logging.getLogger("httpx2").info('HTTP Request: POST http://b-2/mcp "HTTP/1.1 200 OK"')
        logging.getLogger("httpx2").warning("connection pool is full")
        (line,) = stream.getvalue().splitlines()
        assert line.endswith(" WARNING httpx2 connection pool is full")
    finally:
        logging.getLogger("httpx2").setLevel(logging.NOTSET)
