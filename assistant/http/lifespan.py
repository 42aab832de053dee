"""The model of an HTTP door: it loads on a thread of its own while the server answers (`/health`,
`/healthz`), reached by the endpoints through a dependency, and closed when the server stops."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException
from starlette.requests import HTTPConnection

from assistant import Engine
from assistant.engine import aio

STILL_LOADING = "the model is still loading; try again in a moment"


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
