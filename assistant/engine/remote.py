"""The engine on another machine: `RemoteAssistant` sends the doors' requests to an OpenAI-compatible
server (`assistant serve`, vLLM, SGLang, llama.cpp's server, Ollama) and yields the events `Assistant`
yields, so a door built on one runs on the other unchanged.

    assistant = RemoteAssistant("http://gpu-box:8000", api_key="...")
    for event in assistant.rewrite(document, "fix the bug"):
        ...  # Queued (from assistant serve), Delta as the answer streams, then one Result

Every request is a streamed chat completion whose messages are the engine's own edit prompt (its
system message, the text to rewrite fenced, the instruction) and whose `prediction` is the text to
rewrite. Against `assistant serve` (it names itself as the owner in /v1/models) the extension field
`assistant` carries the request in the engine's terms: the server plans long documents, decodes with
the chosen strategy and attributes each token itself (j*). Against any other server this client plans
long documents (token counts estimated from UTF-8 bytes, the context from /v1/models' `max_model_len`),
takes the answer out of the code block the model replies with, and attributes it by alignment with
the text it rewrote (`engine.alignment`), and checks the answer and repairs it (repair passes are further
requests) as the engine does.

Invariant: a Result is made only from a stream that ended as the protocol ends it (`data: [DONE]`
after a finish reason); a server that is down, refuses, stalls past `timeout`, sends an error or closes
early raises RemoteError (or RewriteError, for a request it refused as bad), so no door takes a
partial answer for a finished one. Cancelling closes the connection, which cancels the server's run.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from assistant.checks import Check, Problem
from assistant.engine import long_documents, repair
from assistant.engine.alignment import copied_spans
from assistant.engine.contract import (
    DEFAULT_REPAIRS,
    DEFAULT_STRATEGY,
    Engine,
    RemoteError,
    Request,
    RewriteError,
    check_request,
    check_strategy,
)
from assistant.engine.events import (
    Delta,
    Event,
    Queued,
    Repair,
    Repairing,
    Result,
    Stats,
)
from assistant.engine.output import (
    Span,
    closing_fence,
    merge_spans,
    missing_final_newline,
    unclosed_tail,
)
from assistant.engine.prompts import SYSTEM, edit_segments

TIMEOUT = 60.0  # seconds without a byte from the server before the request fails (assistant serve sends a
# keep-alive every 10 s while a request waits)
DEFAULT_CONTEXT = 4096  # tokens, for a server whose /v1/models does not say (Ollama, llama.cpp)
BYTES_PER_TOKEN = 3  # an estimate on the safe side: code and English run nearer 4 bytes a token
FINISHED = {"stop": "eos", "length": "length"}  # OpenAI's finish_reason, as the engine says it


@dataclass(frozen=True)
class Served:
    """The model as the server reports it (what `Assistant.loaded` tells a door)."""

    name: str
    context_length: int
    native: bool  # `assistant serve`: the engine's own planning, strategies and attribution


class RemoteAssistant(Engine):
    """An OpenAI-compatible server at `url`, offering what the doors use of `Assistant`."""

    weights = "remote"

    def __init__(self, url: str, *, strategy: str = DEFAULT_STRATEGY, api_key: str | None = None,
                 timeout: float = TIMEOUT):
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"the engine URL {url!r} is not an http(s) address, e.g. http://127.0.0.1:8000")
        self.url, self.parts = url, parts
        self.base = parts.path.rstrip("/").removesuffix("/v1") + "/v1"
        self.strategy = check_strategy(strategy)
        self.api_key, self.timeout = api_key, timeout
        self.loaded = self._served()
        self.model = self.loaded.name

    # ------------------------------------------------------------ what the doors call

    @property
    def context_length(self) -> int:
        return self.loaded.context_length

    def run(self, request: Request, cancel: threading.Event | None = None) -> Iterator[Event]:
        """The rewrite as events; a bad request raises RewriteError here, before anything is sent. assistant
        serve checks and repairs the answer itself; for another server it is checked and repaired here."""
        check_request(request)
        if self.loaded.native:
            return self._one_pass(request, request.selection, cancel)
        return repair.checked(self, request, DEFAULT_REPAIRS if request.repairs is None else request.repairs, cancel)

    def answer(self, request: Request, cancel: threading.Event | None = None) -> Iterator[Event]:
        """The answer from another server to a checked request, unchecked: in one pass, or in pieces planned
        here."""
        region = request.selection or (0, len(request.document))
        pieces = long_documents.plan(request.document, region, context_length=self.loaded.context_length,
                                     count_tokens=estimated_tokens,
                                     prompt_tokens=lambda part: self._prompt_tokens(request, part or region),
                                     max_piece_tokens=request.max_piece_tokens)
        if pieces == [region]:
            return self._one_pass(request, request.selection, cancel)
        return long_documents.rewrite(request.document, region, pieces,
                                      lambda part: self._one_pass(request, part, cancel), cancel)

    def warm(self, document: str, cancel: threading.Event | None = None) -> int:
        """Nothing to prefill here: the server keeps its own prefix cache."""
        return 0

    def close(self) -> None:
        """Nothing is held between requests."""

    # ------------------------------------------------------------ one request

    def _one_pass(self, request: Request, selection: tuple[int, int] | None,
                  cancel: threading.Event | None) -> Iterator[Event]:
        body = self._body(request, selection)
        target = selection or (0, len(request.document))
        reader = NativeAnswer(request.document) if self.loaded.native else PlainAnswer(request.document, target)
        return self._stream(body, reader, cancel or threading.Event())

    def _messages(self, request: Request, selection: tuple[int, int] | None) -> list[dict]:
        segments, _ = edit_segments(request.instruction, request.document, selection, request.references)
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "".join(s.text for s in segments)}]

    def _prompt_tokens(self, request: Request, selection: tuple[int, int]) -> int:
        return sum(estimated_tokens(m["content"]) + 8 for m in self._messages(request, selection))

    def _body(self, request: Request, selection: tuple[int, int] | None) -> dict:
        start, end = selection or (0, len(request.document))
        body = {"model": self.model, "messages": self._messages(request, selection), "stream": True,
                "stream_options": {"include_usage": True}, "temperature": request.temperature,
                "top_p": request.top_p, "prediction": {"type": "content", "content": request.document[start:end]}}
        body |= {"seed": request.seed} if request.seed is not None else {}
        body |= {"stop": list(request.stop)} if request.stop else {}
        if self.loaded.native:
            body["assistant"] = {"document": request.document, "instruction": request.instruction,
                                 "selection": list(selection) if selection else None,
                                 "references": list(request.references), "strategy": request.strategy or self.strategy,
                                 "max_piece_tokens": request.max_piece_tokens, "language": request.language,
                                 "repairs": request.repairs}
            body |= {"max_tokens": request.max_new_tokens} if request.max_new_tokens else {}
        else:
            room = self.loaded.context_length - self._prompt_tokens(request, (start, end))
            budget = request.max_new_tokens or long_documents.answer_budget(estimated_tokens(request.document[start:end]))
            body["max_tokens"] = max(1, min(budget, room))
        return body

    def _stream(self, body: dict, reader: Answer, cancel: threading.Event) -> Iterator[Event]:
        connection, response = self._post("/chat/completions", body)
        done = threading.Event()
        threading.Thread(target=hang_up_on_cancel, args=(connection, cancel, done), daemon=True).start()
        try:
            for chunk in self._chunks(response, cancel):
                yield from reader.read(chunk)
            if cancel.is_set():
                yield reader.result("cancelled", self.model)
                return
            if not reader.ended:
                raise RemoteError(f"the engine at {self.url} closed the stream before the answer ended; "
                                  f"nothing of it is kept")
            yield from reader.finish(self.model)
        finally:
            done.set()
            connection.close()

    def _chunks(self, response: http.client.HTTPResponse, cancel: threading.Event) -> Iterator[dict]:
        """The stream's JSON chunks up to `data: [DONE]`; an error chunk raises RemoteError."""
        try:
            for raw in response:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data:"):
                    continue  # a blank line between events, a comment (keep-alive), an event name
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RemoteError(f"the engine at {self.url} failed mid-answer: {error_message(chunk)}")
                yield chunk
        except (OSError, http.client.HTTPException, ValueError) as error:
            if cancel.is_set():
                return
            if isinstance(error, TimeoutError | socket.timeout):
                raise RemoteError(f"the engine at {self.url} sent nothing for {self.timeout:g} s; "
                                  f"the answer so far is dropped") from error
            raise RemoteError(f"the engine at {self.url} broke off the answer ({error}); nothing of it is kept") \
                from error

    # ------------------------------------------------------------ HTTP

    def _connection(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.parts.scheme == "https" else http.client.HTTPConnection
        return kind(self.parts.hostname, self.parts.port, timeout=self.timeout)

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        return headers | ({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})

    def _request(self, method: str, path: str, body: dict | None):
        connection = self._connection()
        try:
            connection.request(method, self.base + path, body=None if body is None else json.dumps(body),
                               headers=self._headers())
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise RemoteError(f"cannot reach the engine at {self.url}: {error}") from error
        if response.status != 200:
            detail = error_message(parsed(response.read()))
            connection.close()
            if response.status in (400, 422):
                raise RewriteError(f"the engine refused the request: {detail}")
            raise RemoteError(f"the engine at {self.url} answered {response.status}: {detail}")
        return connection, response

    def _post(self, path: str, body: dict):
        return self._request("POST", path, body)

    def _served(self) -> Served:
        connection, response = self._request("GET", "/models", None)
        try:
            models = parsed(response.read()).get("data") or []
        finally:
            connection.close()
        if not models:
            raise RemoteError(f"the engine at {self.url} serves no model (/v1/models is empty)")
        model = models[0]
        return Served(str(model.get("id", "")), int(model.get("max_model_len") or DEFAULT_CONTEXT),
                      model.get("owned_by") == "assistant")


def hang_up_on_cancel(connection: http.client.HTTPConnection, cancel: threading.Event, done: threading.Event):
    """Close the connection once `cancel` is set (the server then cancels its run), unless the stream is done."""
    while not done.wait(0.05):
        if cancel.is_set():
            if connection.sock is not None:
                connection.sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked on the socket
            return


def parsed(data: bytes) -> dict:
    try:
        value = json.loads(data)
    except ValueError:
        return {"error": {"message": data.decode("utf-8", "replace")[:500]}}
    return value if isinstance(value, dict) else {}


def error_message(body: dict) -> str:
    """The message of an OpenAI-style error body ({"error": {"message"}}, or FastAPI's {"detail"})."""
    error = body.get("error", body.get("detail", body))
    return str(error.get("message", error) if isinstance(error, dict) else error)


def estimated_tokens(text: str) -> int:
    return len(text.encode("utf-8")) // BYTES_PER_TOKEN + 1


# ---------------------------------------------------------------- reading answers

class Answer(Protocol):
    """The events of one streamed answer, read chunk by chunk."""

    ended: bool  # a finish reason has come

    def read(self, chunk: dict) -> Iterator[Event]:
        """The events a chunk makes."""

    def finish(self, model: str) -> Iterator[Event]:
        """The last events, once the stream has ended as the protocol ends it."""

    def result(self, stopped: str, model: str) -> Result:
        """The answer so far, as a Result that stopped for `stopped`."""


class NativeAnswer(Answer):
    """`assistant serve`'s answer: its events carried in the extension field, attribution in document offsets."""

    def __init__(self, document: str):
        self.document, self.text, self.tokens = document, "", []
        self.summary: dict = {}
        self.ended = False

    def read(self, chunk: dict) -> Iterator[Event]:
        extension = chunk.get("assistant") or {}
        if "queued" in extension:
            yield Queued(int(extension["queued"]))
        if "repairing" in extension:
            repairing = extension["repairing"]
            yield Repairing(problems_of(repairing["problems"]), repairing["attempt"])
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") or ""
            if choice.get("finish_reason"):
                self.ended, self.summary = True, extension
            elif text or extension.get("spans"):
                tokens = [span_of(s) for s in extension.get("spans", [])]
                step, totals = extension.get("step") or {}, extension.get("totals") or {}
                self.text += text
                self.tokens += tokens
                yield Delta(text, tokens, step.get("new_tokens", 0), step.get("drafted", 0), step.get("accepted", 0),
                            step.get("seconds", 0.0), stats_of(totals))

    def finish(self, model: str) -> Iterator[Event]:
        yield self.result(self.summary.get("stopped", "length"), model)

    def result(self, stopped: str, model: str) -> Result:
        summary, text, tokens = self.summary, self.text, self.tokens
        if "text" in summary:  # a repair replaced the answer streamed
            text, tokens = summary["text"], [span_of(s) for s in summary.get("spans", [])]
        check = summary.get("check")
        return Result(text, merge_spans(tokens), stats_of(summary.get("stats") or {}), stopped,
                      summary.get("model", model), summary.get("weights", RemoteAssistant.weights), tokens,
                      [tuple(piece) for piece in summary.get("pieces", [])],
                      None if check is None else Check(problems_of(check["problems"]), tuple(check["ran"]),
                                                       tuple(check["notes"])),
                      tuple(repair_of(repair) for repair in summary.get("repairs", [])),
                      change=summary.get("change"))


class PlainAnswer(Answer):
    """Another server's answer: the code block the model replies with, attributed by alignment with the
    rewritten text `target` of `document`."""

    def __init__(self, document: str, target: tuple[int, int]):
        self.document, self.target = document, target
        self.block = Block()
        self.started, self.steps, self.first = time.perf_counter(), 0, 0.0
        self.finish_reason, self.usage = None, {}
        self.ended = False

    def read(self, chunk: dict) -> Iterator[Event]:
        self.usage = chunk.get("usage") or self.usage
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") or ""
            if text:
                self.steps += 1
                self.first = self.first or time.perf_counter() - self.started
                shown = self.block.add(text)
                if shown:
                    yield Delta(shown, [], 1, 0, 0, 0.0, self.stats())
            if choice.get("finish_reason"):
                self.ended, self.finish_reason = True, choice["finish_reason"]

    def stats(self) -> Stats:
        return Stats(self.usage.get("completion_tokens", self.steps), self.steps, time.perf_counter() - self.started,
                     self.usage.get("prompt_tokens", 0), 0, 0, self.first)

    def finish(self, model: str) -> Iterator[Event]:
        if rest := self.block.finish():
            yield Delta(rest, [], 0, 0, 0, 0.0, self.stats())
        stopped = "eos" if self.block.closed else FINISHED.get(self.finish_reason, "length")
        target = self.document[slice(*self.target)]
        if newline := missing_final_newline(self.block.text, target, stopped == "eos"):
            self.block.shown += newline
            yield Delta(newline, [], 0, 0, 0, 0.0, self.stats())
        yield self.result(stopped, model)

    def result(self, stopped: str, model: str) -> Result:
        text = self.block.text
        spans = copied_spans(self.document[slice(*self.target)], text, self.target[0])
        return Result(text, spans, self.stats(), stopped, model, RemoteAssistant.weights, spans, [])


class Block:
    """A chat model's reply as the text inside its code block: an opening fence line is dropped, and the text
    ends where the block closes; a tail that may still become the closing fence is held back."""

    def __init__(self):
        self.raw, self.shown = "", ""
        self.start: int | None = None  # where the text starts in `raw`, once the first line is known
        self.fence: str | None = None
        self.closed = False

    @property
    def text(self) -> str:
        return self.shown

    def add(self, text: str) -> str:
        self.raw += text
        if self.start is None:
            if "\n" not in self.raw:
                return ""  # the first line says whether the reply is a code block
            first = self.raw[:self.raw.index("\n")].strip()
            self.fence = first[:len(first) - len(first.lstrip("`"))] if first.startswith("```") else None
            self.start = self.raw.index("\n") + 1 if self.fence else 0
        return self._reveal(held=True)

    def finish(self) -> str:
        if self.start is None:
            self.start = 0
        return self._reveal(held=False)

    def _reveal(self, held: bool) -> str:
        if self.closed:
            return ""
        body = self.raw[self.start:]
        end = len(body)
        if self.fence and (close := closing_fence(body if held else body + "\n", self.fence)):
            end, self.closed = close[0], True
        elif self.fence and held:
            end -= unclosed_tail(body, self.fence)
        new = body[len(self.shown):end]
        self.shown += new
        return new


def span_of(span: dict) -> Span:
    """A Span from the extension field's JSON (its source in the document's offsets)."""
    source = span["source"]
    return Span(tuple(span["output"]), None if source is None else (source["start"], source["end"]))


def problems_of(problems: list[dict]) -> tuple[Problem, ...]:
    return tuple(Problem(p["message"], p["start"], p["end"], p["code"], p["checker"]) for p in problems)


def repair_of(repair: dict) -> Repair:
    """A repair pass from assistant serve's JSON (`serve.protocol.repair_json`)."""
    return Repair(repair["attempt"], problems_of(repair["problems_before"]), problems_of(repair["problems_after"]),
                  repair["kept"], stats_of(repair["stats"]), repair["seconds"], repair.get("model", True))


def stats_of(figures: dict) -> Stats:
    """Stats from their JSON (`Stats.to_json`); missing figures are 0."""
    return Stats(figures.get("new_tokens", 0), figures.get("steps", 0), figures.get("seconds", 0.0),
                 figures.get("prompt_tokens", 0), figures.get("drafted", 0), figures.get("accepted", 0),
                 figures.get("first_token_seconds", 0.0))

