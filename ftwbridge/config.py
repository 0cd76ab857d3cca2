"""The bridge's configuration: one frozen model, validated once at start (units in names)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

ENV_PREFIX = "FTWBRIDGE_"


class Config(BaseModel):
    """Every setting of a bridge process, with the defaults of PROTOCOL.md's limits table.

    Load with `load_config(path)`: TOML file first, then `FTWBRIDGE_<FIELD>` environment
    variables (upper case) on top.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bind: str = "127.0.0.1:8780"
    """host:port the HTTP listener binds (/mcp and /v1/box)."""
    public_url: str = "http://127.0.0.1:8780"
    """The URL assistants reach; `/mcp` under it is the OAuth resource (RFC 8707)."""
    state_dir: Path = Path("state")
    """Where SQLite and the keys part's key file live."""
    keys_socket: Path | None = None
    """Unix socket of a separate keys-part process; None runs the keys part in-process."""
    allowed_origins: tuple[str, ...] = ()
    """Origins (scheme://host:port) allowed besides the public URL's own."""
    allowed_hosts: tuple[str, ...] = ()
    """Host header values allowed besides the public URL's and the bind address's."""

    pace_calls_burst: float = 15
    pace_calls_per_s: float = 0.75
    pace_bytes_burst: int = 1024 * 1024
    pace_bytes_per_s: int = 128 * 1024
    pace_wait_s: float = 3.0
    queue_per_home: int = 4
    calls_in_flight: int = 256
    warm_sessions: int = 1024
    sessions_per_home: int = 16
    call_deadline_s: float = 25.0
    idle_close_s: float = 60.0
    handshake_s: float = 5.0
    clock_skew_max_ms: int = 300_000

    http_burst: float = 30
    http_per_s: float = 10
    max_body_bytes: int = 1024 * 1024
    body_timeout_s: float = 10.0

    door_msgs_burst: float = 240
    door_msgs_per_s: float = 60
    door_bytes_burst: int = 4 * 1024 * 1024
    door_bytes_per_s: int = 512 * 1024
    door_hello_s: float = 10.0
    door_ping_s: float = 15.0
    door_silence_s: float = 45.0

    token_ttl_s: int = Field(default=3600, gt=0)

    @field_validator("admin_bind", "keys_socket", "test_anonymous_token", mode="before")
    @classmethod
    def _none_words(cls, value: Any) -> Any:
        """TOML has no null and the environment only text: "" or "none" turns a setting off."""
        return None if isinstance(value, str) and value.strip().lower() in ("", "none") else value

    test_anonymous_token: str | None = None
    """TEST PROFILE ONLY (never set in production): a request with no Authorization header is
    served as if it carried this bearer token. The official conformance suite sends none."""
    client_metadata_documents: bool = True
    """Accept a `client_id` that is an https URL naming its metadata document (fetched, bounded)."""
    test_loopback_metadata: bool = False
    """TEST PROFILE ONLY: let http on a loopback host stand in for https metadata documents."""
    drain_s: float = 10.0
    """How long calls in flight may finish after SIGTERM before sessions are closed."""
    admin_bind: str | None = "127.0.0.1:8781"
    """host:port of the admin listener (/metrics, /healthz, /readyz); None turns it off."""


def load_config(path: Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Build a `Config` from a TOML file (optional) and `FTWBRIDGE_*` variables of `env`.

    Raises:
        pydantic.ValidationError: an unknown key or a value of the wrong type.
        OSError, tomllib.TOMLDecodeError: an unreadable file.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data.update(tomllib.loads(path.read_text("utf-8")))
    environ = os.environ if env is None else env
    for name in Config.model_fields:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None:
            data[name] = raw.split(",") if name.startswith("allowed_") else raw
    return Config.model_validate(data)
