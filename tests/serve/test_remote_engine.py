"""The doors on a remote engine (`--engine URL`, `RemoteAssistant`): `assistant rewrite` against a real
`assistant serve` subprocess gives what the local engine gives, and against a small fake OpenAI server
(other servers' protocol: no extension field) the answer is taken out of its code block and attributed
by alignment. A server that is down, errors mid-stream, closes early or stalls is a clear error, and
nothing is written; Ctrl-C hangs up on it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from contextlib import closing
from dataclasses import astuple

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from hypothesis import given, settings
from hypothesis import strategies as st
from serving import eventually, free_port, serve

from assistant.engine.contract import RemoteError
from assistant.engine.events import Delta, Result
from assistant.engine.remote import RemoteAssistant
from assistant.web.app import create_app as create_playground
from assistant.web.app import server_config as playground_config

DOC = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n\n\ndef twice(x):\n    return 2 * x\n'
NEW = DOC.replace("add", "plus")
NOTE = ("Hi Sam,\n\nThanks for the quick reply. I have attached the reprot you asked for.\n\n"
        "The numbers for March are on page two; the sumary is on page one.\n\nBest,\nAlex\n")
INSTRUCTION = "Rename the function add to plus."
INTERRUPTED = "assistant rewrite: interrupted; the file being rewritten was left as it was\n"


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


def test_ctrl_c_while_a_remote_answer_streams_hangs_up_and_writes_nothing(fake, other, tmp_path):
    """Ctrl-C in `assistant rewrite --engine` while the server streams (and then stalls): the command ends as
    interrupted (130) without waiting for the server, the server sees the connection close, and the file is
    as it was."""
    fake.mode, fake.hung_up = "stall", threading.Event()
    path = tmp_path / "code.py"
    path.write_text(DOC)
    asked = len(fake.bodies)
    process = subprocess.Popen([sys.executable, "-m", "assistant.cli", "rewrite", str(path), "-i", INSTRUCTION,
                                "--in-place", "--engine", other], stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "ASSISTANT_API_KEY": ""},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        eventually(lambda: len(fake.bodies) > asked, "the rewrite did not reach the server", 120)
        process.send_signal(signal.SIGINT)
        errors = process.communicate(timeout=60)[1]
    finally:
        process.kill()
    assert process.returncode == 130 and errors.endswith(INTERRUPTED) and "Traceback" not in errors, errors
    eventually(fake.hung_up.is_set, "the server did not see the client hang up")
    assert path.read_text() == DOC and sorted(p.name for p in tmp_path.iterdir()) == ["code.py"]


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


# ---------------------------------------------------------------- a server is untrusted input

class Script:
    """What the scripted server answers: /v1/models' body, and the SSE lines of each chat completion in turn
    (the last one again once the others are used up)."""

    def __init__(self, models: bytes | dict, *streams: list[str]):
        self.models, self.streams = models, list(streams)

    def next_stream(self) -> list[str]:
        return self.streams.pop(0) if len(self.streams) > 1 else self.streams[0]


def scripted_server(holder: dict) -> FastAPI:
    """A server that answers exactly what `holder["script"]` says, shapes the protocol has or not."""
    app = FastAPI()

    @app.get("/v1/models")
    def models():
        body = holder["script"].models
        return Response(body if isinstance(body, bytes) else json.dumps(body), media_type="application/json")

    @app.post("/v1/chat/completions")
    def chat():
        return StreamingResponse(iter(holder["script"].next_stream()), media_type="text/event-stream")

    return app


@pytest.fixture(scope="module")
def scripted():
    """A scripted server's URL, and the holder of its script: `play(script)` sets it and gives the URL."""
    holder = {}
    with serve(scripted_server(holder), health=None, config=plain_config) as base:
        def play(script: Script) -> str:
            holder["script"] = script
            return base
        yield play


def model_list(owned_by: str = "someone", **fields) -> dict:
    return {"object": "list", "data": [{"id": "fake-coder", "owned_by": owned_by, "max_model_len": 2048} | fields]}


def sse(body) -> str:
    return f"data: {json.dumps(body)}\n\n"


def piece(content: str | None = None, finish: str | None = None, **extra) -> dict:
    """A chat completion chunk, as a dict."""
    return {"id": "x", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {} if content is None else {"content": content}, "finish_reason": finish}]} | extra


DONE = "data: [DONE]\n\n"
PLAIN = [piece(f"```python\n{NEW}```\n"), piece(finish="stop"), {"choices": [], "usage": {"prompt_tokens": 80,
                                                                                       "completion_tokens": 30}}]
STATS = {"new_tokens": 30, "steps": 9, "seconds": 0.5, "prompt_tokens": 80, "drafted": 25, "accepted": 21,
         "first_token_seconds": 0.1}
