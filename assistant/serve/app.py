"""`assistant serve`: the engine behind an OpenAI-compatible HTTP API, for the clients that speak it
(the `openai` SDK, Continue, llm.nvim, Zed) and for the other doors' `--engine`.

    POST /v1/chat/completions   POST /v1/completions   (streamed as server-sent events with "stream": true)
    GET  /v1/models             GET  /health

Laid out as the playground (`web/app.py`): plain endpoint functions on a router, the model reached
through a dependency (`http/lifespan.py`) and loaded by the lifespan on a thread of its own, bodies bounded.
One model answers every client: requests run one at a time in arrival order (the engine's queue), a
request past the door's limit is refused with 503, and prompt prefixes are reused across clients (the
engine's prefix cache). How a request becomes an engine call, and the extension fields, are in
`serve/protocol.py`.

Invariants: an answer that did not finish is never sent as finished (its finish_reason is "length", or an
error event ends the stream without `data: [DONE]`); a client that goes away cancels its generation within
a decoding step; on a loopback address the Host and Origin guard keeps other sites' pages out, and with an
API key (required to bind any other address) every /v1 request must carry it. TLS is a reverse proxy's job.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection

from assistant import Assistant, Result, RewriteError
from assistant.engine import aio
from assistant.http import server
from assistant.http.generations import MAX_GENERATIONS, STOPPING, Busy, Generations, cancel_on_disconnect
from assistant.http.guard import GuardHostAndOrigin
from assistant.http.lifespan import lifespan, load_error, loaded, model
from assistant.serve.protocol import Answer, ChatRequest, CompletionRequest, Sampled, chat_job, completion_job

MAX_BODY_BYTES = 16 << 20  # a request of the largest texts protocol.py accepts, every character escaped
KEEP_ALIVE = 10.0  # seconds a stream may go without a chunk before it gets a comment


class NoKeyForOpenAddress(ValueError):
    """Binding an address other machines can reach needs an API key."""


def check_bind(host: str, api_key: str | None) -> None:
    """Loopback is the default; any other address is reachable from elsewhere and needs an API key."""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False  # a host name: it may resolve to anything
    if not local and not api_key:
        raise NoKeyForOpenAddress(f"{host} can be reached from other machines: give --api-key (or ASSISTANT_API_KEY) "
                                  f"so that only clients with the key are answered, or bind 127.0.0.1")


# ---------------------------------------------------------------- errors and the key

def error_response(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    """An error as OpenAI's API shapes it, so that its clients show the message; `param` names the field."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status)


async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    return error_response(error.status_code, str(error.detail))


def field_name(location: tuple) -> str:
    """A validation error's field, as OpenAI's `param` names one ("messages.0.content"): its location
    without "body" and without the tags of a union's alternatives ("list[Part]")."""
    return ".".join(str(part) for part in location[1:] if isinstance(part, int) or part.isidentifier()) or "body"


async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
    """A 400 naming each field and its problem (the first, of a union's alternatives), without the `input`
    FastAPI echoes (it may be the whole, large body)."""
    problems: dict[str, str] = {}
    for item in error.errors():
        problems.setdefault(field_name(item["loc"]), item["msg"].removeprefix("Value error, "))
    message = "; ".join(f"{field}: {problem}" for field, problem in problems.items())
    return error_response(400, message, "invalid_value", next(iter(problems), None))


async def refused(request: Request, error: RewriteError) -> JSONResponse:
    """A request the engine refuses before anything runs (RewriteError says what to change)."""
    return error_response(400, str(error))


def failure(event) -> tuple[int, str] | None:
    """The status and message of an event that ends a generation without an answer: an exception, or a
    Result cancelled (the server is stopping: a client that left hears nothing); None for any other."""
    if isinstance(event, RewriteError):
        return 400, str(event)
    if isinstance(event, BaseException):
        return 500, f"the generation failed ({type(event).__name__}: {event}); the answer so far is unfinished"
    if isinstance(event, Result) and event.stopped == "cancelled":
        return 503, STOPPING
    return None


class RequireKey:
    """ASGI middleware: every /v1 request must carry `Authorization: Bearer <key>`; /health stays open."""

    def __init__(self, app, key: str):
        self.app, self.key = app, key.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            given = Headers(scope=scope).get("authorization", "").removeprefix("Bearer ").encode()
            if not hmac.compare_digest(given, self.key):
                response = error_response(401, "a valid API key is required: send it as 'Authorization: Bearer KEY'",
                                          "invalid_api_key")
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


# ---------------------------------------------------------------- answering

def frame(data: dict | str) -> str:
    """One server-sent event, as OpenAI streams them."""
    return f"data: {data if isinstance(data, str) else json.dumps(data, separators=(',', ':'))}\n\n"


STARTED = object()  # what a generation yields first once the engine has taken its request


def started(job, cancel: threading.Event) -> Iterator:
    """The job's events after STARTED: a request the engine refuses raises before it (RewriteError), so it
    is answered with an HTTP error; one it takes is answered at once, even while it waits for the model."""
    events = job.start(cancel)
    yield STARTED
    yield from events


