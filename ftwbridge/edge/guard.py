"""The fault guard of each connection: what a peer's bytes make hypercorn raise ends that
connection alone (the `ftwbridge.edge` package's docstring has the rules and the names of
hypercorn used here)."""

from __future__ import annotations

import logging
import math

import trio
from hypercorn.events import Closed, RawData
from hypercorn.trio.tcp_server import MAX_RECV

from ftwbridge.edgerules import BAD_REQUEST, LAST_WORDS_S, turned_away_status
from ftwbridge.fairshare import SlotRefused, Slots, source_key
from ftwbridge.listening import peer_host, receive_when_readable, say_at_once

from .writes import HEAD_TIMEOUT_BYTES, TURNED_AWAY_BYTES, WritingServer

log = logging.getLogger("ftwbridge.edge")


class GuardedTCPServer(WritingServer):
    """hypercorn's connection handler with one change: a fault ends this connection alone.

    Everything a peer can make hypercorn raise is caught at the two places it surfaces: the
    read loop (`_read_data`, where received bytes are parsed) and the connection task as a whole
    (`run`, where errors of the connection's own tasks, such as an app's, arrive). Cancellation is
    never caught.
    """

    async def _read_data(self) -> None:
        try:
            await self._read_loop()
        except Exception as exc:
            await self._fault(exc)
        finally:  # the connection has ended: no keep-alive timer either (5 s more of a socket)
            self.idle_task.end()  # type: ignore[attr-defined]

    async def _read_loop(self) -> None:
        """hypercorn's `TCPServer._read_data`, with its read timeout in a scope of our own, so
        that a stream's response lifts it (`_stream`), and each read waiting for the socket
        first (`listening.receive_when_readable`: the peer mostly waits for our answer): the
        bytes read, the end of the loop and the `Closed` it hands on are hypercorn's."""
        while True:
            limit = self.config.read_timeout
            deadline = trio.current_time() + limit if limit and not self._streaming else math.inf
            with trio.CancelScope(deadline=deadline) as self._read_scope:
                try:
                    data = await receive_when_readable(self.stream, MAX_RECV)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    break
            if self._read_scope.cancelled_caught:
                break  # the read timeout: hypercorn's TooSlowError
            if data and not self._busy:
                self._partial_head = True
            await self.protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
        await self.protocol.handle(Closed())

    async def _initiate_server_close(self) -> None:
        """The keep-alive timer's close (hypercorn's), with a 408 in words first when part of
        a request head has come (a whole one would have stopped the timer), said at once."""
        if self._partial_head and not self._busy and not self._held and self._kind() == "http":
            self._partial_head = False
            say_at_once(self.stream, HEAD_TIMEOUT_BYTES)
        await super()._initiate_server_close()

    async def run(self) -> None:
        """Serve the connection; a fault anywhere in it ends it alone (see the module). Until
        its first request head is whole it holds a slot of the listener's `strangers`, and
        ends at once if a lighter peer's arrival sheds it; turned away either way, it is told
        429 or 503 in words first (`edgerules.TURNED_AWAY`), without waiting."""
        connections = getattr(self.config, "connections", None)
        if connections is not None:
            connections.add(self)
        try:
            strangers: Slots | None = getattr(self.config, "strangers", None)
            source = self._source()
            if strangers is None or source is None:
                await self._run_guarded()
                return
            with strangers.hold(source) as scope:
                self._stranger = (strangers, source, scope)
                with scope:
                    await self._run_guarded()
            if scope.cancelled_caught:
                log.debug("a connection from %s that sent no request was shed", source)
                if connections is not None:
                    connections.turned_away["shed"] += 1
        except SlotRefused:
            log.debug("a connection from %s was refused: it holds too many idle ones", source)
            if connections is not None:
                connections.turned_away["refused"] += 1
            assert strangers is not None and source is not None
            say_at_once(self.stream, TURNED_AWAY_BYTES[turned_away_status(strangers, source)])
            with trio.CancelScope(shield=True):
                await self.stream.aclose()
        finally:
            if connections is not None:
                connections.discard(self)

    def _source(self) -> str | None:
        """The peer's address, the key of its stranger slots; None when it is exempt."""
        return source_key(peer_host(self.stream), getattr(self.config, "exempt", ()))

    async def _run_guarded(self) -> None:
        try:
            await super().run()
        except BaseExceptionGroup as group:  # the stream is closed by hypercorn's `finally`
            cancelled, other = group.split(trio.Cancelled)
            if other is not None and not self._faulted:
                self._report(other)
            if cancelled is not None:
                await _own_cancellation_ends_here()
            if other is not None and other.split(Exception)[1] is not None:
                raise  # KeyboardInterrupt and its kind are not a connection's fault
        except trio.Cancelled:
            await _own_cancellation_ends_here()
        except Exception as exc:
            if not self._faulted:
                self._report(exc)

    async def _fault(self, exc: Exception) -> None:
        """Say what can still be said, close the socket, and end every task of the connection."""
        if not self._faulted:
            self._report(exc)
        last_words = BAD_REQUEST if self._bytes_sent == 0 else b""
        with trio.move_on_after(LAST_WORDS_S):
            if last_words:
                try:
                    async with self.send_lock:
                        await self.stream.send_all(last_words)
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                    pass  # the peer is gone already; closing is all that is left
        with trio.CancelScope(shield=True):
            await self.stream.aclose()
        nursery = self._task_group._nursery
        if nursery is not None:
            nursery.cancel_scope.cancel()


async def _own_cancellation_ends_here() -> None:
    """After a `Cancelled` came out of hypercorn's `run`: raise one again when a scope around
    the connection is cancelled (the server stopping, or a stranger shed), so that goes on its
    way; else it was the connection's own task group's, cancelled by `_send_all` or `_fault`
    from the app's task, and the connection ends here. hypercorn's `TaskGroup.__aexit__` drops
    the nursery's verdict that it caught that cancellation, so it came out of `run` as a bare
    `Cancelled`: raised on, it cancelled the listener's nursery, the listener and every
    connection with it (a client that pipelined requests and read no answer did so)."""
    await trio.lowlevel.checkpoint_if_cancelled()
