"""The checks `Config` runs on its settings at load (`config.py` binds each to its fields):
spellings read as their value, addresses and URLs in the shape the listeners and clients
take, secrets of the right length, and the rules across settings (one way to the keys part,
a read timeout that outlasts a call, what forwarding needs). Each raises `ValueError` in
words that never repeat a secret; `load_config` makes them one sentence.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from typing import TYPE_CHECKING, Any

from ftwbridge.addresses import keys_addresses, split_address

if TYPE_CHECKING:
    from ftwbridge.config import Config

CALL_SLACK_S = 2.0
"""Seconds the bounds that only back `call_deadline_s` up keep above it (a call ends by its
deadline, `ftwbridge/mcp/deadline.py`): `door_silence_s` must leave at least this much, and
the forwarding client's read timeout has it on top."""

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


MESH_KEY_BYTES = 32
"""The length of `mesh_key` once decoded, bytes (an HMAC-SHA256 key of the hash's size)."""


def mesh_key_bytes(text: str) -> bytes:
    """The 32 bytes of a `mesh_key` written as 64 hex digits or as base64.

    Raises:
        ValueError: neither, or not 32 bytes; the message never repeats the value.
    """
    text = text.strip()
    try:
        raw = bytes.fromhex(text) if re.fullmatch(r"[0-9a-fA-F]{64}", text) else None
        if raw is None:
            raw = base64.b64decode(text, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != MESH_KEY_BYTES:
        raise ValueError(
            "must be 32 random bytes as 64 hex digits or as base64 (make one with"
            " `openssl rand -hex 32`)"
        )
    return raw


def confirm_spelling(value: Any) -> Any:
    """true and false (TOML, or the words in the environment) read as elicit and off."""
    word = value.strip().lower() if isinstance(value, str) else value
    if word in (True, "true"):
        return "elicit"
    if word in (False, "false"):
        return "off"
    return word


def proxies(value: tuple[str, ...]) -> tuple[str, ...]:
    """`trusted_proxies`: each entry an IP address or a CIDR block."""
    try:
        for entry in value:
            ipaddress.ip_network(entry.strip(), strict=False)
    except ValueError:
        raise ValueError("each entry must be an IP address or a CIDR block") from None
    return value


def address(value: str | None) -> str | None:
    """host:port that `split_address` reads, checked at load rather than at bind."""
    if value is not None:
        split_address(value)
    return value


def door_always(value: Any) -> Any:
    """`door_bind`: the door always has its own listener, so "" and "none" (which turn other
    listeners off) are refused in words rather than read as an address."""
    if isinstance(value, str) and value.strip().lower() in ("", "none"):
        raise ValueError(
            "must be a host:port: the door always has its own listener (the main one refuses"
            " /v1/box); the default is 127.0.0.1:8783"
        )
    return value


def http_url(value: str | None) -> str | None:
    """`public_url`: an http:// or https:// URL with a host."""
    if value is not None and not re.match(r"https?://[^/\s]+", value):
        raise ValueError(f"must be an http:// or https:// URL (got {value!r})")
    return value


def postgres_url(value: str | None) -> str | None:
    """A URL libpq reads as PostgreSQL's, checked at load rather than at connect; the
    message never repeats the value, which may hold a password."""
    if value is not None and not re.match(r"postgres(ql)?://", value.strip()):
        raise ValueError(
            "must be a PostgreSQL URL such as postgresql://user:password@host:5432/ftwbridge"
        )
    return None if value is None else value.strip()


def secret_32(value: str | None) -> str | None:
    """`mesh_key` and `kek`: 32 bytes as hex or base64 (`mesh_key_bytes`)."""
    if value is not None:
        mesh_key_bytes(value)  # raises ValueError in words that never repeat the key
    return value


def tcp_urls(value: str | None) -> str | None:
    """`keys_url`: one or more `tcp://host:port` (`keys_addresses`)."""
    if value is not None:
        keys_addresses(value)
    return value


def keys_settings(config: Config) -> Config:
    """One way to the keys part, and the channel's secret where it goes over TCP."""
    if config.keys_url is not None and config.keys_socket is not None:
        raise ValueError("keys_url and keys_socket are both set; set only one of them")
    if config.keys_url is not None and config.mesh_key is None:
        raise ValueError(
            "keys_url is set but mesh_key is not: the keys channel is authenticated with"
            " the cluster's mesh key"
        )
    return config


def level(value: Any) -> Any:
    """`log_level`: one of `LOG_LEVELS`, in any case."""
    if isinstance(value, str):
        value = value.strip().lower()
        if value not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)} (got {value!r})")
    return value


def feed_hz(value: float) -> float:
    """`live_feed_hz`: one of the contract's telemetry rates (PROTOCOL.md part F)."""
    from ftwbridge.proto.telemetry import TELEMETRY_HZ  # the contract's rates

    if value not in TELEMETRY_HZ:
        raise ValueError(f"must be one of {', '.join(f'{h:g}' for h in TELEMETRY_HZ)}")
    return value


def silence_outlasts_a_call(config: Config) -> Config:
    """`door_silence_s` is the HTTP server's read timeout on the main listener, so it bounds
    how long any connection there may send nothing, and a `/mcp` call waiting for its box
    sends nothing. Below `call_deadline_s` plus `CALL_SLACK_S` it would cut such calls
    with no answer at all (the soak run saw exactly that), so it is refused at start."""
    least = config.call_deadline_s + CALL_SLACK_S
    if config.door_silence_s < least:
        raise ValueError(
            f"door_silence_s ({config.door_silence_s:g} s) must be at least call_deadline_s"
            f" + {CALL_SLACK_S:g} s ({least:g} s): it also bounds how long an HTTP"
            " connection may stay silent, and a tool call waiting for its home is silent"
        )
    return config


def none_words(value: Any) -> Any:
    """TOML has no null and the environment only text: "" or "none" turns a setting off."""
    return None if isinstance(value, str) and value.strip().lower() in ("", "none") else value


def instance_name(value: str | None) -> str | None:
    """`instance_id`: 1 to 64 letters, digits, `.`, `_` or `-`."""
    if value is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", value):
        raise ValueError(
            f"must be 1 to 64 letters, digits, '.', '_' or '-' (such as bridge-1) (got {value!r})"
        )
    return value


def internal_http_url(value: str | None) -> str | None:
    """`internal_url`: http(s)://host:port, its trailing slash dropped."""
    if value is not None and not re.match(r"https?://[^/\s]+/?$", value):
        raise ValueError(f"must be http://host:port or https://host:port (got {value!r})")
    return None if value is None else value.rstrip("/")


def forwarding_needs(config: Config) -> Config:
    """Forwarding (`internal_bind`) works only on a shared database with a shared key."""
    if (config.internal_certfile is None) != (config.internal_keyfile is None):
        raise ValueError("internal_certfile and internal_keyfile go together: set both")
    if config.internal_bind is not None:
        missing = [name for name in ("database_url", "mesh_key") if getattr(config, name) is None]
        if missing:
            raise ValueError(
                f"internal_bind needs {' and '.join(missing)}: instances forward calls to"
                " each other only on one shared database, signed with one shared key"
            )
    return config
