"""A local, private editor assistant: rewrites a document on an instruction with PLD+ decoding
and says where each output token was copied from.

The public API is the engine contract (engine/contract.py: `Request`, the `Engine` protocol, the checks
and errors), the events (engine/events.py) and the two engines. `Assistant` (a model loaded here) and
`RemoteAssistant` (a server at a URL) are imported on first use, so `import assistant` and a door that
talks to a remote engine load no torch.
"""

import importlib

from assistant import config

config.wait_politely()  # before the engine imports torch, whose OpenMP runtime reads it once

from assistant.engine.contract import (  # noqa: E402 - after wait_politely, like everything below
    DEFAULT_REPAIRS,
    DEFAULT_STRATEGY,
    STRATEGIES,
    Engine,
    RemoteError,
    Request,
    RewriteError,
    check_instruction,
    check_request,
    check_strategy,
    result_of,
)
from assistant.engine.events import Delta, Event, Queued, Repair, Repairing, Result, Stats, problem_json  # noqa: E402
from assistant.engine.output import Span  # noqa: E402
from assistant.errors import ModelError  # noqa: E402

ENGINES = {"Assistant": "assistant.engine.assistant", "RemoteAssistant": "assistant.engine.remote"}

__all__ = ["DEFAULT_REPAIRS", "DEFAULT_STRATEGY", "STRATEGIES", "Assistant", "Delta", "Engine", "Event", "ModelError",
           "Queued", "RemoteAssistant", "RemoteError", "Repair", "Repairing", "Request", "Result", "RewriteError",
           "Span", "Stats", "check_instruction", "check_request", "check_strategy", "problem_json", "result_of"]


def __getattr__(name: str):
    """`Assistant` and `RemoteAssistant`, imported when first asked for."""
    if name in ENGINES:
        return getattr(importlib.import_module(ENGINES[name]), name)
    raise AttributeError(f"module 'assistant' has no attribute {name!r}")
