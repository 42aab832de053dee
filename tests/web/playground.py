"""Helpers for the playground tests: a real uvicorn server on loopback, and a fake assistant for the
tests where the model's skill does not matter (queueing, cancelling, load), so they stay quick on 2 cores.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import uvicorn

from assistant.checks import Check, Problem
from assistant.engine.assistant import TurnQueue
from assistant.engine.contract import Request, check_request
from assistant.engine.events import Delta, Queued, Repair, Repairing, Result, Stats
from assistant.engine.output import Span, merge_spans
from assistant.web.app import server_config


@contextmanager
def serve(app):
    """Run `app` under a real uvicorn on a free 127.0.0.1 port until the model has loaded; yields host:port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(server_config(app, "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 60
        while not server.started:
            assert time.time() < deadline and thread.is_alive(), "the server did not start"
            time.sleep(0.05)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            wait_loaded(http.get)
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def wait_loaded(get) -> None:
    """Poll /healthz through `get` (an HTTP client's) until the model has loaded."""
    deadline = time.time() + 120
    while not get("/healthz").json()["model_loaded"]:
        assert time.time() < deadline, "the model did not load"
        time.sleep(0.1)


class FakeAssistant:
    """Copies the document back `chars` characters per step, every other piece attributed to where it came
    from (offsets in code points, as the engine's); one generation at a time, in arrival order, through the
    engine's own TurnQueue. `fail_after` steps it raises, as a broken engine would. Asked for a `language`,
    it checks the answer as the engine does: it finds `problems` (offsets in the answer) and, when there
    are some, announces a repair pass (`Repairing`) that lasts until `repaired` is set, and keeps them,
    with `repairs` as the Result's. A finished answer's `change` is `change` ("edit" unless a test says
    otherwise); each request's `max_new_tokens` is noted in `asked`."""

    strategy = "pld"

    def __init__(self, chars: int = 4, step_seconds: float = 0.01, fail_after: int | None = None,
                 problems: tuple[Problem, ...] = (), repairs: tuple[Repair, ...] = (), change: str = "edit"):
        self.chars, self.step_seconds, self.fail_after, self.problems = chars, step_seconds, fail_after, problems
        self.repairs, self.change = repairs, change
        self.asked: list[int | None] = []  # each request's max_new_tokens
        self.repaired = threading.Event()
        self.turns = TurnQueue()
        self.lock = threading.Lock()
        self.running = 0  # generations started and not yet ended
        self.stopped: list[str] = []  # how each generation ended, in order

    def rewrite(self, document: str, instruction: str, *, strategy=None, temperature=0.0, max_new_tokens=None,
                language=None, cancel: threading.Event | None = None):
        check_request(Request(document, instruction))
        self.asked.append(max_new_tokens)
        return self._run(document, max_new_tokens or 10_000, cancel, language)

    def close(self) -> None:  # no background work to stop
        pass

    def _run(self, document: str, max_steps: int, cancel: threading.Event | None, language: str | None = None):
        ticket = object()
        with self.lock:
            self.running += 1
        stopped = "cancelled"
        try:
            for ahead in self.turns.wait(ticket, cancel):
                yield Queued(ahead)
            spans: list[Span] = []
            stopped = "length"
            for step in range(max_steps):
                if cancel is not None and cancel.is_set():
                    stopped = "cancelled"
                    break
                if step == self.fail_after:
                    raise RuntimeError("the fake engine broke")
                time.sleep(self.step_seconds)
                a, b = step * self.chars, min(len(document), (step + 1) * self.chars)
                spans.append(Span((a, b), (a, b) if step % 2 == 0 else None))  # copied, then generated
                yield Delta(document[a:b], spans[-1:], 1, 1, 0, self.step_seconds)
                if b == len(document):
                    stopped = "eos"
                    break
            text = document[:spans[-1].output[1]] if spans else ""
            stats = Stats(len(spans), len(spans), self.step_seconds * len(spans), 10, len(spans), 0, 0.0)
            check = self._check(language) if stopped == "eos" else None
            if check is not None and check.problems:
                yield Repairing(check.problems, 1)
                self.repaired.wait(timeout=60)
            yield Result(text, merge_spans(spans), stats, stopped, "fake", "float32", spans, check=check,
                         repairs=self.repairs if check is not None else (),
                         change=self.change if stopped == "eos" else None)
        finally:
            time.sleep(self.step_seconds)  # like the engine, it takes a moment to let go after its Result
            self.turns.leave(ticket)
            with self.lock:
                self.running -= 1
                self.stopped.append(stopped)

    def _check(self, language: str | None) -> Check:
        if language is None:
            return Check(notes=("unchecked: prose or an unknown language",))
        return Check(self.problems, ran=("fake",))


async def receive(ws) -> dict:
    """The next websocket message as JSON; a server that falls silent fails the test instead of hanging it."""
    return json.loads(await asyncio.wait_for(ws.recv(), timeout=120))


async def until(ws, *kinds) -> list[dict]:
    """Messages up to and including the first of one of `kinds`."""
    messages = []
    while not messages or messages[-1]["type"] not in kinds:
        messages.append(await receive(ws))
    return messages
