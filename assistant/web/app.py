"""The web playground: a FastAPI app that streams rewrites over a websocket and serves a static page.

Laid out as FastAPI's documentation lays out an app: plain endpoint functions on a router, the model
reached through a dependency (`model`, which a test swaps with `app.dependency_overrides`) and loaded
by the lifespan on a thread of its own (`assistant.aio`, shared with the language server).

    assistant web --port 8000      # then open http://127.0.0.1:8000/
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Literal

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import HTTPConnection

from assistant import STRATEGIES, Delta, Engine, Queued, Repairing, Result, RewriteError, check_strategy
from assistant.checks import language_of
from assistant.checks.syntax import LANGUAGES
from assistant.engine import aio
from assistant.http import server
from assistant.http.generations import MAX_GENERATIONS, Busy, Generations, cancel_on_disconnect
from assistant.http.guard import GuardHostAndOrigin
from assistant.http.lifespan import STILL_LOADING, lifespan, load_error, loaded, model

STATIC = Path(__file__).parent / "static"
MAX_DOCUMENT_CHARS = 200_000
MAX_INSTRUCTION_CHARS = 10_000
MAX_NEW_TOKENS = 4096
# The largest valid request: every character of the text written as a JSON escape pair (12 bytes).
MAX_BODY_BYTES = 12 * (MAX_DOCUMENT_CHARS + MAX_INSTRUCTION_CHARS) + 4096
CHECKED_LANGUAGES = ("python", *sorted(LANGUAGES))  # ruff for Python; tree-sitter or the format's parser for the rest
COMPLETE = ("eos", "stop")  # the answer ended by itself; every other `stopped` is unfinished


# ---------------------------------------------------------------- request and response models

class RewriteRequest(BaseModel):
    """One rewrite: the document, what to change, and how to decode."""

    model_config = ConfigDict(strict=True, extra="forbid")

    document: str = Field(max_length=MAX_DOCUMENT_CHARS, description="the text to rewrite")
    instruction: str = Field(max_length=MAX_INSTRUCTION_CHARS, description="what to change")
    strategy: str | None = Field(None, description=f"one of {', '.join(STRATEGIES)}; the server default when left out")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 decodes greedily")
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS,
                                       description="the most tokens to generate; left out: the engine's output budget, "
                                                   "room for a whole rewrite")
    language: str | None = Field(None, description="an LSP languageId (python, javascript, ...) to check the answer "
                                                   "as, repairing the problems it introduced; left out: unchecked")

    @field_validator("strategy")
    @classmethod
    def known_strategy(cls, value: str | None) -> str | None:
        return value if value is None else check_strategy(value)  # RewriteError is a ValueError

    @field_validator("language")
    @classmethod
    def checked_language(cls, value: str | None) -> str | None:
        return value if value is None else language_of(value)  # an unknown one is unchecked, and the answer says so


class SpanModel(BaseModel):
    output: tuple[int, int] = Field(description="character range in the output text")
    source: tuple[int, int] | None = Field(description="character range in the document it was copied from")


class ProblemModel(BaseModel):
    message: str
    start: int = Field(description="where it starts in the output text (characters)")
    end: int
    code: str = Field(description="a ruff rule code (F821), syntax or changed-code")
    checker: str
    line: int = Field(description="the 0-based line of `start` in the output text")
    character: int


class ChecksModel(BaseModel):
    ran: list[str] = Field(description="the checks that ran; none: the answer is unchecked")
    notes: list[str] = Field(description="what could not be checked, and why")
    seconds: float


class RewriteResponse(BaseModel):
    type: Literal["done"] = "done"
    text: str
    spans: list[SpanModel]
    stats: dict[str, float | int]
    stopped: str = Field(description="eos, length, stop or cancelled")
    complete: bool = Field(description="false when the answer did not end by itself (token limit, cancel)")
    reason: str | None = Field(description="why the answer is unfinished and what to change; null when complete")
    strategy: str
    model: str = Field(description="the model asked for")
    weights: str = Field(description="the weight format it ran in (what `auto` chose)")
    problems: list[ProblemModel] = Field(description="the problems the answer introduced, as checked")
    checks: ChecksModel
    repairs: list[dict] = Field(description="the repair passes: problems before and after, kept or not")
    change: str | None = Field(description="what the finished answer changed: none, layout, comments or edit; "
                                           "null when it did not finish")
    unchanged: bool = Field(description="true when the finished answer made no edit (change is none, layout or "
                                        "comments): no change made, not a plain success")
    note: str | None = Field(description="what the page says of an answer that made no edit; null otherwise")


class Health(BaseModel):
    model_loaded: bool
    model: str
    error: str | None
    strategies: list[str]
    default_strategy: str | None
    languages: list[str] = Field(description="the languages an answer can be checked as")


class Sample(BaseModel):
    id: str
    task: str
    instruction: str
    document: str
    language: str | None = Field(None, description="the language to check its answer as; none: prose")


# ---------------------------------------------------------------- helpers

def span_json(span) -> dict:
    return {"output": list(span.output), "source": None if span.source is None else list(span.source)}


def validation_message(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "request"
        message = item["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


BUILT_IN_SAMPLES = (
    Sample(id="python-rename", task="code-edit", instruction="Rename the function `add` to `plus`.",
           document="def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b\n\n\n"
                    "print(add(2, 3))\n", language="python"),
    Sample(id="email-polite", task="text-edit", instruction="Fix the spelling mistakes.",
           document="Hi Sam,\n\nThanks for the quick reply. I have attached the reprot you asked for; "
                    "the numbers for March are on page two.\n\nBest,\nAlex\n"),
)


def unfinished_reason(result: Result, request: RewriteRequest) -> str | None:
    """Why an answer did not end by itself, and what would let it finish; None when it did."""
    if result.stopped in COMPLETE:
        return None
    if result.stopped == "length":
        limit = f"max_new_tokens={request.max_new_tokens}" if request.max_new_tokens else "the engine's output budget"
        return (f"the answer stopped at the token limit ({limit}, {result.stats.new_tokens} tokens) before it "
                f"finished: raise max_new_tokens (Max tokens on the page) or rewrite a shorter part of the document")
    if result.stopped == "cancelled":
        return "the rewrite was cancelled before it finished: run it again for the whole answer"
    return f"the rewrite stopped early ({result.stopped}): the answer is not whole"


def done_message(result: Result, request: RewriteRequest, strategy: str) -> dict:
    reason = unfinished_reason(result, request)
    return {"type": "done", **result.to_json(), "complete": reason is None, "reason": reason,
            "unchanged": result.unchanged, "note": result.change_note, "strategy": strategy}


def failure_message(error: Exception) -> str:
    """An engine failure in the middle of a run: nothing streamed so far is a whole answer."""
    if isinstance(error, RewriteError):
        return str(error)
    return f"the rewrite failed ({type(error).__name__}: {error}); any output so far is unfinished"


def event_messages(event) -> list[dict]:
    if isinstance(event, Queued):
        return [{"type": "queued", "ahead": event.ahead}]
    if isinstance(event, Delta):
        messages = [{"type": "delta", "text": event.text, "tokens": [span_json(s) for s in event.tokens]}]
        if event.new_tokens:
            messages.append({"type": "step", "new_tokens": event.new_tokens, "drafted": event.drafted,
                             "accepted": event.accepted, "seconds": round(event.seconds, 5),
                             "totals": event.totals.to_json()})  # the engine's running figures, shown as they are
        return messages
    if isinstance(event, Repairing):  # its offsets are in the answer streamed so far
        return [{"type": "repairing", "attempt": event.attempt, "problems": [p.to_json() for p in event.problems]}]
    return []


def parse_message(raw: str) -> dict | str:
    """A websocket request as a JSON object, or the error message that says what is wrong with it."""
    if len(raw) > MAX_BODY_BYTES:  # server_config stops it sooner; a server run with other settings may not
        return f"the message is over {MAX_BODY_BYTES:,} characters, the most a valid request takes"
    try:
        message = json.loads(raw)
    except ValueError as error:  # JSONDecodeError, or an integer past Python's 4,300 digits
        return f"malformed JSON: {error}"
    except RecursionError:
        return "malformed JSON: nested too deeply"
    return message if isinstance(message, dict) else "a message must be a JSON object"


def validation_detail(error: RequestValidationError) -> list[dict]:
    """FastAPI's 422 detail without the `input` it echoes, which may be the whole (large) body."""
    def message(item: dict) -> str:
        cause = item.get("ctx", {}).get("error")
        return f"{item['msg']}: {cause}" if isinstance(cause, str) else item["msg"]

    return [{"loc": list(item["loc"]), "msg": message(item), "type": item["type"]} for item in error.errors()]


