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

A server is untrusted input: every part of what it sends is checked against the shape the protocol gives
it (`shaped`, the shapes below: MODELS, CHUNK and the extension field's) before it is used, so an answer in
any other shape is a RemoteError that names the engine and the part that was wrong, never an exception from
deep inside a door.

Invariant: a Result is made only from a stream that ended as the protocol ends it, with a finish reason and
then `data: [DONE]`; a stream that closes before `data: [DONE]`, even after its finish reason (the server or
a proxy between died, and the usage or the engine's account may be missing), raises RemoteError, as does a
server that is down, refuses, stalls past `timeout`, sends an error or a malformed answer (or RewriteError,
for a request it refused as bad), so no door takes a partial answer for a finished one. Cancelling closes the
connection, which cancels the server's run.
"""

from __future__ import annotations

import http.client
import json
import math
import reprlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import SplitResult, urlsplit

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
        self.url, self.parts = url, self.address(url)
        self.base = self.parts.path.rstrip("/").removesuffix("/v1") + "/v1"
        self.strategy = check_strategy(strategy)
        self.api_key, self.timeout = api_key, timeout
        self.loaded = self._served()
        self.model = self.loaded.name

    @staticmethod
    def address(url: str) -> SplitResult:
        """The parts of an engine URL (http:// when it names no scheme), if it is an http(s) address with a host
        and a port in range; RemoteError otherwise. A door checks its --engine with it before it starts."""
        example = "give one such as http://127.0.0.1:8000"
        try:
            parts = urlsplit(url if "://" in url else f"http://{url}")
            port = parts.port
        except ValueError as error:
            raise RemoteError(f"the engine URL {url!r} is malformed ({error}); {example}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"the engine URL {url!r} is not an http(s) address with a host; {example}")
        if port == 0:
            raise RemoteError(f"the engine URL {url!r} is malformed (port 0 cannot be connected to); {example}")
        return parts

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
                                 "repairs": request.repairs, "by_definition": request.by_definition}
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
                raise RemoteError(f"the engine at {self.url} ended the stream (data: [DONE]) before the answer "
                                  f"ended (no finish reason); nothing of it is kept")
            yield from reader.finish(self.model)
        except Malformed as error:
            raise self._malformed("an answer chunk", error) from None
        finally:
            done.set()
            connection.close()

    def _chunks(self, response: http.client.HTTPResponse, cancel: threading.Event) -> Iterator[dict]:
        """The stream's chunks, each of the shape CHUNK, up to `data: [DONE]`; an error chunk, one that is not
        JSON or a stream that ends before `data: [DONE]` raises RemoteError (unless cancelled meanwhile)."""
        try:
            for raw in response:
                if not raw.startswith(b"data:"):
                    continue  # a blank line between events, a comment (keep-alive), an event name
                data = raw[5:].strip()
                if data == b"[DONE]":
                    return
                yield shaped(self._chunk(data), CHUNK, "")
        except (OSError, http.client.HTTPException) as error:
            if cancel.is_set():
                return
            if isinstance(error, TimeoutError | socket.timeout):
                raise RemoteError(f"the engine at {self.url} sent nothing for {self.timeout:g} s; "
                                  f"the answer so far is dropped") from error
            raise RemoteError(f"the engine at {self.url} broke off the answer ({error}); nothing of it is kept") \
                from error
        if not cancel.is_set():
            raise RemoteError(f"the engine at {self.url} closed the stream before the answer ended (no data: [DONE]); "
                              f"nothing of it is kept")

    def _chunk(self, data: bytes):
        """A `data:` line's JSON; an error chunk raises RemoteError with the server's message."""
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):  # not UTF-8 (a ValueError), not JSON, or nested past all reason
            raise RemoteError(f"the engine at {self.url} sent an answer chunk that is not JSON "
                              f"({reprlib.repr(data.decode('utf-8', 'replace'))}); nothing of the answer is kept") \
                from None
        if isinstance(chunk, dict) and "error" in chunk:
            raise RemoteError(f"the engine at {self.url} failed mid-answer: {error_message(chunk)}")
        return chunk

    def _malformed(self, what: str, error: Malformed) -> RemoteError:
        return RemoteError(f"the engine at {self.url} answered in a shape the protocol does not have ({what}: "
                           f"{error}); nothing of the answer is kept")

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
            detail = error_message(parsed(self._read(connection, response)))
            if response.status in (400, 422):
                raise RewriteError(f"the engine refused the request: {detail}")
            raise RemoteError(f"the engine at {self.url} answered {response.status}: {detail}")
        return connection, response

    def _read(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> bytes:
        """A whole (not streamed) answer's body; the connection is closed after."""
        try:
            return response.read()
        except (OSError, http.client.HTTPException) as error:
            raise RemoteError(f"the engine at {self.url} broke off its answer ({error})") from error
        finally:
            connection.close()

    def _post(self, path: str, body: dict):
        return self._request("POST", path, body)

    def _served(self) -> Served:
        connection, response = self._request("GET", "/models", None)
        try:
            models = shaped(json.loads(self._read(connection, response)), MODELS, "").get("data") or []
        except (ValueError, RecursionError):
            raise RemoteError(f"the engine at {self.url} answered /v1/models with something that is not JSON") \
                from None
        except Malformed as error:
            raise RemoteError(f"the engine at {self.url} answered /v1/models in a shape the protocol does not "
                              f"have: {error}") from None
        if not models:
            raise RemoteError(f"the engine at {self.url} serves no model (/v1/models is empty)")
        model = models[0]
        return Served(model.get("id") or "", model.get("max_model_len") or DEFAULT_CONTEXT,
                      model.get("owned_by") == "assistant")


def hang_up_on_cancel(connection: http.client.HTTPConnection, cancel: threading.Event, done: threading.Event):
    """Close the connection once `cancel` is set (the server then cancels its run), unless the stream is done."""
    while not done.wait(0.05):
        if cancel.is_set():
            if connection.sock is not None:
                connection.sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked on the socket
            return


def parsed(data: bytes) -> dict:
    """An error answer's body as an object, whatever the server sent."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        value = data.decode("utf-8", "replace")[:500]
    return value if isinstance(value, dict) else {"error": {"message": str(value)[:500]}}


def error_message(body: dict) -> str:
    """The message of an OpenAI-style error body ({"error": {"message"}}, or FastAPI's {"detail"}), as one line
    of printable text at most 300 characters long: it is the server's, and goes into ours."""
    error = body.get("error", body.get("detail", body))
    text = str(error.get("message", error) if isinstance(error, dict) else error)
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= 300 else line[:297] + "..."


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
        if extension.get("queued") is not None:
            yield Queued(extension["queued"])
        if repairing := extension.get("repairing"):
            yield Repairing(problems_of(repairing["problems"]), repairing["attempt"])
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") or ""
            if choice.get("finish_reason"):
                self.ended, self.summary = True, extension
            elif text or extension.get("spans"):
                self.text += text
                tokens = spans_of(extension.get("spans") or [], len(self.text), len(self.document), "assistant.spans")
                self.tokens += tokens
                step, totals = extension.get("step") or {}, extension.get("totals") or {}
                yield Delta(text, tokens, step.get("new_tokens") or 0, step.get("drafted") or 0,
                            step.get("accepted") or 0, step.get("seconds") or 0.0, stats_of(totals))

    def finish(self, model: str) -> Iterator[Event]:
        yield self.result(self.summary.get("stopped") or "length", model)

    def result(self, stopped: str, model: str) -> Result:
        summary, text, tokens = self.summary, self.text, self.tokens
        if summary.get("text") is not None:  # a repair replaced the answer streamed
            text = summary["text"]
            tokens = spans_of(summary.get("spans") or [], len(text), len(self.document), "assistant.spans")
        check = summary.get("check")
        return Result(text, merge_spans(tokens), stats_of(summary.get("stats") or {}), stopped,
                      summary.get("model") or model, summary.get("weights") or RemoteAssistant.weights, tokens,
                      [in_range(piece, len(self.document), "assistant.pieces") for piece in summary.get("pieces") or []],
                      None if check is None else Check(problems_of(check["problems"], len(text)), tuple(check["ran"]),
                                                       tuple(check["notes"])),
                      tuple(repair_of(repair) for repair in summary.get("repairs") or []),
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
        return Stats(self.usage.get("completion_tokens") or self.steps, self.steps, time.perf_counter() - self.started,
                     self.usage.get("prompt_tokens") or 0, 0, 0, self.first)

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


# ---------------------------------------------------------------- the shapes of answers

class Malformed(Exception):
    """A part of a server's answer in a shape the protocol does not have; the message names the part (its path
    in the JSON) and what it was."""


STOPPED = frozenset({"eos", "stop", "length", "cancelled"})  # how an answer of assistant serve stopped
CHANGES = frozenset({"none", "layout", "comments", "edit"})  # `checks.change_kind`
PROBLEM = {"message": str, "start": int, "end": int, "code": str, "checker": str}
SPAN = {"output": (int, int), "source?": {"start": int, "end": int}}
STATS = {"new_tokens?": int, "steps?": int, "seconds?": float, "prompt_tokens?": int, "drafted?": int,
         "accepted?": int, "first_token_seconds?": float}
EXTENSION = {"queued?": int, "repairing?": {"attempt": int, "problems": [PROBLEM]}, "spans?": [SPAN],
             "step?": STATS, "totals?": STATS,  # a step's chunk; then the last chunk's account of the answer:
             "stopped?": STOPPED, "stats?": STATS, "model?": str, "weights?": str, "pieces?": [(int, int)],
             "check?": {"problems": [PROBLEM], "ran": [str], "notes": [str]}, "text?": str, "change?": CHANGES,
             "repairs?": [{"attempt": int, "problems_before": [PROBLEM], "problems_after": [PROBLEM], "kept": bool,
                           "stats": STATS, "seconds": float, "model?": bool}]}
CHUNK = {"choices?": [{"delta?": {"content?": str}, "finish_reason?": str}],
         "usage?": {"prompt_tokens?": int, "completion_tokens?": int}, "assistant?": EXTENSION}
MODELS = {"data?": [{"id?": str, "max_model_len?": int, "owned_by?": str}]}


def shaped(value, shape, where: str):
    """`value` if it has `shape`, or Malformed naming the part (`where`, its path) that does not. A shape is a
    type (int: a whole number >= 0; float: a finite number >= 0), a dict (an object whose keys have those
    shapes; a key ending in "?" may be missing or null; other keys are ignored), a list of one shape (a list of
    such items), a tuple (a list of exactly those items) or a frozenset (one of those strings)."""
    if isinstance(shape, dict):
        expect(value, dict, where)
        for key, inner in shape.items():
            name = key.removesuffix("?")
            path = f"{where}.{name}" if where else name
            if value.get(name) is not None:
                shaped(value[name], inner, path)
            elif not key.endswith("?"):
                raise Malformed(f"{path} is missing")
    elif isinstance(shape, list | tuple):
        expect(value, list, where)
        if isinstance(shape, tuple) and len(value) != len(shape):
            raise Malformed(f"{where or 'it'} is {reprlib.repr(value)}, not a list of {len(shape)}")
        for index, item in enumerate(value):
            shaped(item, shape[0] if isinstance(shape, list) else shape[index], f"{where}[{index}]")
    elif isinstance(shape, frozenset):
        if not isinstance(value, str) or value not in shape:
            raise Malformed(f"{where} is {reprlib.repr(value)}, not one of {', '.join(sorted(shape))}")
    else:
        expect(value, shape, where)
    return value


KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "a whole number >= 0",
         float: "a finite number >= 0"}


def expect(value, kind: type, where: str) -> None:
    """Malformed unless `value` is of `kind` (as KINDS says it: JSON's true is no number here)."""
    if kind is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    else:
        fits = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        fits = fits and (kind is not int or value >= 0)
    if not fits:
        raise Malformed(f"{where or 'it'} is {reprlib.repr(value)}, not {KINDS[kind]}")


def in_range(pair, limit: float, where: str) -> tuple[int, int]:
    """A checked [start, end] pair as a tuple, if 0 <= start <= end <= limit."""
    start, end = pair
    if not start <= end <= limit:
        inside = "" if limit == math.inf else f" inside [0, {limit}]"
        raise Malformed(f"{where} has the range [{start}, {end}], which is not a range{inside}")
    return start, end


def spans_of(spans: list[dict], output: int, document: int, where: str) -> list[Span]:
    """Spans from the extension field's JSON (sources in the document's offsets), each inside the answer's
    first `output` characters and its source inside the `document` characters."""
    return [Span(in_range(span["output"], output, where),
                 None if span.get("source") is None else
                 in_range((span["source"]["start"], span["source"]["end"]), document, f"{where} (source)"))
            for span in spans]


def problems_of(problems: list[dict], length: float = math.inf) -> tuple[Problem, ...]:
    """Problems from their JSON, each inside the `length` characters of the text it names (when known)."""
    for problem in problems:
        in_range((problem["start"], problem["end"]), length, "a problem")
    return tuple(Problem(p["message"], p["start"], p["end"], p["code"], p["checker"]) for p in problems)


def repair_of(repair: dict) -> Repair:
    """A repair pass from assistant serve's JSON (`serve.protocol.repair_json`)."""
    return Repair(repair["attempt"], problems_of(repair["problems_before"]), problems_of(repair["problems_after"]),
                  repair["kept"], stats_of(repair["stats"]), repair["seconds"], repair.get("model") is not False)


def stats_of(figures: dict) -> Stats:
    """Stats from their JSON (`Stats.to_json`); missing figures are 0."""
    return Stats(*(figures.get(name) or 0 for name in ("new_tokens", "steps", "seconds", "prompt_tokens", "drafted",
                                                        "accepted", "first_token_seconds")))
