"""The playground's doors against hostile or broken clients: DNS rebinding (Host), other sites (Origin),
oversized bodies, and frames that are not JSON text. A real uvicorn on 127.0.0.1, a fake assistant."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest
import websockets
from playground import FakeAssistant, serve

from assistant.http.guard import host_allowed
from assistant.web.app import MAX_BODY_BYTES, MAX_DOCUMENT_CHARS, create_app

RUN = {"document": "def add(a, b):\n    return a + b\n", "instruction": "Rename add to plus.", "max_new_tokens": 64}


@pytest.fixture(scope="module")
def fake():
    return FakeAssistant(step_seconds=0.0)


@pytest.fixture(scope="module")
def server(fake):
    with serve(create_app(lambda: fake, "fake")) as address:
        yield address


def raw_exchange(server: str, request: bytes) -> bytes:
    """Send raw bytes, return what the server answers up to the end of its headers (or its close)."""
    host, port = server.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
    return answer


def handshake(server: str, host: str, origin: str | None = None) -> bytes:
    origin_line = f"Origin: {origin}\r\n" if origin else ""
    return raw_exchange(server, (f"GET /ws/rewrite HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                                 f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                 f"Sec-WebSocket-Version: 13\r\n{origin_line}\r\n").encode())


def test_host_must_be_this_servers_address(server, fake):
    port = server.split(":")[1]
    with httpx.Client(base_url=f"http://{server}") as http:
        for host in (server, f"localhost:{port}", "localhost", f"[::1]:{port}", f"LOCALHOST:{port}"):
            assert http.get("/healthz", headers={"host": host}).status_code == 200, host
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.2:{port}", f"localhost.evil.example:{port}",
                     f"192.168.1.5:{port}"):
            answer = http.get("/healthz", headers={"host": host})
            assert answer.status_code == 403 and "not this server's address" in answer.json()["detail"], host
        before = len(fake.stopped)
        answer = http.post("/api/rewrite", json=RUN, headers={"host": f"evil.example:{port}"})
        assert answer.status_code == 403 and len(fake.stopped) == before  # refused before anything ran
    assert handshake(server, server).startswith(b"HTTP/1.1 101")
    assert handshake(server, f"localhost:{port}").startswith(b"HTTP/1.1 101")
    refused = handshake(server, f"evil.example:{port}")
    assert refused.startswith(b"HTTP/1.1 403")


@pytest.mark.parametrize("host, server, allowed", [
    ("localhost:8000", ("::ffff:127.0.0.1", 8000), True),  # bound to "::", reached over IPv4 loopback
    ("127.0.0.1:8000", ("::ffff:127.0.0.1", 8000), True),
    ("[::1]:8000", ("::1", 8000), True),
    ("192.168.1.5:8000", ("192.168.1.5", 8000), True),  # bound to 0.0.0.0, reached on the LAN address
    ("localhost:8000", ("192.168.1.5", 8000), False),  # localhost names only on a loopback connection
    ("evil.example", ("127.0.0.1", 8000), False),
    ("", ("127.0.0.1", 8000), False),
    (None, ("127.0.0.1", 8000), False),
    ("localhost", None, True),  # no socket address (a unix socket): local names only
    ("evil.example", None, False),
])
def test_host_rule(host, server, allowed):
    assert host_allowed(host, server) is allowed


def test_post_has_the_websockets_origin_policy(server, fake):
    port = server.split(":")[1]
    with httpx.Client(base_url=f"http://{server}") as http:
        before = len(fake.stopped)
        for origin in ("http://evil.example", f"http://evil.example:{port}", "null", "file://"):
            answer = http.post("/api/rewrite", json=RUN, headers={"origin": origin})
            assert answer.status_code == 403 and "origin" in answer.json()["detail"], origin
        assert len(fake.stopped) == before
        for origin in (None, f"http://{server}", "http://localhost:5173"):
            headers = {"origin": origin} if origin else {}
            answer = http.post("/api/rewrite", json=RUN, headers=headers)
            assert answer.status_code == 200 and answer.json()["complete"] is True, origin
    assert handshake(server, server, origin="http://evil.example").startswith(b"HTTP/1.1 403")
    assert handshake(server, server, origin=f"http://{server}").startswith(b"HTTP/1.1 101")


def test_body_is_bounded_before_it_is_read(server):
    # A Content-Length past the limit is refused at once, without waiting for (or reading) the body.
    answer = raw_exchange(server, (f"POST /api/rewrite HTTP/1.1\r\nHost: {server}\r\n"
                                   f"Content-Type: application/json\r\nContent-Length: {10 ** 12}\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 413")
    # A chunked body with no length is counted as it streams in.
    body = json.dumps({**RUN, "document": "x" * MAX_BODY_BYTES}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 65536]), body[i:i + 65536]) for i in range(0, len(body), 65536))
    answer = raw_exchange(server, (f"POST /api/rewrite HTTP/1.1\r\nHost: {server}\r\nContent-Type: application/json\r\n"
                                   f"Transfer-Encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413")


def test_422_does_not_echo_the_body(server):
    with httpx.Client(base_url=f"http://{server}") as http:
        answer = http.post("/api/rewrite", json={**RUN, "document": "x" * (MAX_DOCUMENT_CHARS + 1)})
        assert answer.status_code == 422 and "document" in answer.text and len(answer.content) < 2000
        answer = http.post("/api/rewrite", content=b'{"document": "' + b"y" * 100_000 + b'", nope}',
                           headers={"content-type": "application/json"})
        assert answer.status_code == 422 and "JSON" in answer.text and len(answer.content) < 2000


def test_deep_json_lone_surrogates_over_http(server):
    with httpx.Client(base_url=f"http://{server}") as http:
        answer = http.post("/api/rewrite", content=b"[" * 100_000, headers={"content-type": "application/json"})
        assert 400 <= answer.status_code < 500
        answer = http.post("/api/rewrite", content=json.dumps({**RUN, "document": "ab\ud800cd"}).encode(),
                           headers={"content-type": "application/json"})
        assert answer.status_code == 422 and "unicode" in answer.text
        assert http.get("/healthz").status_code == 200


def test_binary_frames_and_deep_json_get_an_error_and_the_socket_stays_usable(server):
    async def main():
        async with websockets.connect(f"ws://{server}/ws/rewrite") as ws:
            for frame, words in [(b'{"document": "x", "instruction": "y"}', "binary"),
                                 ("[" * 100_000, "nested too deeply"),
                                 ('{"a": ' * 50_000 + "1" + "}" * 50_000, "nested too deeply"),
                                 ('{"max_new_tokens": ' + "9" * 5000 + "}", "malformed JSON"),
                                 (json.dumps({**RUN, "instruction": "\udc00"}), "unicode")]:
                await ws.send(frame)
                message = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
                assert message["type"] == "error" and words in message["message"], (words, message)
            await ws.send(json.dumps(RUN))
            while (message := json.loads(await asyncio.wait_for(ws.recv(), timeout=30)))["type"] not in ("done", "error"):
                pass
            assert message["type"] == "done" and message["complete"] is True
    asyncio.run(main())


def test_websocket_message_is_bounded_like_a_body(server):
    async def main():
        async with websockets.connect(f"ws://{server}/ws/rewrite", max_size=None) as ws:
            await ws.send(json.dumps({**RUN, "document": "x" * (MAX_BODY_BYTES + 1)}))
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), timeout=30)
            assert closed.value.rcvd.code == 1009  # message too big
    asyncio.run(main())


def test_websocket_message_is_bounded_by_the_app_too(fake):
    """Under a server that does not bound websocket messages (TestClient here), the app refuses one
    over the limit before parsing it, and the socket stays usable."""
    from fastapi.testclient import TestClient

    with TestClient(create_app(lambda: fake, "fake")) as client:
        with client.websocket_connect("/ws/rewrite") as ws:
            ws.send_text(json.dumps({**RUN, "document": "x" * MAX_BODY_BYTES}))
            message = ws.receive_json()
            assert message["type"] == "error" and "the most a valid request takes" in message["message"]
            ws.send_text("{bad")
            assert ws.receive_json()["type"] == "error"
