"""The language server warms a buffer left idle (Assistant.warm), once per pause in typing, and stops
warming a buffer that changes or closes."""

from __future__ import annotations

import asyncio
import threading

from assistant.lsp import server


class Engine:
    def __init__(self):
        self.warmed: list[str] = []
        self.cancels: list[threading.Event] = []

    def warm(self, text: str, cancel: threading.Event) -> int:
        self.warmed.append(text)
        self.cancels.append(cancel)
        return len(text)


class Document:
    def __init__(self, text):
        self.source = text


class Workspace:
    def get_text_document(self, uri: str) -> Document:
        return Document(f"text of {uri}")  # what the editor last sent


def served(engine: Engine, monkeypatch) -> server.AssistantServer:
    monkeypatch.setattr(server.AssistantServer, "workspace", property(lambda self: Workspace()))
    ls = server.AssistantServer()
    ls.engine.set_result(engine)
    return ls


async def test_a_buffer_is_warmed_once_after_typing_pauses(monkeypatch):
    monkeypatch.setattr(server, "WARM_AFTER", 0.05)
    engine = Engine()
    ls = served(engine, monkeypatch)
    for _ in range(5):  # typing: each change restarts the wait
        server.warm_when_idle(ls, "file:///a.py")
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    assert engine.warmed == ["text of file:///a.py"]


async def test_closing_or_changing_a_buffer_cancels_its_warm_up(monkeypatch):
    monkeypatch.setattr(server, "WARM_AFTER", 0.05)
    engine = Engine()
    ls = served(engine, monkeypatch)
    server.warm_when_idle(ls, "file:///a.py")
    server.stop_warming(ls, "file:///a.py")  # closed before the pause ended
    await asyncio.sleep(0.2)
    assert engine.warmed == []
    server.warm_when_idle(ls, "file:///b.py")
    await asyncio.sleep(0.2)
    server.warm_when_idle(ls, "file:///b.py")  # typed again while the warm-up runs
    assert engine.cancels[0].is_set()


async def test_nothing_is_warmed_before_the_model_has_loaded(monkeypatch):
    monkeypatch.setattr(server, "WARM_AFTER", 0.01)
    ls = server.AssistantServer()
    server.warm_when_idle(ls, "file:///a.py")
    await asyncio.sleep(0.05)
    assert ls.warming == {}
