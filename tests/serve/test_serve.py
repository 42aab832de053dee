"""`assistant serve` through the official `openai` client: chat and plain completions, streamed and not,
with and without a prediction (the same text, the accepted prediction tokens counted), attribution in
the extension field, a client that goes away mid-stream, the API key and the Host guard. A real uvicorn
on 127.0.0.1 and the real SmolLM2-135M."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import httpx
import openai
import pytest
from serving import eventually, free_port, serve

from assistant.engine.assistant import Assistant
from assistant.engine.events import Result
from assistant.serve.app import NoKeyForOpenAddress, check_bind, create_app

DOC = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n\n\nprint(add(2, 3))\n'
INSTRUCTION = "Rename the function add to plus."
REWRITE = {"assistant": {"document": DOC, "instruction": INSTRUCTION}}
QUOTED = [{"role": "user", "content": f"```python\n{DOC}```\n\n{INSTRUCTION}"}]  # as a chat client sends it
PREDICTION = {"type": "content", "content": DOC}
MODEL = "smollm2-135m"


class Recording(Assistant):
    """The real assistant, noting how each chat answer stopped."""

    def __init__(self):
        super().__init__()
        self.stopped: list[str] = []

    def chat(self, *args, **options):
        for event in super().chat(*args, **options):
            if isinstance(event, Result):
                self.stopped.append(event.stopped)
            yield event


@pytest.fixture(scope="module")
def app():
    return create_app(Recording, MODEL)


@pytest.fixture(scope="module")
def server(app):
    with serve(app) as base:
        yield base


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=600)


def extension(answer) -> dict:
    return answer.model_extra["assistant"]


def check_spans(text: str, spans: list[dict], sources: dict) -> int:
    """Every attributed span's output text is the text it names; returns how many are attributed."""
    attributed = 0
    for span in spans:
        if span["source"] is not None:
            (a, b), source = span["output"], span["source"]
            where = next(key for key in sources if key in source)
            named = sources[where] if where != "message" else sources["message"][source["message"]]
            assert text[a:b] == named[source["start"]:source["end"]], span
            attributed += 1
    return attributed


def streamed(stream) -> tuple[str, list[dict], list]:
    """The text, the spans and the chunks of a streamed chat answer."""
    text, spans, chunks = "", [], list(stream)
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        spans += (chunk.model_extra.get("assistant") or {}).get("spans", [])
    return text, spans, chunks


def test_a_rewrite_with_a_prediction_gives_the_same_text_and_counts_the_accepted_tokens(client):
    plain = client.chat.completions.create(model=MODEL, messages=QUOTED, extra_body=REWRITE)
    predicted = client.chat.completions.create(model=MODEL, messages=QUOTED, prediction=PREDICTION, extra_body=REWRITE)
    ar = client.chat.completions.create(model=MODEL, messages=QUOTED,
                                        extra_body={"assistant": {**REWRITE["assistant"], "strategy": "ar"}})
    text = plain.choices[0].message.content
    assert text.strip() and plain.choices[0].finish_reason == "stop"
    assert predicted.choices[0].message.content == text == ar.choices[0].message.content  # lossless
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0 and details.rejected_prediction_tokens >= 0
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0  # no prediction, none counted
    assert extension(ar)["stats"]["drafted"] == 0 and extension(predicted)["stats"]["accepted"] > 0
    assert check_spans(text, extension(predicted)["spans"], {"document": DOC}) > 0


def test_a_streamed_answer_is_the_whole_answer_in_chunks(client):
    whole = client.chat.completions.create(model=MODEL, messages=QUOTED, prediction=PREDICTION, extra_body=REWRITE)
    stream = client.chat.completions.create(model=MODEL, messages=QUOTED, prediction=PREDICTION, extra_body=REWRITE,
                                            stream=True, stream_options={"include_usage": True})
    text, spans, chunks = streamed(stream)
    assert text == whole.choices[0].message.content
    assert check_spans(text, spans, {"document": DOC}) > 0
    finish = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == "stop"
    assert extension(finish[0])["stopped"] == "eos"
    assert extension(finish[0])["change"] == extension(whole)["change"] == "edit"  # what the remote client reads
    assert chunks[-1].usage.completion_tokens_details.accepted_prediction_tokens > 0


def test_a_chat_that_quotes_the_prediction_answers_the_same_with_or_without_it(client):
    plain = client.chat.completions.create(model=MODEL, messages=QUOTED, max_tokens=48)
    predicted = client.chat.completions.create(model=MODEL, messages=QUOTED, max_tokens=48, prediction=PREDICTION)
    text = plain.choices[0].message.content
    assert predicted.choices[0].message.content == text and text.strip()
    assert predicted.usage.completion_tokens_details.accepted_prediction_tokens > 0
    check_spans(text, extension(predicted)["spans"], {"message": [QUOTED[0]["content"]]})


