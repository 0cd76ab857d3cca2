"""What the bridge's listeners hold and count, apart from hypercorn's insides (`ftwbridge.edge`):
the last words a faulted connection gets, the door's WebSocket closing times, the states of a
connection, the open connections of one listener, and `EdgeConfig`, hypercorn's public
`Config` with the guard's settings."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Final, Protocol

from hypercorn.config import Config as HypercornConfig

from ftwbridge.fairshare import Network, Slots

BAD_REQUEST: Final = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
"""The last words to an HTTP peer that has been sent nothing yet (RFC 9112 section 9.6)."""
SERVER_ERROR: Final = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)
"""What replaces a held response head whose body will never come (its app failed before it)."""
WRITE_S: Final = 45.0
"""The bound of one write on a hypercorn listener with no read timeout (the admin one), where
the read timeout bounds it otherwise (seconds; the main listener's default, `door_silence_s`):
a peer that pipelines requests and reads no answer is let go, not held for ever."""
LAST_WORDS_S: Final = 1.0
"""How long the guard tries to send its last words before it closes the socket (seconds)."""
CLOSE_REPLY_S: Final = 2.0
"""How long a box has to answer the door's WebSocket Close before the socket is closed
(seconds; `door.wsock`): waiting for the silence rule (45 s) would hold a socket per stranger."""
FAILING_CODES: Final = frozenset({1002, 1003, 1007, 1008, 1009, 1010, 1011, 4400, 4401, 4403})
"""Close codes that fail the door's WebSocket (RFC 6455 section 7.1.7; the door's refusals):
from then on what the peer still sends (the rest of a message over the limit) is read and dropped
unparsed, and the socket closes after `LAST_WORDS_S` at most; reading on meanwhile keeps the
kernel from answering with a reset that would discard our Close."""
MAX_STRANGERS: Final = 1024
"""Connections of one listener that have not sent a whole request head yet, all peers
together; past it the peer address holding the most loses its oldest (`fairshare`)."""
STRANGERS_PER_SOURCE: Final = 256
"""Such connections one peer address may hold; one more is refused at once (a client opening
many connections at once holds each for the moment its first request head takes)."""
TURNED_AWAY: Final = {
    429: (
        "Too Many Requests",
        5,
        "This address holds too many connections that have sent no request yet; send requests"
        " on those, or try again in a few seconds.",
    ),
    503: (
        "Service Unavailable",
        2,
        "This listener holds too many connections that have sent no request yet, and this"
        " address held the most of them; try again in a few seconds.",
    ),
}
"""What a stranger turned away by a listener's quota is told, by HTTP status: (reason phrase,
`Retry-After` in seconds, words). 429 (RFC 6585 section 4) when its address is at
`STRANGERS_PER_SOURCE`, 503 when the total is full and its address holds the most (refused on
arrival, or shed for a lighter address's)."""


def turned_away_status(strangers: Slots, source: str) -> int:
    """The status of a stranger from `source` that `strangers` refused on arrival: 429 when
    the address holds its own share, 503 when the total is full (see `TURNED_AWAY`)."""
    return 429 if strangers.share.held_by(source) >= strangers.share.per_source else 503


class State(StrEnum):
    """What one connection of a listener is doing (the `state` label of `ftwbridge_connections`)."""

    IDLE = "idle"
    """HTTP/1.1 with no request under way: nothing sent yet, or kept alive between requests
    (hypercorn closes it after `keep_alive_timeout`, 5 s)."""
    REQUEST = "request"
    """HTTP/1.1 with a request under way (on `/mcp`, a tool call waiting for its home)."""
    HTTP2 = "http2"
    """HTTP/2, by prior knowledge or an h2c upgrade, whatever its streams do."""
    WEBSOCKET = "websocket"
    """A WebSocket at the door's own listener (the only one that speaks it): a box's uplink, or
    a connection still to authenticate."""
    CLOSING = "closing"
    """Being closed: a Close sent and its answer awaited (at most `CLOSE_REPLY_S`), a fault's
    last words, or the socket being shut."""


class _Counted(Protocol):
    @property
    def connection_state(self) -> State: ...


class Connections:
    """The open connections of one listener, counted by `State` only when asked (`/metrics`).

    Each `GuardedTCPServer` adds itself as its connection starts and leaves as it ends; its
    state is worked out from what it notes anyway, so nothing is counted per request.
    """

    def __init__(self) -> None:
        self._open: set[_Counted] = set()
        self.turned_away = {"refused": 0, "shed": 0}
        """Connections that sent no whole request and were closed by the listener's quota
        of strangers (`EdgeConfig.strangers`): refused on arrival, or shed for a lighter
        address's (they only grow)."""

    def add(self, connection: _Counted) -> None:
        """A connection has started."""
        self._open.add(connection)

    def discard(self, connection: _Counted) -> None:
        """A connection has ended."""
        self._open.discard(connection)

    def by_state(self) -> dict[State, int]:
        """How many connections are in each state now (every state present, zeros included)."""
        counts = dict.fromkeys(State, 0)
        for connection in self._open:
            counts[connection.connection_state] += 1
        return counts


class EdgeConfig(HypercornConfig):
    """hypercorn's `Config` with the guard's hooks: `on_connection_fault(kind)` is called once
    per connection ended by a fault (kind `http` or `http2`); `connections`, if
    set, holds the listener's open connections for the gauge; `strangers` is the listener's
    quota of connections that have not sent a whole request yet (`MAX_STRANGERS`, per peer
    address `STRANGERS_PER_SOURCE`, the heaviest address shed first: docs/operations.md,
    "Limits that strangers cannot fill"); peers in `exempt` (trusted proxies, which bound
    their own clients) are not counted there."""

    on_connection_fault: Callable[[str], None] | None = None
    connections: Connections | None = None
    exempt: tuple[Network, ...] = ()
    stream_write_s: float | None = None
    """While a response of type `text/event-stream` is under way (a listen stream), the
    read timeout does not apply to the connection (the client has nothing more to say) and
    each write is bounded by this instead (None: the read timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.strangers = Slots(MAX_STRANGERS, STRANGERS_PER_SOURCE)


def announces_body(head: bytes) -> bool:
    """Whether `head`, one whole final HTTP/1.1 response head in lower case, announces a body
    by its `Content-Length`. A chunked (streamed) answer and a head with no body to follow
    (hypercorn's own 400 before it closes) are not held back."""
    if not head.endswith(b"\r\n\r\n"):
        return False
    _, found, rest = head.partition(b"\r\ncontent-length:")
    return bool(found) and rest.split(b"\r\n", 1)[0].strip() not in (b"0", b"")
