"""Fault isolation per connection, and the one package that knows hypercorn's insides.

hypercorn 0.18 lets any error but `OSError` escape a connection's task and cancel the server's
nursery, every connection of the process with it (`docs/upstream-hypercorn.md`). `serve` is
`hypercorn.trio.serve` with our own accept loop, which builds a `GuardedTCPServer` per
connection; hypercorn's modules are never assigned to. The guard keeps hypercorn's behaviour
for every well-formed connection, and an error out of one connection ends that connection
alone: its last words (a `400` when nothing was sent yet), the socket closed, its tasks
cancelled, one warning line and `EdgeConfig.on_connection_fault(kind)`. Its listeners speak
HTTP only: the door's WebSocket has a listener of its own (`ftwbridge.door.listener`, on
wsproto and h11 alone), and the main listener refuses `/v1/box` and every WebSocket handshake
in words (`ftwbridge.app.NoDoorHere`), so no connection here is ever upgraded to one. A
`text/event-stream` response (a listen stream, docs/live.md) lifts the read timeout while it
is under way, its writes bounded by `EdgeConfig.stream_write_s` instead (docs/operations.md,
"One connection's fault ends only that connection", has the rest of the rules).

Its rooms: `accept.py` (`serve`, the accept loop), `guard.py` (`GuardedTCPServer`: the read
side and the fault guard), `writes.py` (`WritingServer`, its base: the write path, the state
both sides keep, and the fault's report).

What of hypercorn (the 0.18 line, bounded so in pyproject.toml) this package uses beyond its
public `serve` and `Config`, and why; `tests/edge/test_hypercorn.py` pins each name:

- `hypercorn.trio.tcp_server.TCPServer`, subclassed: its `run`, `protocol_send`, `_read_data`
  (replaced by `_read_loop`, a copy, to lift the read timeout for a stream), `_close` (made to
  close even from a cancelled task), `_initiate_server_close` (the keep-alive timer's action),
  and its attributes `config`, `context`, `stream`, `protocol`, `send_lock`, `idle_task`
  (replaced by `ftwbridge.idle.IdleTimer`) and `_task_group._nursery` (cancelled to end every
  task of a faulted connection);
- `hypercorn.trio.tcp_server.MAX_RECV`: the read size of the copied loop;
- `hypercorn.protocol.h2.H2Protocol` and a connection's `protocol.protocol` (which protocol it
  speaks) and `protocol.protocol.connection` (h11's connection, whose public `their_state`
  tells a peer's bad bytes from an app's failure);
- `hypercorn.events` `Closed`, `Event`, `RawData`, `Updated`: what `protocol_send` is given;
- for the accept loop, a copy of `hypercorn.trio.run.worker_serve`: `trio.lifespan.Lifespan`,
  `trio.worker_context.WorkerContext`, `trio.statsd.StatsdLogger`, `typing.ConnectionState`,
  and `utils` `wrap_app`, `raise_shutdown`, `repr_socket_addr`, `ShutdownError`.

Elsewhere ftwbridge uses none of these: `edgerules.EdgeConfig` subclasses the public `Config`.
"""

from __future__ import annotations

from ftwbridge.edgerules import BAD_REQUEST as BAD_REQUEST  # a connection's last words
from ftwbridge.edgerules import SERVER_ERROR as SERVER_ERROR
from ftwbridge.edgerules import Connections as Connections  # ftwbridge.metrics counts them
from ftwbridge.edgerules import EdgeConfig as EdgeConfig  # what `serve` is given
from ftwbridge.edgerules import State as State

from .accept import serve as serve
from .guard import GuardedTCPServer as GuardedTCPServer
