"""The doors on a remote engine (`--engine URL`, `RemoteAssistant`): `assistant rewrite` against a real
`assistant serve` subprocess gives what the local engine gives, and against a small fake OpenAI server
(other servers' protocol: no extension field) the answer is taken out of its code block and attributed
by alignment. A server that is down, errors mid-stream, closes early or stalls is a clear error, and
nothing is written."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from contextlib import closing

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from serving import eventually, free_port, serve

from assistant.engine.events import Delta, Result
from assistant.engine.contract import RemoteError
from assistant.engine.remote import RemoteAssistant
from assistant.web.app import create_app as create_playground
from assistant.web.app import server_config as playground_config

DOC = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n\n\ndef twice(x):\n    return 2 * x\n'
NEW = DOC.replace("add", "plus")
NOTE = ("Hi Sam,\n\nThanks for the quick reply. I have attached the reprot you asked for.\n\n"
        "The numbers for March are on page two; the sumary is on page one.\n\nBest,\nAlex\n")
INSTRUCTION = "Rename the function add to plus."


def command(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assistant.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "ASSISTANT_API_KEY": ""}, check=False)


# ---------------------------------------------------------------- against assistant serve

@pytest.mark.parametrize("name, text, instruction", [("note.txt", NOTE, "Fix the spelling mistakes."),
                                                       ("code.py", DOC, INSTRUCTION)])
def test_rewrite_through_assistant_serve_is_the_local_rewrite(served_engine, tmp_path, name, text, instruction):
    """Same text, attribution, pieces and problems as in-process: the server plans, attributes, checks and
    repairs as the engine does (the file's language travels in the extension field)."""
    path = tmp_path / name
    path.write_text(text)
    options = ("-i", instruction, "--json", "--max-piece-tokens", "24")  # pieces: the engine's plan
    local = command("rewrite", str(path), *options)
    remote = command("rewrite", str(path), *options, "--engine", served_engine)
    assert local.returncode == remote.returncode, remote.stderr
    here, there = json.loads(local.stdout), json.loads(remote.stdout)
    assert len(there["pieces"]) > 1
    for key in ("text", "spans", "pieces", "stopped", "model", "problems"):
        assert there[key] == here[key], key
    assert [r["kept"] for r in there["repairs"]] == [r["kept"] for r in here["repairs"]]
    assert there["stats"]["new_tokens"] == here["stats"]["new_tokens"]


def test_an_engine_that_is_down_is_a_clear_error(tmp_path):
    path = tmp_path / "code.py"
    path.write_text(DOC)
    done = command("rewrite", str(path), "-i", INSTRUCTION, "--in-place", "--engine",
                   f"http://127.0.0.1:{free_port()}", timeout=120)
    assert done.returncode == 1 and "cannot reach the engine" in done.stderr
    assert path.read_text() == DOC and sorted(p.name for p in tmp_path.iterdir()) == ["code.py"]


# ---------------------------------------------------------------- against another server

class Fake:
    """What the fake OpenAI server does with the next chat completion, and what it received."""

    def __init__(self):
        self.mode, self.bodies = "ok", []
        self.hung_up = threading.Event()  # a client closed a stream before its end


def fake_server(fake: Fake) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "fake-coder", "object": "model", "owned_by": "someone",
                                            "max_model_len": 2048}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        fake.bodies.append(await request.json())
        if fake.mode == "refuse":
            return JSONResponse({"error": {"message": "model overloaded"}}, status_code=500)
        return StreamingResponse(events(fake), media_type="text/event-stream")

    return app


def chunk(content: str | None = None, finish: str | None = None, **extra) -> str:
    delta = {} if content is None else {"content": content}
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "fake-coder",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return f"data: {json.dumps(body)}\n\n"


async def events(fake: Fake):
    """The answer in small chunks, as a chat model replies: a code block, then a remark after it."""
    reply = f"```python\n{NEW}```\nI renamed the function."
    pieces = [reply[i:i + 7] for i in range(0, len(reply), 7)]
    try:
        for number, piece in enumerate(pieces):
            if number == len(pieces) // 2:
                if fake.mode == "error":
                    yield f"data: {json.dumps({'error': {'message': 'the GPU fell over'}})}\n\n"
                    return
                if fake.mode == "close":
                    return  # no finish reason, no [DONE]
                if fake.mode == "stall":
                    await asyncio.sleep(600)
            yield chunk(piece)
        yield chunk(finish="stop")
        yield chunk(usage={"prompt_tokens": 80, "completion_tokens": len(pieces), "total_tokens": 80 + len(pieces)})
        yield "data: [DONE]\n\n"
    except asyncio.CancelledError:
        fake.hung_up.set()
        raise


