"""The bridge's configuration: one frozen model, validated once at start (units in names)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ENV_PREFIX = "FTWBRIDGE_"
CALL_SLACK_S = 2.0
"""What a `/mcp` call may take past `call_deadline_s` besides its box reads (the token check,
shaping the answer), in seconds; `door_silence_s` must leave at least this much."""


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

    @model_validator(mode="after")
    def _silence_outlasts_a_call(self) -> Config:
        """`door_silence_s` is the HTTP server's read timeout on the main listener, so it bounds
        how long any connection there may send nothing, and a `/mcp` call waiting for its box
        sends nothing. Below `call_deadline_s` plus `CALL_SLACK_S` it would cut such calls
        with no answer at all (issue 11's soak), so it is refused at start."""
        least = self.call_deadline_s + CALL_SLACK_S
        if self.door_silence_s < least:
            raise ValueError(
                f"door_silence_s ({self.door_silence_s:g} s) must be at least call_deadline_s"
                f" + {CALL_SLACK_S:g} s ({least:g} s): it also bounds how long an HTTP"
                " connection may stay silent, and a tool call waiting for its home is silent"
            )
        return self

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
