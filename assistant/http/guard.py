"""What the two HTTP front doors (the playground, `web/`, and the OpenAI-compatible server, `serve/`)
share: the Host and Origin guard, the bounded pool of running generations, and the model dependency.

Invariant: a request from a foreign Host or Origin never reaches an app, and no door holds more than
its limit of generations (each a thread) at once; past it a request is refused (`Busy`), never queued
without bound.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection, Request

from assistant import Engine, Event
from assistant.engine import aio

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}
STILL_LOADING = "the model is still loading; try again in a moment"


# ---------------------------------------------------------------- the guard

def host_allowed(host: str | None, server: tuple | None) -> bool:
    """DNS rebinding: a page from another site may resolve its own name to this machine, so the
    Host header must name the address the connection came in on (or localhost, on a loopback one)."""
    name = urlsplit(f"//{host}").hostname if host else None
    if not name:
        return False
    local = str(server[0]).lower() if server else "127.0.0.1"  # no address (a unix socket): local names only
    try:
        address = ipaddress.ip_address(local)
    except ValueError:  # a test client's made-up server name
        return name == local
    if address.version == 6 and address.ipv4_mapped:  # an IPv4 connection to a dual-stack ("::") socket
        address = address.ipv4_mapped
    return name in (local, str(address)) or (address.is_loopback and name in LOCAL_HOSTS)


def origin_allowed(origin: str | None, host: str | None) -> bool:
    """Browsers send Origin; a page from another site must not drive the local model."""
    if not origin:
        return True  # scripts and command-line clients
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https"):
        return False
    return parts.netloc == (host or "") or (parts.hostname or "") in LOCAL_HOSTS


def refusal(scope) -> str | None:
    """Why a request must not reach the app: a foreign Host or Origin; None when it may."""
    headers = Headers(scope=scope)
    host = headers.get("host")
    if not host_allowed(host, scope.get("server")):
        return f"host {host!r} is not this server's address: open it by its address or as localhost"
    if not origin_allowed(headers.get("origin"), host):
        return f"origin {headers.get('origin')!r} is not allowed: use a page served by this server"
    return None


class GuardHostAndOrigin:
    """ASGI middleware: refuses a foreign Host or Origin on HTTP and websocket alike, before the app runs."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        problem = refusal(scope) if scope["type"] in ("http", "websocket") else None
        if problem is None:
            return await self.app(scope, receive, send)
        response = JSONResponse({"detail": problem}, status_code=403)
        if scope["type"] == "http" or "websocket.http.response" in scope.get("extensions", {}):
            await response(scope, receive, send)  # on a websocket: a 403 answer to the handshake
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": "host or origin not allowed"})


# ---------------------------------------------------------------- running generations

class Busy(Exception):
    """Too many generations are already running or waiting; the client should try again later."""


class Generations:
    """Starts each generation on its own thread, at most `limit` at once, so a flood is refused rather
    than piling up threads; the engine runs them one at a time in arrival order."""

    def __init__(self, limit: int):
        self.slots = threading.BoundedSemaphore(limit)
        self.limit = limit
        self._running = 0
        self._counting = threading.Lock()

    @property
    def running(self) -> int:
        """Generations started (running or waiting their turn) and not yet let go by the engine."""
        return self._running

    def events(self, start: Callable[[], Iterator[Event]], cancel: threading.Event) -> AsyncIterator:
        """The events of `start()` (called on the worker thread, so a request's tokenizing stays off the loop),
        on the event loop; an exception comes as an item. Raises Busy when full."""
        if not self.slots.acquire(blocking=False):
            raise Busy(f"the server is busy: {self.limit} requests are already running or waiting; try again later")
        with self._counting:
            self._running += 1
        return aio.events(self._run(start), cancel)

    def _run(self, start: Callable[[], Iterator[Event]]):
        """The generation, its slot free once the engine lets go."""
        try:
            yield from start()
        finally:
            with self._counting:
                self._running -= 1
            self.slots.release()


async def cancel_on_disconnect(request: Request, cancel: threading.Event) -> None:
    """Waits for the HTTP client to go away (the body is read by now), then cancels its generation."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    cancel.set()


# ---------------------------------------------------------------- the model

async def model(connection: HTTPConnection) -> aio.Loader:
    """The app's model, loading since the app started; a test may swap it (`app.dependency_overrides`).
    async, though it never waits: FastAPI runs a plain `def` dependency on a pool thread per request."""
    return connection.app.state.model


def load_error(model: aio.Loader) -> str | None:
    """Why the model failed to load; None while it loads or once it has."""
    error = model.exception() if model.done() else None
    return None if error is None else f"{type(error).__name__}: {error}"


def loaded(model: aio.Loader) -> Engine:
    """The loaded assistant; 503 while it loads or when it failed to load."""
    if (assistant := model.loaded()) is None:
        raise HTTPException(503, load_error(model) or STILL_LOADING)
    return assistant


@asynccontextmanager
async def lifespan(app: FastAPI):
    """The model (`app.state.model`, an `aio.Loader`) loads on a thread of its own while the server
    answers, and is closed when the server stops."""
    app.state.model.load(app.state.assistant_factory)
    yield
    if (assistant := app.state.model.loaded()) is not None:
        assistant.close()