async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": validation_detail(error)}, status_code=422)


# ---------------------------------------------------------------- running rewrites

def rewrite_events(assistant, request: RewriteRequest, cancel: threading.Event):
    """The engine's events for one rewrite request."""
    return assistant.rewrite(request.document, request.instruction, strategy=request.strategy,
                             temperature=request.temperature, max_new_tokens=request.max_new_tokens,
                             language=request.language, cancel=cancel)


# ---------------------------------------------------------------- the websocket's side

async def send_error(websocket: WebSocket, message: str) -> None:
    await websocket.send_json({"type": "error", "message": message})


async def json_messages(websocket: WebSocket) -> AsyncIterator[dict]:
    """The connection's messages as JSON objects, until it closes; any other frame gets an error answer."""
    while (frame := await websocket.receive())["type"] != "websocket.disconnect":
        if frame.get("text") is None:
            message = "binary frames are not accepted: send the request as JSON text"
        else:
            message = parse_message(frame["text"])
        if isinstance(message, str):
            await send_error(websocket, message)
        else:
            yield message


def rewrite_request(message: dict, busy: bool, model: aio.Loader) -> RewriteRequest | str:
    """The rewrite a websocket message asks for, or the error message that answers it."""
    kind = message.pop("type", "rewrite")
    if kind != "rewrite":
        return f"unknown message type {kind!r}: send a rewrite request or {{\"type\": \"cancel\"}}"
    if busy:
        return "a rewrite is already running on this connection; wait for it or cancel it"
    try:
        request = RewriteRequest.model_validate(message)
    except ValidationError as error:
        return validation_message(error)
    if model.loaded() is None:
        return load_error(model) or STILL_LOADING
    return request


