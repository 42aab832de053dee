"""The playground reaches its model through a FastAPI dependency (`web.app.model`), so a test or an
embedding app can swap it with `app.dependency_overrides`; while it loads, requests are told so."""

from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient
from playground import FakeAssistant

from assistant.engine import aio
from assistant.web.app import create_app, model

RUN = {"document": "def add(a, b):\n    return a + b\n", "instruction": "Rename add to plus."}


def test_a_swapped_model_serves_http_and_the_websocket():
    gate = threading.Event()
    app = create_app(gate.wait, "never loads")  # the app's own model never arrives
    ready = aio.Loader()
    ready.set_result(FakeAssistant(step_seconds=0.0))
    app.dependency_overrides[model] = lambda: ready
    try:
        with TestClient(app) as client:
            assert client.get("/healthz").json()["model_loaded"] is True
            assert client.post("/api/rewrite", json=RUN).json()["text"] == RUN["document"]
            with client.websocket_connect("/ws/rewrite") as ws:
                ws.send_json(RUN)
                while (message := ws.receive_json())["type"] != "done":
                    assert message["type"] in ("queued", "delta", "step"), message
                assert message["complete"] is True
    finally:
        gate.set()


def test_while_the_model_loads_requests_are_told_to_wait():
    gate = threading.Event()
    try:
        with TestClient(create_app(gate.wait, "slow")) as client:
            assert client.get("/healthz").json() | {"strategies": [], "languages": []} == {
                "model_loaded": False, "model": "slow", "error": None, "strategies": [], "default_strategy": None,
                "languages": []}
            answer = client.post("/api/rewrite", json=RUN)
            assert answer.status_code == 503 and "still loading" in answer.json()["detail"]
            with client.websocket_connect("/ws/rewrite") as ws:
                ws.send_json(RUN)
                message = ws.receive_json()
                assert message["type"] == "error" and "still loading" in message["message"]
    finally:
        gate.set()


def test_a_model_that_failed_to_load_says_why():
    def broken():
        raise FileNotFoundError("no such model")

    with TestClient(create_app(broken, "broken")) as client:
        deadline = time.time() + 30
        while (health := client.get("/healthz").json())["error"] is None:
            assert time.time() < deadline, "the failure was never reported"
            time.sleep(0.01)
        assert health["error"] == "FileNotFoundError: no such model"
        answer = client.post("/api/rewrite", json=RUN)
        assert answer.status_code == 503 and answer.json()["detail"] == health["error"]
