"""What the engine's check found reaches the playground's clients: a repair pass is announced on the
websocket (`repairing`), and every answer carries its problems (offsets and line in its text), the checks
that ran or why none did, its repair passes, and whether it changed anything (an answer that made no edit
says "no change made"), over the websocket and over HTTP alike. A real uvicorn
on 127.0.0.1, a fake assistant that checks as the engine does."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from playground import FakeAssistant, receive, serve, until

from assistant.checks import Problem
from assistant.web.app import create_app

DOCUMENT = "def add(a, b):\n    return plus(a, b)\n"
PROBLEM = Problem("undefined name `plus`", 26, 30, "F821", "ruff")
RUN = {"document": DOCUMENT, "instruction": "Copy it.", "language": "python"}


@pytest.fixture
def fake():
    return FakeAssistant(chars=8, step_seconds=0.0, problems=(PROBLEM,))


@pytest.fixture
def server(fake):
    with serve(create_app(lambda: fake, "fake")) as address:
        yield address


def test_a_repair_pass_is_announced_and_the_problems_left_come_with_the_answer(server, fake):
    async def main():
        async with websockets.connect(f"ws://{server}/ws/rewrite") as ws:
            await ws.send(json.dumps(RUN))
            repairing = (await until(ws, "repairing"))[-1]
            fake.repaired.set()
            done = await receive(ws)
        return repairing, done
    repairing, done = asyncio.run(main())
    assert repairing == {"type": "repairing", "attempt": 1, "problems": [PROBLEM.to_json()]}
    assert done["type"] == "done" and done["text"] == DOCUMENT
    assert done["problems"] == [PROBLEM.to_json() | {"line": 1, "character": 11}]
    assert done["checks"]["ran"] == ["fake"] and done["repairs"] == []


def test_http_answers_carry_the_problems_too(server, fake):
    fake.repaired.set()
    with httpx.Client(base_url=f"http://{server}", timeout=60) as http:
        answer = http.post("/api/rewrite", json=RUN).json()
        plain = http.post("/api/rewrite", json={**RUN, "language": None}).json()
    assert answer["problems"] == [PROBLEM.to_json() | {"line": 1, "character": 11}]
    assert answer["checks"]["ran"] == ["fake"]
    assert (plain["problems"], plain["checks"]["ran"]) == ([], [])
    assert plain["checks"]["notes"] == ["unchecked: prose or an unknown language"]


def test_the_page_learns_the_languages_it_can_check(server):
    with httpx.Client(base_url=f"http://{server}") as http:
        languages = http.get("/healthz").json()["languages"]
        samples = http.get("/api/samples").json()
    assert "python" in languages and "javascript" in languages and "json" in languages and "toml" in languages
    assert {s["id"]: s["language"] for s in samples}["python-rename"] == "python"


def test_a_language_is_read_as_the_engine_reads_it(server, fake):
    """A file name's language or an alias counts; one the checks do not know leaves the answer unchecked."""
    fake.repaired.set()
    with httpx.Client(base_url=f"http://{server}", timeout=60) as http:
        checked = http.post("/api/rewrite", json={**RUN, "language": "PYTHON"}).json()
        unknown = http.post("/api/rewrite", json={**RUN, "language": "klingon"}).json()
    assert checked["checks"]["ran"] == ["fake"] and unknown["checks"]["ran"] == []


@pytest.mark.parametrize("change, note", [("comments", "no change made: only comments changed"),
                                          ("none", "no change made: the answer is the text as it was"),
                                          ("edit", None)])
def test_an_answer_that_made_no_edit_says_no_change_made(change, note):
    fake = FakeAssistant(chars=8, step_seconds=0.0, change=change)
    with serve(create_app(lambda: fake, "fake")) as address:
        async def streamed():
            async with websockets.connect(f"ws://{address}/ws/rewrite") as ws:
                await ws.send(json.dumps({**RUN, "language": None}))
                return (await until(ws, "done"))[-1]
        done = asyncio.run(streamed())
        with httpx.Client(base_url=f"http://{address}", timeout=60) as http:
            answer = http.post("/api/rewrite", json={**RUN, "language": None}).json()
    for message in (done, answer):
        assert message["complete"] and (message["change"], message["unchanged"], message["note"]) == (
            change, note is not None, note)
