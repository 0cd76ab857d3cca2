"""The bridge's configuration: one frozen model, validated once at start (units in names).

`load_config` turns every way a configuration can be wrong (a missing file, TOML that does
not parse, an unknown key, a value of the wrong type or out of range) into one `ConfigError`
whose message is one sentence for the operator (docs/operations.md, "Configuration").
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ftwbridge import config_rules as rules
from ftwbridge.addresses import is_loopback
from ftwbridge.addresses import keys_addresses as keys_addresses
from ftwbridge.addresses import split_address as split_address
from ftwbridge.addresses import url_of_bind as url_of_bind
from ftwbridge.config_rules import CALL_SLACK_S as CALL_SLACK_S
from ftwbridge.config_rules import mesh_key_bytes as mesh_key_bytes
from ftwbridge.configfile import ENV_PREFIX as ENV_PREFIX
from ftwbridge.configfile import SECRET_SETTINGS as SECRET_SETTINGS
from ftwbridge.configfile import ConfigError as ConfigError
from ftwbridge.configfile import nearest, one_sentence, read_toml
from ftwbridge.secretfiles import read_secret_files

Seconds = Annotated[float, Field(gt=0)]
"""A duration in seconds that must be positive (a deadline, a timeout, an interval)."""
Rate = Annotated[float, Field(gt=0)]
"""A token-bucket refill rate per second; 0 would never refill, so it must be positive."""
Burst = Annotated[float, Field(ge=1)]
"""A token-bucket capacity: below 1 not even one request or message could ever pass."""
ByteRate = Annotated[int, Field(gt=0)]
"""Bytes per second, positive."""
ByteBurst = Annotated[int, Field(ge=1)]
"""A byte bucket's capacity in bytes, at least 1."""
Count = Annotated[int, Field(ge=1)]
"""A number of things allowed at once (calls, sessions), at least 1."""


def kek_bytes(text: str) -> bytes:
    """The 32 bytes of a `kek`, written as `mesh_key` is (`mesh_key_bytes`).

    Raises:
        ValueError: not 32 bytes as hex or base64; the message never repeats the value.
    """
    return mesh_key_bytes(text)