NATIVE = [piece("", assistant={"queued": 0}),
          piece(NEW, assistant={"spans": [{"output": [0, 4], "source": {"document": True, "start": 0, "end": 4}}],
                                "step": {"new_tokens": 30, "drafted": 25, "accepted": 21, "seconds": 0.5},
                                "totals": STATS}),
          piece(finish="stop", assistant={"stopped": "eos", "stats": STATS, "model": "fake-coder", "weights": "q8",
                                          "pieces": [[0, len(DOC)]], "repairs": [], "change": "edit",
                                          "check": {"problems": [], "ran": ["ruff"], "notes": [], "checked": True}})]


def stream(chunks: list, done: bool = True) -> list[str]:
    return [sse(chunk) for chunk in chunks] + [DONE] * done


def outcome(url: str):
    """The Result of a rewrite through the server at `url`, or the RemoteError it raised, which must be one
    line naming the engine; no other exception may come out, and every event's figures are numbers."""
    try:
        events = list(RemoteAssistant(url).rewrite(DOC, INSTRUCTION))
    except RemoteError as error:
        assert url in str(error) and "\n" not in str(error), str(error)
        return error
    for event in events:
        figures = [*astuple(event.totals), event.new_tokens, event.drafted, event.accepted, event.seconds] \
            if isinstance(event, Delta) else [*astuple(event.stats)] if isinstance(event, Result) else []
        assert all(isinstance(n, int | float) and not isinstance(n, bool) for n in figures), event
    assert isinstance(events[-1], Result)
    return events[-1]


def test_well_formed_scripted_answers_are_read(scripted):
    """The scripted answers the fuzzing below starts from are good ones, from another server and from
    assistant serve (the extension field)."""
    plain = outcome(scripted(Script(model_list(), stream(PLAIN))))
    assert isinstance(plain, Result) and plain.text == NEW and plain.finished and plain.stats.new_tokens == 30
    native = outcome(scripted(Script(model_list("assistant"), stream(NATIVE))))
    assert isinstance(native, Result) and (native.text, native.stopped, native.change) == (NEW, "eos", "edit")
    assert [span.source for span in native.spans] == [(0, 4)] and native.check.ran == ("ruff",)


@pytest.mark.parametrize("models, message", [
    ({"data": ["fake-coder"]}, "/v1/models in a shape the protocol does not have: data[0] is 'fake-coder'"),
    (model_list(max_model_len="many"), "data[0].max_model_len is 'many', not a whole number >= 0"),
    (model_list(max_model_len=-5), "data[0].max_model_len is -5, not a whole number >= 0"),
    ({"data": "fake-coder"}, "data is 'fake-coder', not a list"),
    ([1, 2], "it is [1, 2], not an object"),
    (b"<html>busy</html>", "answered /v1/models with something that is not JSON"),
    (model_list(id=7), "data[0].id is 7, not a string"),
], ids=["data-of-strings", "length-as-a-word", "negative-length", "data-a-string", "a-list", "html", "id-a-number"])
def test_a_malformed_model_list_is_one_line_naming_the_engine(scripted, models, message):
    url = scripted(Script(models, stream(PLAIN)))
    with pytest.raises(RemoteError, match=re.escape(message)) as raised:
        RemoteAssistant(url)
    assert str(raised.value).startswith(f"the engine at {url} ") and "\n" not in str(raised.value)


NATIVE_LAST = NATIVE[-1]["assistant"]


