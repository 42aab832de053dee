"""The playground's connections: idle and unfinished ones are closed, a few hundred of them never keep
/healthz from answering, and a websocket whose peer stops answering pings is dropped with its rewrite
cancelled. A real uvicorn on 127.0.0.1, real sockets, a fake assistant."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest
import websockets
from playground import FakeAssistant, receive, serve
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from assistant.engine.events import Delta
from assistant.http.connections import REQUEST_SECONDS
from assistant.http.server import PING_SECONDS
from assistant.web.app import create_app

LONG = {"document": "x" * 100_000, "instruction": "Copy it."}  # 25,000 steps: runs until cancelled


@pytest.fixture
def fake():
    return FakeAssistant(chars=4, step_seconds=0.004)


@pytest.fixture
def server(fake):
    with serve(create_app(lambda: fake, "fake")) as address:
        yield address


def connect(server: str, **options) -> socket.socket:
    host, port = server.split(":")
    sock = socket.socket()
    for option, value in options.items():
        sock.setsockopt(socket.SOL_SOCKET, getattr(socket, option), value)
    sock.settimeout(120)  # a server that never closes fails the test instead of hanging it
    sock.connect((host, int(port)))
    return sock


def closed_by_server(sock: socket.socket, trickle: bytes = b"") -> bool:
    """Read (sending `trickle` a byte a second meanwhile) until the server closes the connection."""
    sock.settimeout(1)
    deadline, sent = time.monotonic() + 120, 0
    while time.monotonic() < deadline:
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            sock.sendall(trickle[sent:sent + 1])
            sent += 1
        except ConnectionResetError:
            return True
    return False


def test_healthz_answers_beside_300_idle_and_unfinished_connections(server):
    """A browser's preconnects or a scanner's probes: connections that send nothing or half a request."""
    idle = [connect(server) for _ in range(300)]
    for sock in idle[::2]:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {server}\r\n".encode())
    with httpx.Client(base_url=f"http://{server}", timeout=30) as http:
        answer = http.get("/healthz")
    assert (answer.status_code, answer.json()["model_loaded"]) == (200, True)
    for sock in idle:
        sock.close()


@pytest.mark.parametrize("sends", ["nothing", "half a request", "a request a byte a second", "half a body"])
def test_a_connection_that_owes_its_request_is_closed(server, sends):
    body = json.dumps(LONG).encode()
    head = f"POST /api/rewrite HTTP/1.1\r\nHost: {server}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with connect(server) as sock:
        if sends == "half a request":
            sock.sendall(head[:30].encode())
        elif sends == "half a body":
            sock.sendall(head.encode() + body[:len(body) // 2])
        assert closed_by_server(sock, trickle=head.encode() if sends == "a request a byte a second" else b"")


def test_a_kept_alive_connection_is_closed_after_its_answer(server):
    with connect(server) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {server}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert closed_by_server(sock)


def test_a_websocket_that_answers_its_pings_stays_open_through_a_long_rewrite(server, fake):
    """Past the HTTP request deadline and several pings, the socket still streams and takes a cancel."""
    async def main():
        async with websockets.connect(f"ws://{server}/ws/rewrite") as ws:
            await ws.send(json.dumps(LONG))
            until = time.monotonic() + 2 * max(REQUEST_SECONDS, 2 * PING_SECONDS)
            while time.monotonic() < until:
                assert (await receive(ws))["type"] in ("delta", "step")
            await ws.send(json.dumps({"type": "cancel"}))
            while (message := await receive(ws))["type"] != "done":
                pass
            assert message["stopped"] == "cancelled"
    asyncio.run(main())


class Flood:
    """Answers 8 KB a step until cancelled: more than the socket buffers between the server and a peer
    that reads nothing hold, so the server's writes back up as toward a dead machine."""

    strategy = "pld"

    def __init__(self):
        self.stopped: list[str] = []

    def rewrite(self, document: str, instruction: str, *, cancel: threading.Event, **options):
        try:
            while not cancel.is_set():
                time.sleep(0.005)
                yield Delta("x" * 8192, [], 1, 1, 0, 0.005)
        finally:
            self.stopped.append("cancelled" if cancel.is_set() else "abandoned")

    def close(self) -> None:
        pass


def test_a_websocket_that_stops_answering_pings_is_dropped_and_its_rewrite_cancelled():
    """The peer reads nothing after its first answer and answers no ping: the server cuts it within a
    few PING_SECONDS and cancels its rewrite."""
    flood = Flood()
    with serve(create_app(lambda: flood, "fake")) as server, connect(server, SO_RCVBUF=4096) as sock:
        client = ClientProtocol(parse_uri(f"ws://{server}/ws/rewrite"))
        client.send_request(client.connect())
        sock.sendall(b"".join(client.data_to_send()))
        while client.state is not State.OPEN:
            texts(client, sock.recv(65536))
        client.send_text(json.dumps(LONG).encode())
        sock.sendall(b"".join(client.data_to_send()))
        while "delta" not in texts(client, sock.recv(65536)):
            pass
        deadline = time.monotonic() + 6 * PING_SECONDS  # a liveness bound: dropped after two
        while flood.stopped != ["cancelled"]:
            assert time.monotonic() < deadline, "the rewrite of a peer that answers no ping kept running"
            time.sleep(0.1)
        assert closed_by_server(sock)


def texts(client: ClientProtocol, data: bytes) -> str:
    """The text of the frames that `data` completes (the handshake's answer is taken in passing)."""
    assert data, "the server closed the connection"
    client.receive_data(data)
    return "".join(event.data.decode() for event in client.events_received() if isinstance(event, Frame)
                   and event.opcode == Opcode.TEXT)
