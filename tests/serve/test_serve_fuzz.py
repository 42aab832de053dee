"""The HTTP doors answer any request body with a 4xx naming the problem or with an answer; never a 500 (which
the openai SDK retries) nor an engine failure. Bodies made by `hypothesis` from valid ones, with values
replaced by integers out of every range, invalid Unicode (lone surrogates) and values of the wrong type,
anywhere: `assistant serve`'s /v1/chat/completions and /v1/completions (errors in OpenAI's shape), and the
playground's POST /api/rewrite and /ws/rewrite (whose socket stays open). Against the real apps (in
process) on a fake engine that fails where the real one fails: its tokenizer cannot take a lone surrogate,
and it checks requests as the engine does."""

from __future__ import annotations

import copy
import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assistant import Delta, Request, Result, Span, Stats, check_request
from assistant.engine.contract import check_decoding
from assistant.serve.app import create_app
from assistant.web import app as playground

CHAT = {"model": "fake", "messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": [{"type": "text", "text": "Fix this."}]}],
        "max_tokens": 16, "max_completion_tokens": 16, "temperature": 0.5, "top_p": 0.9, "seed": 7,
        "stop": ["\n\n"], "n": 1, "stream": False, "stream_options": {"include_usage": True},
        "prediction": {"type": "content", "content": "x = 1\n"}}
REWRITE = {"messages": [{"role": "user", "content": "Rewrite it."}], "stream": True,
           "assistant": {"document": "x = 1\ny = 2\n", "instruction": "Rename x.", "selection": [0, 5],
                         "references": ["z = 3"], "strategy": "ar", "max_piece_tokens": 64,
                         "language": "python", "repairs": 1}}
COMPLETION = {"prompt": ["def f():"], "max_tokens": 8, "seed": 1, "stop": "\n", "stream": True}
BODIES = [("/v1/chat/completions", CHAT), ("/v1/chat/completions", REWRITE), ("/v1/completions", COMPLETION)]
PLAYGROUND = [("/api/rewrite", {"document": "x = 1\n", "instruction": "Rename x.", "strategy": "pld",
                                "temperature": 0.5, "max_new_tokens": 16, "language": "python"})]
EXAMPLES = settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def tokens(*texts) -> None:
    """The fake tokenizer: a text that is not a string, or not valid Unicode, fails as it does in the real one."""
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"text input must be of type str, not {type(text).__name__}")
        text.encode("utf-8")  # UnicodeEncodeError on a lone surrogate


class Tokenizing:
    """A fake engine with the real one's edges: it tokenizes what it is given and checks requests as the
    engine does (RewriteError), then answers with the first characters of its text."""

    strategy, model, weights, context_length = "ar", "fake", "float32", 2048

    def rewrite(self, document: str, instruction: str, *, cancel=None, **options):
        return self.run(Request(document, instruction, **options), cancel)

    def run(self, request: Request, cancel=None):
        check_request(request)
        tokens(request.document, request.instruction, *request.references)
        return self._answer(request.document)

    def chat(self, question: str, *, history: tuple[dict, ...] = (), cancel=None, **options):
        tokens(question, *(turn["content"] for turn in history))
        check_decoding(Request(question, "", **options))
        return self._answer(question)

    def complete(self, text: str, *, cancel=None, **options):
        tokens(text)
        check_decoding(Request(text, "", **options))
        return self._answer(text)

    def close(self) -> None:
        pass

    def _answer(self, text: str):
        shown = text[:8]
        yield Delta(shown, [Span((0, len(shown)), (0, len(shown)))], 1, 1, 0, 0.001)
        yield Result(shown, [Span((0, len(shown)), (0, len(shown)))], Stats(1, 1, 0.001, 4, 0, 0, 0.001), "eos",
                     "fake", "float32", change="edit")


INVALID_UNICODE = st.builds(lambda a, b, c: a + b + c, st.text(max_size=4),
                            st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=2),
                            st.text(max_size=4))  # lone surrogates, as JSON's "\ud800" makes
OUT_OF_RANGE = st.one_of(st.sampled_from([-1, 0, 2 ** 31, 2 ** 63, 2 ** 64, -2 ** 63 - 1, 10 ** 40]), st.integers(),
                         st.floats())  # floats: NaN and the infinities too
JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=6)  # a value of any type


def paths(value, at: tuple = ()):
    """The path of every value inside a JSON body."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield (*at, key)
        yield from paths(inner, (*at, key))


def replace(body, path: tuple, value) -> None:
    *parent, key = path
    for step in parent:
        body = body[step]
    body[key] = value


@st.composite
def bodies(draw, valid: list[tuple[str, dict]]) -> tuple[str, object]:
    """One of the `valid` bodies with one or two of its values replaced, or a body that is not an object."""
    endpoint, body = draw(st.sampled_from(valid))
    if draw(st.integers(0, 9)) == 0:
        return endpoint, draw(JUNK)
    body = copy.deepcopy(body)
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(list(paths(body))))
        replace(body, path, draw(st.one_of(INVALID_UNICODE, OUT_OF_RANGE, JUNK)))
    return endpoint, body


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Tokenizing, "fake")) as client:
        yield client


@pytest.fixture(scope="module")
def playground_client():
    with TestClient(playground.create_app(Tokenizing, "fake")) as client:
        yield client


def post(client: TestClient, endpoint: str, body):
    return client.post(endpoint, content=json.dumps(body), headers={"content-type": "application/json"})


def assert_answered(answer) -> None:
    """A 4xx in OpenAI's error shape, or a 200 whose stream, if any, ends with [DONE] and holds no error."""
    if answer.status_code != 200:
        assert 400 <= answer.status_code < 500, answer.text
        error = answer.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], error
        return
    if answer.headers["content-type"].startswith("text/event-stream"):
        events = [line.removeprefix("data: ") for line in answer.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and not any('"error"' in event for event in events), events[-3:]


@EXAMPLES
@given(request=bodies(BODIES))
def test_any_body_is_answered_or_refused_with_a_4xx(client, request):
    assert_answered(post(client, *request))


@EXAMPLES
@given(request=bodies(PLAYGROUND))
def test_the_playground_answers_any_body_or_refuses_it_with_a_4xx(playground_client, request):
    answer = post(playground_client, *request)
    assert answer.status_code == 200 or (400 <= answer.status_code < 500 and answer.json()["detail"]), answer.text


@EXAMPLES
@given(request=bodies(PLAYGROUND))
def test_the_playground_socket_answers_any_message_and_stays_open(playground_client, request):
    with playground_client.websocket_connect("/ws/rewrite") as socket:
        for message in (request[1], PLAYGROUND[0][1]):  # the junk, then a valid request on the same socket
            socket.send_text(json.dumps(message))
            while (answer := socket.receive_json())["type"] not in ("done", "error"):
                pass
            assert answer["type"] == "done" or not answer["message"].startswith("the rewrite failed"), answer
        assert answer["type"] == "done" and answer["complete"], answer


@pytest.mark.parametrize("field, value, param", [("seed", 2 ** 64, "seed"), ("seed", -1, "seed"),
                                                 ("messages", [{"role": "user", "content": "fix \ud800 this"}],
                                                  "messages.0.content")])
def test_the_reported_holes_are_400s_naming_the_field(client, field, value, param):
    answer = post(client, "/v1/chat/completions", {**CHAT, field: value})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