@pytest.mark.parametrize("models, lines, message", [
    (model_list(), ["data: 42\n\n"], "(an answer chunk: it is 42, not an object)"),
    (model_list(), ["data: [1, 2]\n\n"], "it is [1, 2], not an object"),
    (model_list(), ["data: {\"choices\": \"abc\"}\n\n"], "choices is 'abc', not a list"),
    (model_list(), stream([{"choices": [{"delta": "abc"}]}]), "choices[0].delta is 'abc', not an object"),
    (model_list(), stream([{"choices": [{"delta": {"content": 5}}]}]), "choices[0].delta.content is 5, not a string"),
    (model_list(), stream([{"choices": [], "usage": {"completion_tokens": 1.5}}]), "usage.completion_tokens is 1.5"),
    (model_list(), ["data: {\"choices\": [\n\n"], "sent an answer chunk that is not JSON"),
    (model_list(), ["data: " + "[" * 100_000 + "\n\n"], "sent an answer chunk that is not JSON"),
    (model_list(), ["data: \"error\"\n\n"], "it is 'error', not an object"),
    (model_list("assistant"), stream([piece(NEW, assistant={"spans": "all of it"})]),
     "assistant.spans is 'all of it', not a list"),
    (model_list("assistant"), stream([piece(NEW, assistant={"spans": [{"output": [1]}]})]),
     "assistant.spans[0].output is [1], not a list of 2"),
    (model_list("assistant"), stream([piece(NEW, assistant={"spans": [{"output": [0, 4], "source": {"start": 0,
                                                                                                 "end": 9999}}]})]),
     f"assistant.spans (source) has the range [0, 9999], which is not a range inside [0, {len(DOC)}]"),
    (model_list("assistant"), stream([piece(NEW, assistant={"spans": [{"output": [60, 999]}]})]),
     f"assistant.spans has the range [60, 999], which is not a range inside [0, {len(NEW)}]"),
    (model_list("assistant"), stream([NATIVE[1], piece(finish="stop", assistant=NATIVE_LAST | {"stats": [1]})]),
     "assistant.stats is [1], not an object"),
    (model_list("assistant"), stream([NATIVE[1], piece(finish="stop", assistant=NATIVE_LAST | {"check": {
        "problems": "none", "ran": [], "notes": []}})]), "assistant.check.problems is 'none', not a list"),
    (model_list("assistant"), stream([NATIVE[1], piece(finish="stop", assistant=NATIVE_LAST | {"check": {
        "problems": [{"message": "x", "start": 5, "end": 2, "code": "F821", "checker": "ruff"}], "ran": [],
        "notes": []}})]), "a problem has the range [5, 2]"),
    (model_list("assistant"), stream([NATIVE[1], piece(finish="stop", assistant=NATIVE_LAST | {"stopped": "maybe"})]),
     "assistant.stopped is 'maybe', not one of cancelled, eos, length, stop"),
    (model_list("assistant"), stream([NATIVE[1], piece(finish="stop", assistant=NATIVE_LAST | {"repairs": [{}]})]),
     "assistant.repairs[0].attempt is missing"),
    (model_list("assistant"), stream([piece("", assistant={"queued": True})]), "assistant.queued is True"),
], ids=["42", "list", "choices-a-string", "delta-a-string", "content-a-number", "usage-a-fraction", "not-json",
        "nested-too-deep", "a-string", "spans-a-string", "span-output-short", "span-source-outside",
        "span-output-outside", "stats-a-list", "check-problems-a-string", "problem-backwards", "stopped-unknown",
        "repair-empty", "queued-a-boolean"])
def test_a_malformed_answer_is_one_line_naming_the_engine_and_what_was_wrong(scripted, models, lines, message):
    error = outcome(scripted(Script(models, lines)))
    assert isinstance(error, RemoteError) and message in str(error), error


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
KINDS = [None, "x", -1, 1.5, float("nan"), True, [], {}, [1, 2], {"start": 0}]  # a value of each kind JSON has


