"""The transport under the hop channel's TLS (`mesh/channel.py`): a TCP stream that hands the
TLS layer one record at a time, so the channel can tell, with public calls only, that a
pooled connection holds no byte past the answer it read.

Why: a holder that sends bytes past an answer's `Content-Length` (a second answer, say) in
the same TCP segment but in a TLS record of its own leaves them where no poll of the socket
sees them: a `trio.SSLStream` reads what the socket has into its TLS object's incoming
buffer and decrypts a record per read, so the extra record waits there, and the next
request on that connection would read it as its answer. trio exposes no count of those
bytes (`SSLStream.pending()`, the TLS object's own, counts only decrypted bytes not yet
read), and a receive tried without waiting cannot be had from it either (a cancel scope
whose deadline has passed cancels a receive before it reads a buffered byte). So the records
are handed up one by one (RFC 8446 section 5.1, RFC 5246 section 6.2: a 5-byte header whose
last two bytes are the length of what follows): the TLS layer is never given a byte of the
next record before it asks again, and once it has returned the plain bytes of one, what it
still holds is counted by `pending()`, and what came after is `held` here.
"""

from __future__ import annotations

import ssl
from typing import Final

import trio

RECORD_HEADER_BYTES: Final = 5
"""A TLS record's header: type, version (2 bytes), length of its fragment (2 bytes)."""


class RecordStream(trio.abc.Stream):
    """`transport` read and written as is, its bytes handed up no further than the end of the
    TLS record under way (see the module). Bytes that are not TLS records only lose that
    bound: the TLS layer above refuses them.

    Args:
        transport: the TCP stream (closed with this one).
        receive_bytes: the most read from `transport` at once, bytes.
    """

    __slots__ = ("_header", "_left", "_rest", "receive_bytes", "transport")

    def __init__(self, transport: trio.abc.Stream, *, receive_bytes: int = 65_536) -> None:
        self.transport = transport
        self.receive_bytes = receive_bytes
        self._rest = b""  # read from the transport, not handed up yet: later records
        self._left = 0  # bytes of the record under way not handed up yet (its header read)
        self._header = b""  # the part of the next record's header handed up so far

    @property
    def held(self) -> int:
        """Bytes read from the transport that the TLS layer was not given yet."""
        return len(self._rest)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next bytes, at most up to the end of the record under way (b"": end of
        stream). Errors: the transport's."""
        if self._rest:
            await trio.lowlevel.checkpoint()
            data, self._rest = self._rest, b""
        else:
            data = bytes(await self.transport.receive_some(self.receive_bytes))
        if max_bytes is not None and len(data) > max_bytes:
            data, self._rest = data[:max_bytes], data[max_bytes:] + self._rest
        cut = self._record_cut(data)
        if cut < len(data):
            data, self._rest = data[:cut], data[cut:] + self._rest
        return data

    def _record_cut(self, data: bytes) -> int:
        """How many of `data`'s first bytes belong to the record under way (all of them
        when it goes on past them); keeps the count of what is left of it."""
        if self._left:
            cut = min(self._left, len(data))
            self._left -= cut
            return cut
        need = RECORD_HEADER_BYTES - len(self._header)
        header = self._header + data[:need]
        if len(header) < RECORD_HEADER_BYTES:
            self._header = header
            return len(data)
        self._header = b""
        cut = need + int.from_bytes(header[3:5], "big")
        if cut >= len(data):
            self._left = cut - len(data)
            return len(data)
        return cut

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """`data` sent on the transport (its errors)."""
        await self.transport.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        """As the transport's."""
        await self.transport.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Close the transport."""
        self._rest = b""
        await self.transport.aclose()


async def open_tls(
    tcp: trio.abc.Stream, context: ssl.SSLContext, host: str, *, receive_bytes: int
) -> trio.SSLStream[RecordStream]:
    """TLS over `tcp` (a `RecordStream` under it, reading at most `receive_bytes` at once),
    its handshake done, `host` checked as `context` asks (HTTPS's rules for a close).

    Raises:
        trio.BrokenResourceError: the handshake failed (`tcp` is closed then).
    """
    records = RecordStream(tcp, receive_bytes=receive_bytes)
    tls = trio.SSLStream(records, context, server_hostname=host, https_compatible=True)
    try:
        await tls.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(tcp)
        raise
    return tls


def holds_more(tls: trio.SSLStream[RecordStream]) -> bool:
    """Whether `tls` (made by `open_tls`) holds bytes that were not read yet: decrypted in its
    TLS object (`pending()`, public in trio) or not handed to it yet (`RecordStream.held`)."""
    return bool(tls.transport_stream.held or tls.pending())