class Config(BaseModel):
    """Every setting of a bridge process, with the defaults of PROTOCOL.md's limits table.

    Load with `load_config(path)`: TOML file first, then `FTWBRIDGE_<FIELD>` environment
    variables (upper case) on top.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bind: str = "127.0.0.1:8780"
    """host:port of the main listener (/mcp, OAuth; boxes dial door_bind); 0 picks a free port."""
    public_url: str | None = None
    """The URL assistants reach; `/mcp` under it is the OAuth resource (RFC 8707). None
    (unset) follows `bind`: see `site_url`."""
    state_dir: Path = Path("state")
    """Where SQLite and the keys part's key file live; relative in a config file means
    relative to that file's folder (`load_config`)."""
    database_url: str | None = None
    """PostgreSQL to keep the state in, a libpq URL (`postgresql://user:password@host:5432/db`)
    shared by every instance of a cluster; the schema is migrated at start (docs/operations.md,
    "Many instances"). None keeps it in SQLite in `state_dir`, one process (the default)."""
    keys_socket: Path | None = None
    """Unix socket of a separate keys-part process; None runs the keys part in-process."""
    keys_url: str | None = None
    """The keys services this bridge uses over TCP, `tcp://host:port`, several separated by
    commas (tried in order); needs `mesh_key`. None: `keys_socket`, or in-process
    (docs/operations.md, "Many instances")."""
    mesh_key: str | None = Field(default=None, repr=False)
    """The key every instance of a cluster shares: 32 random bytes as 64 hex digits or as
    base64 (`openssl rand -hex 32`; `mesh_key_bytes`). It authenticates the keys channel
    (keys/mesh.py) and instances' forwarded calls. A secret: never logged, never repeated in
    an error."""
    kek: str | None = Field(default=None, repr=False)
    """Key-encryption key, 32 random bytes (hex or base64), read only by `ftwbridge keys`:
    agents' private keys are kept in the store sealed under it (pynacl SecretBox). A bridge
    (`serve`) refuses to start with it set."""
    mesh_key_file: Path | None = None
    """A file holding `mesh_key` alone (docs/operations.md, "Secrets in files"); not with
    `mesh_key`."""
    kek_file: Path | None = None
    """A file holding `kek` alone; not with `kek`."""
    database_url_file: Path | None = None
    """A file holding `database_url` alone (its password with it); not with `database_url`."""
    secrets_dir: Path | None = None
    """A folder of secrets' files named `mesh_key`, `kek` and `database_url` (`/run/secrets`,
    systemd's `$CREDENTIALS_DIRECTORY`); each one there is used unless the setting is given."""
    allowed_origins: tuple[str, ...] = ()
    """Origins (scheme://host:port) allowed besides the public URL's own."""
    allowed_hosts: tuple[str, ...] = ()
    """Host header values allowed besides the public URL's and the bind address's."""
    log_level: str = "info"
    """The least severe log line written: debug, info, warning, error or critical (any
    case). Commands other than `serve` and `keys` write warnings and worse unless it is set."""
    log_format: Literal["text", "json"] = "text"
    """`text`: one `<time> <LEVEL> <logger> <message>` line per record; `json`: one JSON
    object a line with the keys `ts`, `level`, `logger`, `msg` (and `key=value` fields of the
    message, such as the audit line's, as keys of their own); `ftwbridge.logs`."""

    pace_calls_burst: Burst = 15
    """Calls a home's bucket holds (its box's `pace.calls` burst), at least 1."""
    pace_calls_per_s: Rate = 0.75
    """Calls a second a home's bucket refills."""
    pace_bytes_burst: ByteBurst = 1024 * 1024
    """Request bytes a home's bucket holds."""
    pace_bytes_per_s: ByteRate = 128 * 1024
    """Request bytes a second a home's bucket refills."""
    pace_wait_s: float = Field(default=3.0, ge=0)
    """The longest a call waits for its home's bucket before `E_RATE_LIMITED`, seconds."""
    queue_per_home: int = Field(default=4, ge=0)
    """Calls waiting per home before `E_RATE_LIMITED` (0: none wait)."""
    calls_in_flight: Count = 256
    """Box calls in flight per process."""
    warm_sessions: Count = 1024
    """Warm sessions per process."""
    sessions_per_home: Count = 16
    """Agent sessions per home."""
    call_deadline_s: Seconds = 25.0
    """Every `/mcp` call is answered within this many seconds of its start, seconds
    (`ftwbridge/mcp/deadline.py`)."""
    confirm_commands: Literal["elicit", "preview", "off"] = "elicit"
    """How the person confirms `ev_charge_now` (docs/control.md, "Confirmation by the
    person"): `elicit` asks by elicitation where the client declares it (MCP 2026-07-28) and
    by a preview with a confirmation token otherwise; `preview` uses the preview for every
    client; `off` sends commands on the owner's grant alone. (true and false, the older
    spelling, read as `elicit` and `off`.)"""
    confirm_ttl_s: Seconds = 120.0
    """How long the person has to confirm a command, seconds."""
    idle_close_s: Seconds = 60.0
    """An idle warm session is closed after this many seconds."""
    handshake_s: Seconds = 5.0
    """A session's handshake and `hello_ok`, seconds."""
    clock_skew_max_ms: int = Field(default=300_000, ge=0)
    """How far the box's and the bridge's clocks may differ, ms."""

    http_burst: Burst = 30
    """Requests to `/mcp` an agent's bucket holds."""
    http_per_s: Rate = 10
    """Requests a second an agent's bucket refills."""
    max_body_bytes: ByteBurst = 1024 * 1024
    """The largest request body, bytes (413 past it)."""
    body_timeout_s: Seconds = 10.0
    """The longest a request body may take to arrive, seconds (408 past it)."""
    keep_alive_s: Seconds = 5.0
    """How long an HTTP/1.1 connection of the main, admin and internal listeners may wait
    idle for its next request before the bridge closes it, seconds (hypercorn's
    `keep_alive_timeout`; 5 s is its default). A proxy that keeps idle connections to the bridge must drop them
    sooner, or never keep them (docs/operations.md, "Keep-alive behind a proxy")."""

    listen_backlog: Annotated[int, Field(ge=16, le=65535)] = 1024
    """Connections each listener (main, admin, internal) lets wait to be accepted: a burst of
    new connections past it is not taken at once (the kernel drops their handshakes and the
    clients try again, or resets them with `net.ipv4.tcp_abort_on_overflow`). The kernel caps
    it at `net.core.somaxconn`; 1024 holds a burst of a thousand clients connecting at once."""

    door_msgs_burst: Burst = 240
    """Messages an uplink's bucket holds."""
    door_msgs_per_s: Rate = 60
    """Messages a second an uplink's bucket refills."""
    door_bytes_burst: ByteBurst = 4 * 1024 * 1024
    """Bytes an uplink's bucket holds."""
    door_bytes_per_s: ByteRate = 512 * 1024
    """Bytes a second an uplink's bucket refills."""
    door_hello_s: Seconds = 10.0
    """How long a new uplink may take to send `door.hello`, seconds (Close 4401 past it)."""
    door_ping_s: Seconds = 15.0
    """WebSocket ping interval on the uplinks, seconds."""
    door_silence_s: Seconds = 45.0
    """An uplink (and any connection of the main listener) silent this long is closed, s."""
    door_bind: str = "127.0.0.1:8783"
    """host:port of the door's own listener, the only one serving `/v1/box` (docs/operations.md,
    "The door's own listener"): WebSocket on trio streams, no HTTP server; it cannot be off."""
    door_handshake_s: Seconds = 10.0
    """How long a connection to the door's own listener may take to send its request head, s."""

    token_ttl_s: int = Field(default=3600, gt=0)
    """An access token's lifetime, seconds."""

    live_feed_hz: float = 1.0
    """The rate live feeds subscribe at (agents.yaml `telemetry_hz`), pulses a second."""
    listen_min_interval_s: Seconds = 5.0
    """The least time between two `resources/updated` of one listen stream for readings that
    moved, seconds; a source's state, the mode or a dispatch block is sent sooner (docs/live.md)."""
    listen_keepalive_s: Seconds = 15.0
    """A quiet listen stream sends a comment this often, seconds."""
    listen_per_agent: int = Field(default=2, ge=1)
    """Listen streams one agent holds at once (HTTP 429 past it)."""
    listen_streams: int = Field(default=1024, ge=1)
    """Listen streams one process holds at once (HTTP 503 past it)."""
    listen_stuck_s: Seconds = 30.0
    """A listen stream whose write does not finish in this many seconds is closed."""

    _confirm_spelling = field_validator("confirm_commands", mode="before")(rules.confirm_spelling)

    _proxies = field_validator("trusted_proxies")(rules.proxies)

    @property
    def site_url(self) -> str:
        """The public URL in effect: `public_url` when set, else `http://<bind>` with a
        wildcard host (0.0.0.0, ::) read as this machine's loopback. Port 0 stays 0 here; the
        bridge puts in the port it bound (`run.Bridge.serve`)."""
        if self.public_url is not None:
            return self.public_url
        return url_of_bind(self.bind)

    def url_warning(self) -> str | None:
        """One sentence when the public URL cannot work for anyone beyond this machine while
        the listener serves beyond it (a loopback URL on a public bind), else None. Whether a
        URL that differs from `bind` otherwise is right (a proxy in front) cannot be told."""
        bind_host = split_address(self.bind)[0]
        url_host = (pydantic.AnyUrl(self.site_url).host or "").strip("[]")
        if is_loopback(bind_host) or not is_loopback(url_host):
            return None
        how = (
            "public_url"
            if self.public_url is not None
            else "public_url (not set, so taken from bind)"
        )
        return (
            f"{how} is {self.site_url}, a loopback address, but bind {self.bind} listens beyond"
            " this machine: assistants elsewhere would be sent to a URL they cannot reach (the"
            " OAuth metadata, the 401 challenge); set public_url to the address they use"
        )

    _address = field_validator("bind", "admin_bind", "internal_bind", "door_bind")(rules.address)

    _door_always = field_validator("door_bind", mode="before")(rules.door_always)

    _http_url = field_validator("public_url")(rules.http_url)

    _postgres_url = field_validator("database_url")(rules.postgres_url)

    _secret_32 = field_validator("mesh_key", "kek")(rules.secret_32)

    _tcp_urls = field_validator("keys_url")(rules.tcp_urls)

    _keys_settings = model_validator(mode="after")(rules.keys_settings)

    _level = field_validator("log_level", mode="before")(rules.level)

    _feed_hz = field_validator("live_feed_hz")(rules.feed_hz)

    _silence_outlasts_a_call = model_validator(mode="after")(rules.silence_outlasts_a_call)

    _none_words = field_validator(
        "admin_bind",
        "keys_socket",
        "keys_url",
        "mesh_key",
        "kek",
        "database_url",
        "test_anonymous_token",
        "instance_id",
        "internal_bind",
        "internal_url",
        "internal_certfile",
        "internal_keyfile",
        "mesh_cafile",
        "mesh_key_file",
        "kek_file",
        "database_url_file",
        "secrets_dir",
        mode="before",
    )(rules.none_words)

    test_anonymous_token: str | None = None
    """TEST PROFILE ONLY (never set in production): a request with no Authorization header is
    served as if it carried this bearer token. The official conformance suite sends none."""
    client_metadata_documents: bool = True
    """Accept a `client_id` that is an https URL naming its metadata document (fetched, bounded)."""
    test_loopback_metadata: bool = False
    """TEST PROFILE ONLY: let http on a loopback host stand in for https metadata documents."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses or CIDR blocks of reverse proxies whose `X-Forwarded-For` is believed when
    a limit keys on the client's address (the OAuth endpoints, the door's unauthenticated
    uplinks, the audit's client: docs/auth.md); none by default. Their own connections are
    not counted as strangers' (docs/operations.md, "Limits that strangers cannot fill")."""
    refresh_grace_ms: int = Field(default=10_000, ge=0, le=300_000)
    """Milliseconds during which repeated refreshes of one refresh token get the same new pair
    (RFC 9700 section 4.14.2 trade-off, docs/auth.md); 0 makes every repeat revoke the grant."""
    drain_s: float = Field(default=10.0, ge=0)
    """How long calls in flight may finish after SIGTERM before sessions are closed."""
    admin_bind: str | None = "127.0.0.1:8781"
    """host:port of the admin listener (/metrics, /healthz, /readyz); None turns it off."""

    instance_id: str | None = None
    """This instance's name among the instances on one `database_url` (letters, digits, `.`,
    `_`, `-`; at most 64), unique among running instances. None: the machine's host name and
    the main listener's port (`instance_name`)."""
    internal_bind: str | None = None
    """host:port of the internal listener that takes `/mcp` calls forwarded by the other
    instances; None (the default) turns forwarding off. Needs
    `database_url` and `mesh_key`."""
    internal_url: str | None = None
    """The URL other instances reach the internal listener at; None follows `internal_bind`
    (a wildcard host read as this machine's loopback, as for `public_url`; `https://` with
    `internal_certfile`)."""
    internal_certfile: Path | None = None
    """PEM certificate chain the internal listener serves TLS with (with `internal_keyfile`);
    None serves plain HTTP (docs/operations.md, "Trust across the internal hop")."""
    internal_keyfile: Path | None = Field(default=None, repr=False)
    """PEM private key of `internal_certfile`."""
    mesh_cafile: Path | None = None
    """PEM CA certificates that sign the instances' internal certificates: set, calls are
    forwarded only over `https://`, each holder's certificate verified against this file
    alone. None forwards to what `internal_url` says (plain HTTP included)."""

    _instance_name = field_validator("instance_id")(rules.instance_name)

    _internal_http_url = field_validator("internal_url")(rules.internal_http_url)

    _forwarding_needs = model_validator(mode="after")(rules.forwarding_needs)

    def instance_name(self, port: int) -> str:
        """`instance_id`, or the machine's host name and `port` (the main listener's) when
        it is unset."""
        if self.instance_id is not None:
            return self.instance_id
        host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:50] or "bridge"
        return f"{host}-{port}"

    @property
    def internal_site_url(self) -> str | None:
        """The internal URL in effect: `internal_url`, else one built from `internal_bind`
        (port 0 stays 0 here; the bridge puts in the port it bound), or None when off."""
        if self.internal_url is not None or self.internal_bind is None:
            return self.internal_url
        url = url_of_bind(self.internal_bind)
        return "https://" + url.removeprefix("http://") if self.internal_certfile else url