async def stream(websocket: WebSocket, generations: Generations, assistant, request: RewriteRequest,
                 cancel: threading.Event) -> None:
    """Send one rewrite's events as they come."""
    strategy = request.strategy or assistant.strategy
    try:
        async for event in generations.events(lambda: rewrite_events(assistant, request, cancel), cancel):
            if isinstance(event, Result):
                messages = [done_message(event, request, strategy)]
            elif isinstance(event, BaseException):
                messages = [{"type": "error", "message": failure_message(event)}]
            else:
                messages = event_messages(event)
            for message in messages:
                await websocket.send_json(message)
            if messages and messages[-1]["type"] in ("done", "error"):
                return  # the socket is free for its next request while the engine tidies up
    except Busy as error:
        await send_error(websocket, str(error))
    except (WebSocketDisconnect, RuntimeError):  # the client went away: stop generating
        cancel.set()


# ---------------------------------------------------------------- dependencies
# async, though they never wait: FastAPI runs a plain `def` dependency on a pool thread per request.

async def runs(connection: HTTPConnection) -> Generations:
    return connection.app.state.generations


Model = Annotated[aio.Loader, Depends(model)]
Runs = Annotated[Generations, Depends(runs)]


async def loaded_assistant(model: Model) -> Engine:
    """The loaded assistant; 503 while it loads or when it failed to load."""
    return loaded(model)


