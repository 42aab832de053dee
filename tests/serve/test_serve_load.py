"""Load on one `assistant serve`: 8 streaming clients at once against a server that holds at most 6
generations. Every request completes or is refused with a clear 503, /health answers while the model
generates, and the server's memory stays bounded. A real uvicorn on 127.0.0.1, the real SmolLM2-135M."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from serving import serve

from assistant.engine.assistant import Assistant
from assistant.serve.app import create_app

CLIENTS, HELD = 8, 6
MODEL = "smollm2-135m"


def rss_bytes() -> int:
    """This process's resident memory (the server runs in it)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) * 1024


@pytest.fixture(scope="module")
def app():
    return create_app(Assistant, MODEL, max_generations=HELD)


def ask(client: openai.OpenAI, number: int) -> tuple:
    """One streaming client: ("done", finish_reason, text) or ("refused", status, message)."""
    try:
        text, finish = "", None
        stream = client.chat.completions.create(model=MODEL, stream=True, max_tokens=24, messages=[
            {"role": "user", "content": f"Count from {number} to {number + 20}, one number a line."}])
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return "done", finish, text
    except openai.APIStatusError as error:
        return "refused", error.status_code, str(error)


def test_eight_streaming_clients_share_one_model(app):
    with serve(app) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600)
        assert ask(client, 0)[0] == "done"  # warm: every buffer the model needs exists before measuring
        before = rss_bytes()
        answers: dict[int, tuple] = {}
        health: list[tuple[float, int, int]] = []  # (seconds to answer, status, generations held then)
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                started = time.perf_counter()
                status = httpx.get(f"{base}/health", timeout=60).status_code
                health.append((time.perf_counter() - started, status, app.state.generations.running))
                time.sleep(0.05)

        poller = threading.Thread(target=poll, daemon=True)
        clients = [threading.Thread(target=lambda i=i: answers.__setitem__(i, ask(client, i)), daemon=True)
                   for i in range(CLIENTS)]
        poller.start()
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(timeout=900)
        stop.set()
        poller.join(timeout=60)
        after = rss_bytes()

    assert sorted(answers) == list(range(CLIENTS)), "a client never got an answer"
    for kind, detail, text in answers.values():
        assert (kind == "done" and detail in ("stop", "length") and text) or (
            kind == "refused" and detail == 503 and "busy" in text), (kind, detail, text)
    assert sum(kind == "done" for kind, _, _ in answers.values()) >= HELD
    during = [seconds for seconds, status, held in health if held and status == 200]
    assert during, "/health did not answer while the model was generating"
    print(f"\n/health while generating: {len(during)} answers, slowest {max(during):.3f} s; "
          f"RSS {before / 2**20:.0f} MiB before, {after / 2**20:.0f} MiB after")
    assert after <= 1.5 * before
