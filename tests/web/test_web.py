"""The web playground's HTTP and websocket front door, against the real embedded model.

TestClient covers HTTP, validation and a streamed run; a real uvicorn server in a thread, driven by
the `websockets` client, covers cancel, disconnect, queueing and the Origin check.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from fastapi.testclient import TestClient
from playground import receive, serve, until, wait_loaded

from assistant.web.app import MAX_DOCUMENT_CHARS, create_app

DOC = "def add(a, b):\n    return a + b\n"
INSTRUCTION = "Rename the function add to plus."
RUN = {"document": DOC, "instruction": INSTRUCTION, "max_new_tokens": 8}


@pytest.fixture(scope="module")
def assistant():
    from assistant import Assistant

    return Assistant(model="smollm2-135m", strategy="pld+h")


@pytest.fixture(scope="module")
def client(assistant):
    with TestClient(create_app(lambda: assistant, "smollm2-135m")) as client:
        wait_loaded(client.get)
        yield client


@pytest.fixture(scope="module")
def server(assistant):
    """A real uvicorn server on a free port; yields its host:port."""
    with serve(create_app(lambda: assistant, "smollm2-135m")) as address:
        yield address


# ---------------------------------------------------------------- HTTP

def test_healthz_page_and_samples(client):
    health = client.get("/healthz").json()
    assert health["model_loaded"] is True and health["model"] == "smollm2-135m" and health["error"] is None
    page = client.get("/")
    assert page.status_code == 200 and "Run" in page.text and "diff_match_patch.js" in page.text
    assert client.get("/static/diff_match_patch.js").status_code == 200
    samples = client.get("/api/samples").json()
    assert len(samples) >= 2
    assert all({"id", "task", "instruction", "document"} <= set(s) for s in samples)
    assert "/api/rewrite" in client.get("/openapi.json").json()["paths"]


def test_http_rewrite(client):
    response = client.post("/api/rewrite", json=RUN)
    assert response.status_code == 200, response.text
    done = response.json()
    assert done["type"] == "done" and done["strategy"] == "pld+h"
    assert done["model"] == "smollm2-135m" and done["weights"] == "float32"  # the suite pins float32
    assert done["stats"]["new_tokens"] <= 8 and done["stopped"] in ("eos", "length", "stop")
    assert done["complete"] is (done["stopped"] != "length") and (done["reason"] is None) is done["complete"]
    for span in done["spans"]:
        a, b = span["output"]
        c, d = span["source"]
        assert done["text"][a:b] == DOC[c:d]


@pytest.mark.parametrize("body, words", [
    ({"instruction": "x"}, "document"),
    ({"document": DOC}, "instruction"),
    ({"document": 5, "instruction": "x"}, "document"),
    ({**RUN, "max_new_tokens": "8"}, "max_new_tokens"),
    ({**RUN, "max_new_tokens": 5000}, "max_new_tokens"),
    ({**RUN, "temperature": "hot"}, "temperature"),
    ({**RUN, "strategy": "fast"}, "unknown strategy"),
    ({**RUN, "document": "x" * (MAX_DOCUMENT_CHARS + 1)}, "document"),
])
def test_http_bad_input(client, body, words):
    response = client.post("/api/rewrite", json=body)
    assert response.status_code == 422
    assert words in json.dumps(response.json())


def test_http_engine_refusal_and_malformed_json(client):
    response = client.post("/api/rewrite", json={**RUN, "instruction": "   "})
    assert response.status_code == 400 and "instruction" in response.json()["detail"]
    response = client.post("/api/rewrite", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 422


# ---------------------------------------------------------------- websocket through TestClient

def collect(ws) -> list[dict]:
    messages = []
    while True:
        messages.append(ws.receive_json())
        if messages[-1]["type"] in ("done", "error"):
            return messages


def test_ws_streams_and_reports_bad_input(client):
    with client.websocket_connect("/ws/rewrite") as ws:
        for raw, words in [("{bad", "malformed JSON"), ("[1, 2]", "JSON object"),
                           (json.dumps({"instruction": "x"}), "document"),
                           (json.dumps({"document": 1, "instruction": "x"}), "document"),
                           (json.dumps({**RUN, "strategy": "zz"}), "unknown strategy"),
                           (json.dumps({**RUN, "max_new_tokens": 4097}), "max_new_tokens"),
                           (json.dumps({**RUN, "document": "x" * (MAX_DOCUMENT_CHARS + 1)}), "document"),
                           (json.dumps({**RUN, "instruction": ""}), "instruction"),
                           (json.dumps({"type": "dance"}), "unknown message type")]:
            ws.send_text(raw)
            message = ws.receive_json()
            assert message["type"] == "error" and words in message["message"], (raw[:60], message)
        ws.send_json({**RUN, "strategy": "ar"})  # the socket is still open after all those errors
        messages = collect(ws)
    kinds = [m["type"] for m in messages]
    assert kinds[-1] == "done" and "delta" in kinds and "step" in kinds
    done = messages[-1]
    assert done["strategy"] == "ar" and "".join(m["text"] for m in messages if m["type"] == "delta") == done["text"]
    assert done["model"] == "smollm2-135m" and done["weights"] == "float32"
    assert {"tokens_per_second", "mean_accepted", "new_tokens", "steps"} <= set(done["stats"])
    last_step = [m for m in messages if m["type"] == "step"][-1]  # the engine's running figures, as the page shows them
    assert last_step["totals"]["new_tokens"] == done["stats"]["new_tokens"]


# ---------------------------------------------------------------- a real server, the websockets client

def test_server_streams_to_done(server):
    async def main():
        async with websockets.connect(f"ws://{server}/ws/rewrite") as ws:
            await ws.send(json.dumps(RUN))
            messages = await until(ws, "done", "error")
        done = messages[-1]
        assert done["type"] == "done", done
        text = "".join(m["text"] for m in messages if m["type"] == "delta")
        assert text == done["text"]
        for m in messages:
            if m["type"] == "delta":
                for token in m["tokens"]:
                    if token["source"] is not None:
                        a, b = token["output"]
                        c, d = token["source"]
                        assert text[a:b] == DOC[c:d]
    asyncio.run(main())


def test_server_cancel_and_second_run_refused(server):
    async def main():
        async with websockets.connect(f"ws://{server}/ws/rewrite") as ws:
            await ws.send(json.dumps({**RUN, "instruction": "Write a long poem about this code.",
                                      "strategy": "ar", "max_new_tokens": 48}))
            await until(ws, "delta")
            await ws.send(json.dumps(RUN))  # one run at a time per socket
            await ws.send(json.dumps({"type": "cancel"}))
            messages = await until(ws, "done")
            errors = [m for m in messages if m["type"] == "error"]
            assert errors and "already running" in errors[0]["message"]
            assert messages[-1]["stopped"] == "cancelled"
            assert messages[-1]["stats"]["new_tokens"] < 48
            await ws.send(json.dumps(RUN))  # the socket takes further runs
            assert (await until(ws, "done", "error"))[-1]["type"] == "done"
    asyncio.run(main())


def test_server_disconnect_mid_stream_keeps_serving(server):
    async def main():
        ws = await websockets.connect(f"ws://{server}/ws/rewrite")
        await ws.send(json.dumps({**RUN, "strategy": "ar", "max_new_tokens": 48}))
        await until(ws, "delta")
        await ws.close()
        async with websockets.connect(f"ws://{server}/ws/rewrite") as ws:
            await ws.send(json.dumps(RUN))
            messages = await until(ws, "done", "error")
        assert messages[-1]["type"] == "done"
    asyncio.run(main())


def test_server_two_clients_queue(server):
    async def main():
        async with websockets.connect(f"ws://{server}/ws/rewrite") as first, \
                websockets.connect(f"ws://{server}/ws/rewrite") as second:
            await first.send(json.dumps({**RUN, "strategy": "ar", "max_new_tokens": 48}))
            await until(first, "delta")
            await second.send(json.dumps(RUN))
            queued = await receive(second)
            assert queued == {"type": "queued", "ahead": 1}
            await first.send(json.dumps({"type": "cancel"}))
            assert (await until(first, "done"))[-1]["stopped"] == "cancelled"
            assert (await until(second, "done", "error"))[-1]["type"] == "done"
    asyncio.run(main())


def test_server_checks_origin(server):
    async def main():
        with pytest.raises(websockets.exceptions.InvalidStatus):
            async with websockets.connect(f"ws://{server}/ws/rewrite", origin="http://evil.example"):
                pass
        async with websockets.connect(f"ws://{server}/ws/rewrite", origin=f"http://{server}") as ws:
            await ws.send("{bad")
            assert (await receive(ws))["type"] == "error"
        async with websockets.connect(f"ws://{server}/ws/rewrite", origin="http://localhost:5173") as ws:
            await ws.send("{bad")
            assert (await receive(ws))["type"] == "error"
    asyncio.run(main())