async def answer(reply: Answer, body: Sampled, request: Request, generations: Generations):
    """Start the request's generation and answer it, streamed or whole. A refusal (a bad request, a full
    server) is an HTTP error, since it comes before anything is streamed."""
    cancel = threading.Event()
    try:
        events = generations.events(lambda: started(reply.job, cancel), cancel)
    except Busy as error:
        raise HTTPException(503, str(error)) from error
    watcher = asyncio.create_task(cancel_on_disconnect(request, cancel))
    try:
        first = await anext(events, None)
        if first is not STARTED:
            raise HTTPException(*failure(first or RuntimeError("no answer")))
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(streamed(reply, events, include_usage, cancel),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        async for event in events:
            if (failed := failure(event)) is not None:
                raise HTTPException(*failed)
            if isinstance(event, Result):
                return reply.whole(event)
        raise HTTPException(500, "the engine ended without an answer")
    except BaseException:
        cancel.set()
        raise
    finally:
        watcher.cancel()  # a stream's response watches the client from here on


async def paced(events: AsyncIterator) -> AsyncIterator:
    """`events`, with None after every KEEP_ALIVE seconds without one (a prefill, a wait in the queue)."""
    waiting = asyncio.ensure_future(anext(events, StopAsyncIteration))
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=KEEP_ALIVE)
            if not done:
                yield None
                continue
            if (item := waiting.result()) is StopAsyncIteration:
                return
            yield item
            waiting = asyncio.ensure_future(anext(events, StopAsyncIteration))
    finally:
        waiting.cancel()


async def streamed(reply: Answer, events: AsyncIterator, include_usage: bool,
                   cancel: threading.Event) -> AsyncIterator[str]:
    """The answer's chunks; `data: [DONE]` only after a Result; an SSE comment every KEEP_ALIVE seconds
    without one, so a client or proxy can tell a waiting server from a dead one. A client that goes away
    cancels the run."""
    try:
        yield frame(reply.first_chunk())
        async for event in paced(events):
            if event is None:
                yield ": keep-alive\n\n"
                continue
            if (failed := failure(event)) is not None:
                yield frame({"error": {"message": failed[1], "type": "server_error", "param": None, "code": None}})
                return
            if isinstance(event, Result):
                yield frame(reply.last_chunk(event))
                if include_usage:
                    yield frame(reply.usage_chunk(event))
                yield frame("[DONE]")
                return
            if (chunk := reply.chunk(event)) is not None:
                yield frame(chunk)
    finally:
        cancel.set()


# ---------------------------------------------------------------- dependencies and endpoints

async def runs(connection: HTTPConnection) -> Generations:
    return connection.app.state.generations


async def loaded_assistant(model: Annotated[aio.Loader, Depends(model)]) -> Assistant:
    return loaded(model)


Model = Annotated[aio.Loader, Depends(model)]
Runs = Annotated[Generations, Depends(runs)]
LoadedAssistant = Annotated[Assistant, Depends(loaded_assistant)]

router = APIRouter()


@router.get("/health")
async def health(request: Request, model: Model) -> JSONResponse:
    """200 once the model has loaded, 503 while it loads or if it failed. Never waits for a thread."""
    assistant, error = model.loaded(), load_error(model)
    status = "ok" if assistant is not None else ("error" if error else "loading")
    return JSONResponse({"status": status, "model": request.app.state.model_name, "error": error},
                        status_code=200 if assistant is not None else 503)


@router.get("/v1/models")
async def models(request: Request, assistant: LoadedAssistant) -> dict:
    return {"object": "list", "data": [{"id": request.app.state.model_name, "object": "model", "created": 0,
                                        "owned_by": "assistant", "max_model_len": assistant.context_length}]}


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatRequest, request: Request, assistant: LoadedAssistant, generations: Runs):
    reply = Answer("chat.completion", request.app.state.model_name, chat_job(assistant, body))
    return await answer(reply, body, request, generations)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request, assistant: LoadedAssistant, generations: Runs):
    reply = Answer("text_completion", request.app.state.model_name, completion_job(assistant, body))
    return await answer(reply, body, request, generations)


# ---------------------------------------------------------------- the app

def create_app(assistant_factory: Callable[[], Assistant], model_name: str, api_key: str | None = None,
               max_generations: int = MAX_GENERATIONS) -> FastAPI:
    """The server; `assistant_factory` builds the Assistant (called once, in a background thread). With
    `api_key`, the key guards every /v1 request; without, the Host and Origin guard keeps other sites out."""
    app = FastAPI(title="Editor assistant: OpenAI-compatible server", version="0.1.0", lifespan=lifespan,
                  max_body_size=MAX_BODY_BYTES)
    app.state.assistant_factory, app.state.model_name = assistant_factory, model_name
    app.state.model, app.state.generations = aio.Loader(), Generations(max_generations)
    if api_key:
        app.add_middleware(RequireKey, key=api_key)
    else:
        app.add_middleware(GuardHostAndOrigin)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(RewriteError, refused)
    app.include_router(router)
    return app


def server_config(app: FastAPI, host: str, port: int, **options) -> uvicorn.Config:
    """uvicorn's settings for the server (`http/server.py`), its connections reaped as the playground's."""
    return server.server_config(app, host, port, MAX_BODY_BYTES, **options)
