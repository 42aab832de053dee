"""The web playground: a FastAPI app that streams rewrites over a websocket and serves a static page.

    assistant web --port 8000      # then open http://127.0.0.1:8000/
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any, Callable, Literal
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from assistant import STRATEGIES, Delta, Queued, Result, RewriteError

STATIC = Path(__file__).parent / "static"
MAX_DOCUMENT_CHARS = 200_000
MAX_INSTRUCTION_CHARS = 10_000
MAX_NEW_TOKENS = 4096
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


# ---------------------------------------------------------------- request and response models

class RewriteRequest(BaseModel):
    """One rewrite: the document, what to change, and how to decode."""

    model_config = ConfigDict(strict=True, extra="forbid")

    document: str = Field(max_length=MAX_DOCUMENT_CHARS, description="the text to rewrite")
    instruction: str = Field(max_length=MAX_INSTRUCTION_CHARS, description="what to change")
    strategy: str | None = Field(None, description=f"one of {', '.join(STRATEGIES)}; the server default when left out")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 decodes greedily")
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS,
                                       description="the most tokens to generate; about twice the document when left out")

    @field_validator("strategy")
    @classmethod
    def known_strategy(cls, value: str | None) -> str | None:
        if value is not None and value not in STRATEGIES:
            raise ValueError(f"unknown strategy {value!r}: use one of {', '.join(STRATEGIES)}")
        return value


class SpanModel(BaseModel):
    output: tuple[int, int] = Field(description="character range in the output text")
    source: tuple[int, int] | None = Field(description="character range in the document it was copied from")


class RewriteResponse(BaseModel):
    type: Literal["done"] = "done"
    text: str
    spans: list[SpanModel]
    stats: dict[str, float | int]
    stopped: str = Field(description="eos, length, stop or cancelled")
    strategy: str


class Health(BaseModel):
    model_loaded: bool
    model: str
    error: str | None
    strategies: list[str]
    default_strategy: str | None


class Sample(BaseModel):
    id: str
    task: str
    instruction: str
    document: str


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


def origin_allowed(origin: str | None, host: str | None) -> bool:
    """Browsers send Origin; a page from another site must not drive the local model."""
    if not origin:
        return True  # scripts and command-line clients
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https"):
        return False
    return parts.netloc == (host or "") or (parts.hostname or "") in LOCAL_HOSTS


def sample_documents() -> list[Sample]:
    samples = [
        Sample(id="python-rename", task="code-edit", instruction="Rename the function `add` to `plus`.",
               document="def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b\n\n\n"
                        "print(add(2, 3))\n"),
        Sample(id="email-polite", task="text-edit", instruction="Fix the spelling mistakes.",
               document="Hi Sam,\n\nThanks for the quick reply. I have attached the reprot you asked for; "
                        "the numbers for March are on page two.\n\nBest,\nAlex\n"),
    ]
    try:
        from assistant import data
        for task in ("code-edit", "text-edit"):
            for record in data.load(task)[:2]:
                samples.append(Sample(id=record.id, task=task, instruction=record.instruction,
                                      document=record.document))
    except Exception:  # the benchmark data is optional for the playground
        pass
    return samples


class ModelHolder:
    """Loads the assistant once, in a background thread, so the server answers at once."""

    def __init__(self, factory: Callable[[], Any], name: str):
        self.factory, self.name = factory, name
        self.assistant = None
        self.error: str | None = None
        self.ready = threading.Event()

    def load(self) -> None:
        try:
            self.assistant = self.factory()
        except Exception as error:  # ModelError and friends: /healthz reports it
            self.error = f"{type(error).__name__}: {error}"
        finally:
            self.ready.set()

    def require(self):
        if self.assistant is None:
            raise HTTPException(503, self.error or "the model is still loading; try again in a moment")
        return self.assistant


def start_rewrite(assistant, request: RewriteRequest, cancel: threading.Event | None):
    return assistant.rewrite(request.document, request.instruction, strategy=request.strategy,
                             temperature=request.temperature, max_new_tokens=request.max_new_tokens, cancel=cancel)


def done_message(result: Result, strategy: str) -> dict:
    return {"type": "done", **result.to_json(), "strategy": strategy}


def event_messages(event) -> list[dict]:
    if isinstance(event, Queued):
        return [{"type": "queued", "ahead": event.ahead}]
    if isinstance(event, Delta):
        messages = [{"type": "delta", "text": event.text, "tokens": [span_json(s) for s in event.tokens]}]
        if event.new_tokens:
            messages.append({"type": "step", "new_tokens": event.new_tokens, "drafted": event.drafted,
                             "accepted": event.accepted, "seconds": round(event.seconds, 5)})
        return messages
    return []


def pump(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, assistant, request: RewriteRequest,
         cancel: threading.Event) -> None:
    """Runs in a worker thread: drives the engine and hands every event to the event loop."""
    def put(item) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, item)

    try:
        with closing(start_rewrite(assistant, request, cancel)) as events:
            for event in events:
                put(event)
    except Exception as error:
        put(error)
    finally:
        put(None)


# ---------------------------------------------------------------- the app

def create_app(assistant_factory: Callable[[], Any], model_name: str = "") -> FastAPI:
    """The playground app; `assistant_factory` builds the Assistant (called once, in a background thread)."""
    holder = ModelHolder(assistant_factory, model_name)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        threading.Thread(target=holder.load, name="model-load", daemon=True).start()
        yield

    app = FastAPI(title="Editor assistant playground", version="0.1.0", lifespan=lifespan,
                  description="Instruction-driven rewrites with PLD+ decoding and copy attribution.")
    app.state.holder = holder

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/healthz", response_model=Health)
    def healthz() -> Health:
        """Whether the model has loaded (or why it could not)."""
        assistant = holder.assistant
        return Health(model_loaded=assistant is not None, model=holder.name, error=holder.error,
                      strategies=list(STRATEGIES), default_strategy=getattr(assistant, "strategy", None))

    @app.get("/api/samples", response_model=list[Sample])
    def samples() -> list[Sample]:
        """A few documents to try, with an instruction each."""
        return sample_documents()

    @app.post("/api/rewrite", response_model=RewriteResponse, responses={400: {}, 503: {}})
    def rewrite(request: RewriteRequest) -> dict:
        """Run a rewrite to the end and return the result (the websocket streams the same thing)."""
        assistant = holder.require()
        try:
            events = start_rewrite(assistant, request, None)
        except RewriteError as error:
            raise HTTPException(400, str(error))
        with closing(events):
            for event in events:
                if isinstance(event, Result):
                    return done_message(event, request.strategy or assistant.strategy)
        raise HTTPException(500, "the engine ended without a result")

    @app.websocket("/ws/rewrite")
    async def rewrite_socket(websocket: WebSocket) -> None:
        if not origin_allowed(websocket.headers.get("origin"), websocket.headers.get("host")):
            await websocket.close(code=1008, reason="origin not allowed")
            return
        await websocket.accept()
        running: asyncio.Task | None = None
        cancel = threading.Event()

        async def send_error(message: str) -> None:
            await websocket.send_json({"type": "error", "message": message})

        async def stream(request: RewriteRequest, cancel: threading.Event, assistant) -> None:
            loop = asyncio.get_running_loop()
            queue: asyncio.Queue = asyncio.Queue()
            thread = threading.Thread(target=pump, args=(loop, queue, assistant, request, cancel), daemon=True)
            thread.start()
            strategy = request.strategy or assistant.strategy
            connected = True
            while (event := await queue.get()) is not None:
                if not connected:
                    continue  # drain until the worker has stopped
                if isinstance(event, Result):
                    messages = [done_message(event, strategy)]
                elif isinstance(event, RewriteError):
                    messages = [{"type": "error", "message": str(event)}]
                elif isinstance(event, Exception):
                    messages = [{"type": "error", "message": f"{type(event).__name__}: {event}"}]
                else:
                    messages = event_messages(event)
                try:
                    for message in messages:
                        await websocket.send_json(message)
                except Exception:  # the client went away: stop generating
                    connected = False
                    cancel.set()

        try:
            while True:
                raw = await websocket.receive_text()
                try:
                    message = json.loads(raw)
                except json.JSONDecodeError as error:
                    await send_error(f"malformed JSON: {error}")
                    continue
                if not isinstance(message, dict):
                    await send_error("a message must be a JSON object")
                    continue
                kind = message.pop("type", "rewrite")
                is_running = running is not None and not running.done()
                if kind == "cancel":
                    if is_running:
                        cancel.set()
                    continue
                if kind != "rewrite":
                    await send_error(f"unknown message type {kind!r}: send a rewrite request or {{\"type\": \"cancel\"}}")
                    continue
                if is_running:
                    await send_error("a rewrite is already running on this connection; wait for it or cancel it")
                    continue
                try:
                    request = RewriteRequest.model_validate(message)
                except ValidationError as error:
                    await send_error(validation_message(error))
                    continue
                if holder.assistant is None:
                    await send_error(holder.error or "the model is still loading; try again in a moment")
                    continue
                cancel = threading.Event()
                running = asyncio.create_task(stream(request, cancel, holder.assistant))
        except WebSocketDisconnect:
            pass
        finally:
            cancel.set()  # a disconnect cancels the generation
            if running is not None:
                await running

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


# ---------------------------------------------------------------- the `assistant web` command

def register(commands) -> None:
    from assistant.cli import add_model_options

    parser = commands.add_parser("web", help="serve the web playground", description="Serve the web playground.")
    add_model_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from assistant import Assistant

    def factory():
        return Assistant(args.model, strategy=args.strategy, weights=args.weights, device=args.device)

    print(f"assistant web: open http://{args.host}:{args.port}/ (the model loads in the background)")
    uvicorn.run(create_app(factory, args.model), host=args.host, port=args.port)
    return 0