@pytest.fixture(scope="module")
def fake():
    return Fake()


def plain_config(app, host: str, port: int, **options) -> uvicorn.Config:
    return uvicorn.Config(app, host=host, port=port, **options)


@pytest.fixture(scope="module")
def other(fake):
    with serve(fake_server(fake), health=None, config=plain_config) as base:
        yield base


def test_another_servers_answer_is_its_code_block_attributed_by_alignment(fake, other):
    fake.mode = "ok"
    remote = RemoteAssistant(other)
    assert (remote.model, remote.loaded.context_length, remote.loaded.native) == ("fake-coder", 2048, False)
    result = remote.rewrite_text(DOC, INSTRUCTION)
    assert result.text == NEW and result.stopped == "eos" and result.finished
    assert result.spans and all(NEW[slice(*span.output)] == DOC[slice(*span.source)] for span in result.spans)
    assert sum(b - a for a, b in (span.output for span in result.spans)) > 0.9 * len(NEW)  # nearly all copied
    body = fake.bodies[-1]
    assert body["prediction"] == {"type": "content", "content": DOC} and "assistant" not in body
    checked = remote.rewrite_text(DOC, INSTRUCTION, language="python")  # checked here, as the engine checks
    assert checked.text == NEW and checked.check.ran and not checked.problems
    assert DOC in body["messages"][-1]["content"] and INSTRUCTION in body["messages"][-1]["content"]


@pytest.mark.parametrize("mode, message", [("error", "failed mid-answer: the GPU fell over"),
                                           ("close", "closed the stream before the answer ended"),
                                           ("refuse", "answered 500: model overloaded")])
def test_a_broken_stream_fails_the_rewrite_and_writes_nothing(fake, other, tmp_path, mode, message):
    fake.mode = mode
    path = tmp_path / "code.py"
    path.write_text(DOC)
    done = command("rewrite", str(path), "-i", INSTRUCTION, "--in-place", "--engine", other, timeout=120)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert path.read_text() == DOC and sorted(p.name for p in tmp_path.iterdir()) == ["code.py"]
    with pytest.raises(RemoteError, match=message):
        RemoteAssistant(other).rewrite_text(DOC, INSTRUCTION)


def test_a_stalled_server_times_out(fake, other):
    fake.mode = "stall"
    with pytest.raises(RemoteError, match="sent nothing for 1 s"):
        RemoteAssistant(other, timeout=1).rewrite_text(DOC, INSTRUCTION)


def test_cancelling_hangs_up_on_the_server(fake, other):
    """A cancel ends the rewrite as cancelled at once, however long the server would go on, and the server
    sees the connection close (so a real one stops generating)."""
    fake.mode, fake.hung_up = "stall", threading.Event()
    cancel = threading.Event()
    with closing(RemoteAssistant(other).rewrite(DOC, INSTRUCTION, cancel=cancel)) as events:
        for event in events:
            if isinstance(event, Delta):
                cancel.set()
    assert isinstance(event, Result) and event.stopped == "cancelled" and not event.finished
    eventually(fake.hung_up.is_set, "the server did not see the client hang up")


def test_the_playground_on_a_remote_engine(fake, other):
    """The playground runs unchanged on a RemoteAssistant: the answer, and a failure as an error."""
    app = create_playground(lambda: RemoteAssistant(other), "fake-coder")
    with serve(app, health="/healthz", config=playground_config) as base:
        eventually(lambda: httpx.get(f"{base}/healthz").json()["model_loaded"], "the engine was not reached")
        fake.mode = "ok"
        answer = httpx.post(f"{base}/api/rewrite", json={"document": DOC, "instruction": INSTRUCTION}, timeout=60)
        assert answer.status_code == 200 and answer.json()["text"] == NEW and answer.json()["complete"]
        fake.mode = "error"
        failed = httpx.post(f"{base}/api/rewrite", json={"document": DOC, "instruction": INSTRUCTION}, timeout=60)
        assert failed.status_code == 500 and "the GPU fell over" in failed.json()["detail"]