PATH_KEYS = (
    "state_dir",
    "keys_socket",
    "mesh_key_file",
    "kek_file",
    "database_url_file",
    "secrets_dir",
)
"""Settings that are paths: relative in a config file means relative to the file's folder."""


def load_config(path: Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Build a `Config` from a TOML file (optional) and `FTWBRIDGE_*` variables of `env`
    (default: the process environment), the variables winning. A relative `state_dir` or
    `keys_socket` in the file is taken from the file's folder, in a variable from the
    current folder.

    Raises:
        ConfigError: the file is missing or unreadable, is not TOML, names an unknown key;
            a variable `FTWBRIDGE_*` names no setting; a value has the wrong type or is out of
            range. The message is one sentence naming the file or the variable.
    """
    data: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if path is not None:
        for key, value in read_toml(path).items():
            if key not in Config.model_fields:
                raise ConfigError(
                    f"{path}: unknown key {key!r}{nearest(key, list(Config.model_fields))}"
                )
            if (
                key in PATH_KEYS
                and isinstance(value, str)
                and value.strip().lower() not in ("", "none")
            ):
                value = str(path.parent / value)  # an absolute `value` stays as it is
            data[key], origin[key] = value, str(path)
    environ = os.environ if env is None else env
    for variable, raw in environ.items():
        if not variable.startswith(ENV_PREFIX):
            continue
        name = variable[len(ENV_PREFIX) :].lower()
        if name not in Config.model_fields:
            raise ConfigError(
                f"the environment variable {variable} names no setting{nearest(name, list(Config.model_fields), env=True)}"
            )
        data[name] = raw.split(",") if name.startswith("allowed_") else raw
        origin[name] = f"the environment variable {variable}"
    try:
        read_secret_files(data, origin)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        return Config.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(one_sentence(exc, origin, path)) from None