LoadedAssistant = Annotated[Engine, Depends(loaded_assistant)]


# ---------------------------------------------------------------- endpoints

router = APIRouter()


@router.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@router.get("/healthz", response_model=Health)
async def healthz(request: Request, model: Model) -> Health:
    """Whether the model has loaded (or why it could not). Runs on the event loop, never waiting for a thread."""
    assistant = model.loaded()
    return Health(model_loaded=assistant is not None, model=request.app.state.model_name, error=load_error(model),
                  strategies=list(STRATEGIES), default_strategy=getattr(assistant, "strategy", None),
                  languages=list(CHECKED_LANGUAGES))


@router.get("/api/samples", response_model=list[Sample])
def samples(request: Request) -> list[Sample]:
    """A few documents to try, with an instruction each."""
    return list(request.app.state.samples)


@router.post("/api/rewrite", response_model=RewriteResponse, responses={400: {}, 403: {}, 413: {}, 500: {}, 503: {}})
async def rewrite(body: RewriteRequest, request: Request, assistant: LoadedAssistant, generations: Runs) -> dict:
    """Run a rewrite to the end and return the result (the websocket streams the same thing).
    A client that disconnects cancels its rewrite."""
    cancel = threading.Event()
    watcher = asyncio.create_task(cancel_on_disconnect(request, cancel))
    try:
        async for event in generations.events(lambda: rewrite_events(assistant, body, cancel), cancel):
            if isinstance(event, BaseException):
                raise HTTPException(400 if isinstance(event, RewriteError) else 500, failure_message(event))
            if isinstance(event, Result):
                return done_message(event, body, body.strategy or assistant.strategy)
    except Busy as error:
        raise HTTPException(503, str(error))
    finally:
        cancel.set()
        watcher.cancel()
    raise HTTPException(500, "the engine ended without a result")


@router.websocket("/ws/rewrite")
async def rewrite_socket(websocket: WebSocket, model: Model, generations: Runs) -> None:
    """Rewrites streamed as they run, one at a time per connection; `{"type": "cancel"}` stops the running one,
    and so does a disconnect."""
    await websocket.accept()
    running: asyncio.Task | None = None
    cancel = threading.Event()
    try:
        async for message in json_messages(websocket):
            busy = running is not None and not running.done()
            if message.get("type") == "cancel":
                if busy:
                    cancel.set()
            elif isinstance(request := rewrite_request(message, busy, model), str):
                await send_error(websocket, request)
            else:
                cancel = threading.Event()
                running = asyncio.create_task(stream(websocket, generations, model.result(), request, cancel))
    except WebSocketDisconnect:
        pass
    finally:
        cancel.set()
        if running is not None:
            await running


# ---------------------------------------------------------------- the app

def create_app(assistant_factory: Callable[[], Engine], model_name: str = "",
               max_generations: int = MAX_GENERATIONS, samples: tuple[Sample, ...] = ()) -> FastAPI:
    """The playground app; `assistant_factory` builds the Assistant (called once, in a background thread);
    `samples` are offered beside the built-in ones (the command passes records of the bench data)."""
    app = FastAPI(title="Editor assistant playground", version="0.1.0", lifespan=lifespan,
                  description="Instruction-driven rewrites with PLD+ decoding and copy attribution.",
                  max_body_size=MAX_BODY_BYTES)
    app.state.assistant_factory, app.state.model_name = assistant_factory, model_name
    app.state.samples = BUILT_IN_SAMPLES + tuple(samples)
    app.state.model, app.state.generations = aio.Loader(), Generations(max_generations)
    app.add_middleware(GuardHostAndOrigin)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def server_config(app: FastAPI, host: str, port: int, **options) -> uvicorn.Config:
    """uvicorn's settings for the playground (`http/server.py`): a websocket message bounded like a body."""
    return server.server_config(app, host, port, MAX_BODY_BYTES, **options)
