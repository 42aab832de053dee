"""uvicorn as both HTTP doors run it: connections bounded and reaped (`connections.py`), websocket messages
bounded like a body, and a stop on SIGINT (Ctrl-C) or SIGTERM that ends every open answer and exits cleanly.

uvicorn's own graceful stop waits for every response to finish: a client streaming a long answer holds the
server open for as long as the answer lasts. `Server` cancels the app's generations first, so each ends at
its next decoding step (a streamed answer with an error event, a websocket with a close, code 1012), and
gives what is left STOP_SECONDS before cancelling it. uvicorn then raises the signal again, to die of it (a
KeyboardInterrupt traceback, or no exit status); `run` handles it by doing nothing, so the command returns
and exits 0.
"""

from __future__ import annotations

import signal
import socket

import uvicorn
from fastapi import FastAPI

from assistant.http.connections import PingedWebSocketProtocol, ReapedH11Protocol
from assistant.http.generations import Generations

MAX_CONNECTIONS = 256  # open connections; past it the longest idle is closed, or uvicorn answers 503
PING_SECONDS = 5.0  # a websocket is pinged this often, and dropped when its pong is this late
STOP_SECONDS = 5.0  # after a signal, how long the answers left get to end before they are cut


def server_config(app: FastAPI, host: str, port: int, max_body_bytes: int, **options) -> uvicorn.Config:
    """uvicorn's settings: the number of connections and the size of a websocket message are bounded, so no
    client can make the server hold unbounded memory; idle and unfinished connections are closed, and a
    websocket whose peer stopped answering is dropped within two PING_SECONDS, cancelling its generation."""
    return uvicorn.Config(app, host=host, port=port, http=ReapedH11Protocol, ws=PingedWebSocketProtocol,
                          ws_max_size=max_body_bytes, ws_ping_interval=PING_SECONDS, ws_ping_timeout=PING_SECONDS,
                          limit_concurrency=MAX_CONNECTIONS, timeout_graceful_shutdown=STOP_SECONDS, **options)


class Server(uvicorn.Server):
    """uvicorn's server that, when it stops, first cancels the app's generations and refuses new ones."""

    def __init__(self, config: uvicorn.Config, generations: Generations):
        super().__init__(config)
        self.generations = generations

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.generations.stop()
        await super().shutdown(sockets)


def run(config: uvicorn.Config, generations: Generations) -> None:
    """Serve until SIGINT or SIGTERM, then stop as the module says and return."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)  # what uvicorn raises again once it has stopped
    Server(config, generations).run()
