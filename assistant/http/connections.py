"""uvicorn's HTTP/1.1 and websocket connections for the HTTP doors, with idle, unfinished and dead ones closed.

uvicorn closes a keep-alive connection only after an answer (`timeout_keep_alive`, which any byte
resets), and counts every open connection against `limit_concurrency`: a connection that opens and
sends nothing, or a byte of a request now and then, stays open for good, and a few hundred of them
(a browser's preconnects, a scanner) turn every new request into a 503. So, as nginx does:

- a connection owes a whole request (its head and its body) within REQUEST_SECONDS of opening or of
  its previous answer, however it trickles in; past that it is closed;
- when the open connections reach the limit, the one waiting longest for a request is closed to make
  room for the new one (a browser sends a request again on a fresh connection when a kept-alive one
  was closed under it);
- a websocket that misses a pong is cut at once (`PingedWebSocketProtocol`): uvicorn sends it a close
  frame and waits for that to be written, which a peer that reads nothing never lets happen, so its
  app would never hear of the disconnect.

Invariant: a connection is closed here only while the server waits on its client (for a request or
the rest of one) or for a pong; a request the app is answering is never cut.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

REQUEST_SECONDS = 10.0  # a connection owes a whole request within this of opening or of its previous answer
OWED = (h11.IDLE, h11.SEND_BODY)  # the client's states in which the server waits on it


class ReapedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol (pass it as `http=`) with a deadline for each request and room made at the limit."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.waiting_since: float | None = None  # when it began to owe a request; None while it owes none
        self.deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.make_room()
        self.wait_for_request()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state not in OWED:  # a whole request came
            self.stop_waiting()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self.stop_waiting()  # the websocket protocol takes the connection over, with its pings
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state in OWED and not self.transport.is_closing():
            self.wait_for_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_waiting()
        super().connection_lost(exc)

    def wait_for_request(self) -> None:
        self.stop_waiting()
        self.waiting_since = self.loop.time()
        self.deadline = self.loop.call_later(REQUEST_SECONDS, self.reap)

    def stop_waiting(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = self.waiting_since = None

    def idle(self) -> bool:
        """Waiting for a request with none running: closing it loses nothing."""
        return self.waiting_since is not None and (self.cycle is None or self.cycle.response_complete)

    def reap(self) -> None:
        self.stop_waiting()
        self.connections.discard(self)  # counted out now, before the new connection's request is checked
        self.transport.close()

    def make_room(self) -> None:
        """Close the connections idle longest while the open ones are at `limit_concurrency`."""
        if self.limit_concurrency is None or len(self.connections) < self.limit_concurrency:
            return
        idle = sorted((other for other in self.connections
                       if isinstance(other, ReapedH11Protocol) and other is not self and other.idle()),
                      key=lambda other: other.waiting_since)
        for other in idle[:len(self.connections) - self.limit_concurrency + 1]:
            other.reap()


class PingedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websocket protocol (pass it as `ws=`) that cuts a peer missing a pong, its app told at once."""

    def keepalive_timeout(self) -> None:
        super().keepalive_timeout()  # the close frame, queued behind whatever the peer has not read
        self.transport.abort()
