"""The engine as an asyncio front door sees it: the language server (`lsp/`) and the web playground
(`web/`) both answer on an event loop, while the engine blocks.

`Loader` loads the model on a thread of its own, so a door answers (`initialize`, `/healthz`) while it
loads; `events` iterates a rewrite's events on a thread of its own and yields them on the loop. Both
doors import these; nothing in the engine does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import closing

from assistant.engine.contract import Engine
from assistant.engine.events import Event


class Loader(concurrent.futures.Future):
    """The model once `load` has built it, or the error that stopped it; await it with
    `asyncio.wrap_future`, or ask `loaded()` without waiting."""

    def load(self, build: Callable[[], Engine]) -> None:
        def loading():
            try:
                self.set_result(build())
            except BaseException as error:  # noqa: BLE001 - any failure must reach the requests waiting on it
                self.set_exception(error)

        threading.Thread(target=loading, name="load-model", daemon=True).start()

    def loaded(self) -> Engine | None:
        """The model; None while it loads or when loading failed."""
        return self.result() if self.done() and self.exception() is None else None


def events(generation: Generator[Event], cancel: threading.Event) -> AsyncIterator[Event | BaseException]:
    """Start iterating `generation` on a worker thread now, and yield on the event loop what it yields;
    an exception it raises comes last, as an item. The thread closes `generation` when it ends, and sets
    `cancel` if the loop has closed meanwhile (the server is shutting down: nobody is listening). A
    consumer may stop early; the engine then finishes its tidying on that thread."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def put(item) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop has closed
            cancel.set()

    def pump() -> None:
        try:
            with closing(generation):
                for event in generation:
                    put(event)
        except BaseException as error:  # noqa: BLE001 - handed to the loop
            put(error)
        finally:
            put(None)

    async def received():
        while (item := await queue.get()) is not None:
            yield item

    threading.Thread(target=pump, name="rewrite", daemon=True).start()
    return received()
