"""`assistant lsp` over stdio with a scripted engine instead of a model, for answers a model would not
give on demand: the instruction is a JSON script, `{"streamed": ..., "final": ..., "problems": [[start,
end, message], ...]}`; the engine streams `streamed`, announces a repair of `problems`, and keeps
`final` (the problems' offsets index it), as the engine does when a repair pass rewrites its answer; the
result's `change` is the script's (`Result.change`: "none", "layout", "comments", "edit"), if it has one."""

from __future__ import annotations

import json
from dataclasses import dataclass

from assistant import Delta, Repairing, Result
from assistant.checks import Check, Problem
from assistant.engine.events import NOTHING
from assistant.lsp.server import server


@dataclass(frozen=True)
class Loaded:
    context_length: int = 4096


class Scripted:
    model = "scripted"
    loaded = Loaded()

    def rewrite(self, document: str, instruction: str, **options):
        script = json.loads(instruction)
        problems = tuple(Problem(message, start, end, "F821", "ruff") for start, end, message in script["problems"])
        yield Delta(script["streamed"], [], 1, 0, 0, 0.0)
        yield Repairing(problems, 1)
        yield Result(script["final"], [], NOTHING, "eos", self.model, "none", check=Check(problems, ("ruff",)),
                     change=script.get("change"))

    def warm(self, text: str, cancel) -> int:
        return 0


if __name__ == "__main__":
    server.load(Scripted)
    server.start_io()