def test_a_prediction_alone_is_the_text_to_rewrite(client):
    """A prediction found in no message is the text the instruction applies to: drafts copy only from the prompt."""
    answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": INSTRUCTION}],
                                            prediction=PREDICTION)
    assert answer.choices[0].finish_reason == "stop"
    assert check_spans(answer.choices[0].message.content, extension(answer)["spans"], {"prediction": DOC}) > 0


def test_plain_completions_stream_the_same_text(client):
    prompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=32)
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=32, stream=True))
    text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].text and whole.usage.completion_tokens == 32
    assert whole.choices[0].finish_reason == "length"
    check_spans(text, extension(whole)["spans"], {"prompt": prompt})


def test_models_and_health(client, server):
    (model,) = client.models.list().data
    assert model.id == MODEL and model.model_extra["max_model_len"] > 0
    assert httpx.get(f"{server}/health").json()["status"] == "ok"


def test_bad_requests_are_refused_with_the_reason(client):
    with pytest.raises(openai.BadRequestError, match="last message must be the user's"):
        client.chat.completions.create(model=MODEL, messages=[*QUOTED, {"role": "assistant", "content": "Sure."}])
    with pytest.raises(openai.BadRequestError, match="unknown strategy"):
        client.chat.completions.create(model=MODEL, messages=QUOTED, extra_body={"assistant": {"strategy": "fast"}})
    with pytest.raises(openai.BadRequestError, match="n"):
        client.chat.completions.create(model=MODEL, messages=QUOTED, n=2)
    with pytest.raises(openai.BadRequestError, match="instruction"):
        client.chat.completions.create(model=MODEL, messages=QUOTED, extra_body={"assistant": {"document": DOC}})


def test_a_client_that_goes_away_mid_stream_cancels_its_generation(app, client):
    long = [{"role": "user", "content": "Write a very long story about a dragon who learns to program."}]
    stream = client.chat.completions.create(model=MODEL, messages=long, max_tokens=4000, stream=True)
    shown = 0
    for chunk in stream:
        shown += bool(chunk.choices and chunk.choices[0].delta.content)
        if shown == 3:
            break
    stream.close()
    eventually(lambda: app.state.generations.running == 0, "the server went on generating for a client that left")
    assistant = app.state.model.result()
    assert assistant.stopped[-1] == "cancelled"
    follow = client.chat.completions.create(model=MODEL, messages=long, max_tokens=8, stream=True)
    text, _, chunks = streamed(follow)
    assert text and not any("queued" in (chunk.model_extra.get("assistant") or {}) for chunk in chunks)
    assert assistant.stopped[-1] == "length"


def test_host_guard_on_loopback(server):
    port = server.rsplit(":", 1)[1]
    answer = httpx.get(f"{server}/v1/models", headers={"host": f"evil.example:{port}"})
    assert answer.status_code == 403 and "not this server's address" in answer.json()["detail"]


def test_a_key_guards_every_v1_request():
    never = threading.Event()
    with serve(create_app(never.wait, MODEL, api_key="secret"), health=None) as base:
        try:
            with pytest.raises(openai.AuthenticationError, match="API key"):
                openai.OpenAI(base_url=f"{base}/v1", api_key="wrong", max_retries=0).models.list()
            keyed = openai.OpenAI(base_url=f"{base}/v1", api_key="secret", max_retries=0)
            with pytest.raises(openai.InternalServerError, match="still loading"):  # past the key: 503
                keyed.models.list()
            assert httpx.post(f"{base}/v1/chat/completions", json={"messages": QUOTED}).status_code == 401
            # the key is the guard: a shared server is reached by any name
            assert httpx.get(f"{base}/health", headers={"host": "gpu-box.example"}).json()["status"] == "loading"
        finally:
            never.set()


def test_binding_other_addresses_needs_a_key():
    check_bind("127.0.0.1", None)
    check_bind("localhost", None)
    check_bind("::1", None)
    check_bind("0.0.0.0", "secret")
    for host in ("0.0.0.0", "::", "192.168.1.5", "gpu-box.example"):
        with pytest.raises(NoKeyForOpenAddress):
            check_bind(host, None)
    env = {key: value for key, value in os.environ.items() if key != "ASSISTANT_API_KEY"}
    done = subprocess.run([sys.executable, "-m", "assistant.cli", "serve", "--host", "0.0.0.0", "--port",
                           str(free_port())], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 2 and "--api-key" in done.stderr
