"""A local, private editor assistant: rewrites a document on an instruction with PLD+ decoding
and says where each output token was copied from."""

from assistant import config

config.wait_politely()  # before the engine imports torch, whose OpenMP runtime reads it once

from assistant.engine.assistant import STRATEGIES, Assistant, Request, RewriteError, check_instruction, check_strategy
from assistant.engine.events import Delta, Queued, Repair, Repairing, Result, Stats
from assistant.engine.output import Span
from assistant.model.loading import ModelError

__all__ = ["Assistant", "Delta", "ModelError", "Queued", "Repair", "Repairing", "Request", "Result", "RewriteError",
           "STRATEGIES", "Span", "Stats", "check_instruction", "check_strategy"]
