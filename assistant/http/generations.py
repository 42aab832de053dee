"""The generations an HTTP door runs: each on a thread of its own, at most a limit at once, each cancelled
when its client goes away or the server stops.

Invariant: no door holds more than its limit of generations (each a thread) at once; past it a request
is refused (`Busy`), never queued without bound. Once the server stops, every running generation is
cancelled (it ends at its next decoding step) and new ones are refused, so no answer holds the server open.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator

from starlette.requests import Request

from assistant import Event
from assistant.engine import aio

MAX_GENERATIONS = 64  # generations running or waiting for the model (each holds a thread); more are refused
STOPPING = "the server is shutting down; the answer so far is unfinished"


class Busy(Exception):
    """Too many generations are already running or waiting, or the server is stopping; the client should try
    again later."""


class Generations:
    """Starts each generation on its own thread, at most `limit` at once, so a flood is refused rather
    than piling up threads; the engine runs them one at a time in arrival order."""

    def __init__(self, limit: int = MAX_GENERATIONS):
        self.slots = threading.BoundedSemaphore(limit)
        self.limit = limit
        self.stopped = False
        self._cancels: list[threading.Event] = []  # one per generation started and not yet let go
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        """Generations started (running or waiting their turn) and not yet let go by the engine."""
        return len(self._cancels)

    def events(self, start: Callable[[], Iterator[Event]], cancel: threading.Event) -> AsyncIterator:
        """The events of `start()` (called on the worker thread, so a request's tokenizing stays off the loop),
        on the event loop; an exception comes as an item. Raises Busy when full or stopped."""
        with self._lock:
            if self.stopped:
                raise Busy(STOPPING)
            if not self.slots.acquire(blocking=False):
                raise Busy(f"the server is busy: {self.limit} requests are already running or waiting; "
                           f"try again later")
            self._cancels.append(cancel)
        return aio.events(self._run(start, cancel), cancel)

    def stop(self) -> None:
        """The server stops: cancel every running generation and refuse new ones."""
        with self._lock:
            self.stopped = True
            for cancel in self._cancels:
                cancel.set()

    def _run(self, start: Callable[[], Iterator[Event]], cancel: threading.Event):
        """The generation, its slot free once the engine lets go."""
        try:
            yield from start()
        finally:
            with self._lock:
                self._cancels.remove(cancel)
            self.slots.release()


async def cancel_on_disconnect(request: Request, cancel: threading.Event) -> None:
    """Waits for the HTTP client to go away (the body is read by now), then cancels its generation."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    cancel.set()