def paths(value, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON value: the keys and indexes that lead to it."""
    inner = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    return [prefix] + [path for key, item in inner for path in paths(item, prefix + (key,))]


def replaced(value, path: tuple, new):
    """`value` with what stands at `path` replaced by `new` (a copy)."""
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return copy


@st.composite
def damaged(draw, chunks: list) -> list:
    """A stream of `chunks` with one place in one chunk replaced by any JSON value."""
    number = draw(st.integers(0, len(chunks) - 1))
    path = draw(st.sampled_from(paths(chunks[number])))
    return chunks[:number] + [replaced(chunks[number], path, draw(JSON))] + chunks[number + 1:]


def well_attributed(result: Result) -> bool:
    return all(0 <= a <= b <= len(result.text) and (s is None or 0 <= s[0] <= s[1] <= len(DOC))
               for (a, b), s in ((span.output, span.source) for span in [*result.spans, *result.token_spans]))


@pytest.mark.parametrize("owner, chunks", [("someone", PLAIN), ("assistant", NATIVE)], ids=["plain", "native"])
def test_every_part_of_an_answer_of_every_wrong_kind_is_a_result_or_a_remote_error(scripted, owner, chunks):
    """Each place in each chunk, given a value of each kind in turn (null, a string, a negative or fractional
    number, NaN, a boolean, lists, objects): a Result whose figures are numbers and whose attribution lies
    inside its text and the document, or a one-line RemoteError naming the engine."""
    for number, chunk in enumerate(chunks):
        for path in paths(chunk):
            for value in KINDS:
                damaged_stream = chunks[:number] + [replaced(chunk, path, value)] + chunks[number + 1:]
                answer = outcome(scripted(Script(model_list(owner), stream(damaged_stream))))
                assert isinstance(answer, RemoteError) or well_attributed(answer), (number, path, value)


@pytest.mark.parametrize("owner, chunks", [("someone", PLAIN), ("assistant", NATIVE)], ids=["plain", "native"])
@settings(max_examples=60, derandomize=True, deadline=None)
@given(data=st.data())
def test_any_damaged_answer_is_a_result_or_a_remote_error(scripted, owner, chunks, data):
    """Whatever one part of the answer is replaced by, the rewrite gives a Result whose attribution lies inside
    its text and the document, or a one-line RemoteError naming the engine, never another exception."""
    answer = outcome(scripted(Script(model_list(owner), stream(data.draw(damaged(chunks))))))
    assert isinstance(answer, RemoteError) or well_attributed(answer)


@settings(max_examples=40, derandomize=True, deadline=None)
@given(models=st.data())
def test_any_damaged_model_list_is_read_or_a_remote_error(scripted, models):
    listing = models.draw(damaged([model_list()]))[0]
    url = scripted(Script(listing, stream(PLAIN)))
    try:
        remote = RemoteAssistant(url)
    except RemoteError as error:
        assert url in str(error) and "\n" not in str(error)
    else:
        assert isinstance(remote.model, str) and remote.context_length >= 1


def test_a_stream_is_finished_only_by_its_finish_reason_and_then_done(scripted):
    """The docstring's invariant: a stream that closes after its finish reason but before `data: [DONE]` is
    broken off (the usage, or assistant serve's account, may be what was lost), and `data: [DONE]` without a
    finish reason is no finished answer either."""
    for owner, chunks in (("someone", PLAIN), ("assistant", NATIVE)):
        cut = outcome(scripted(Script(model_list(owner), stream(chunks, done=False))))
        assert isinstance(cut, RemoteError) and "closed the stream before the answer ended (no data: [DONE])" \
            in str(cut)
        early = outcome(scripted(Script(model_list(owner), stream(chunks[:-1 if owner == "assistant" else 1]))))
        assert isinstance(early, RemoteError) and "before the answer ended (no finish reason)" in str(early)


def test_one_remote_failure_does_not_stop_the_other_files(scripted, tmp_path):
    """Three files: the engine breaks off the first's answer, sends the second's in a malformed chunk and
    answers the third; the first two are left as they were, each failure named in one line, the third is
    written, and the command exits 1."""
    paths = [tmp_path / name for name in ("first.py", "second.py", "third.py")]
    for path in paths:
        path.write_text(DOC)
    url = scripted(Script(model_list(), stream(PLAIN[:1], done=False), ["data: [1, 2]\n\n"], stream(PLAIN)))
    done = command("rewrite", *map(str, paths), "-i", INSTRUCTION, "--in-place", "--engine", url, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    failures = [line for line in done.stderr.splitlines() if line.startswith("assistant rewrite: ")]
    cut = (f"assistant rewrite: {paths[0]}: the engine at {url} closed the stream before the answer ended (no "
           f"data: [DONE]); nothing of it is kept")
    malformed = (f"assistant rewrite: {paths[1]}: the engine at {url} answered in a shape the protocol does not have "
                 f"(an answer chunk: it is [1, 2], not an object); nothing of the answer is kept")
    assert failures == [cut, malformed]
    assert [path.read_text() for path in paths] == [DOC, DOC, NEW]


def test_a_malformed_answer_writes_nothing(scripted, tmp_path):
    path = tmp_path / "code.py"
    path.write_text(DOC)
    url = scripted(Script(model_list("assistant"), stream([piece(NEW, assistant={"spans": "all"})])))
    done = command("rewrite", str(path), "-i", INSTRUCTION, "--in-place", "--engine", url, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    said = (f"assistant rewrite: {path}: the engine at {url} answered in a shape the protocol does not have (an "
            f"answer chunk: assistant.spans is 'all', not a list); nothing of the answer is kept")
    assert done.stderr.splitlines() == [said]
    assert path.read_text() == DOC and sorted(p.name for p in tmp_path.iterdir()) == ["code.py"]


def test_an_answer_that_changes_nothing_is_said_to_and_not_written(scripted, tmp_path):
    """The door's 'no change made', end to end: an engine that gives the text back; --in-place writes nothing
    (no backup) and exits 0, --json carries `change`."""
    path = tmp_path / "code.py"
    path.write_text(DOC)
    url = scripted(Script(model_list(), stream([piece(f"```python\n{DOC}```\n"), piece(finish="stop")])))
    done = command("rewrite", str(path), "-i", INSTRUCTION, "--in-place", "--quiet", "--engine", url, timeout=120)
    said = f"{path}: no change made: the answer is the text as it was; nothing written\n"
    assert (done.returncode, done.stderr) == (0, said)
    assert path.read_text() == DOC and sorted(p.name for p in tmp_path.iterdir()) == ["code.py"]
    shown = command("rewrite", str(path), "-i", INSTRUCTION, "--json", "--quiet", "--engine", url, timeout=120)
    assert shown.returncode == 0 and json.loads(shown.stdout)["change"] == "none"
