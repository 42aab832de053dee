"""A local, private editor assistant: rewrites a document on an instruction with PLD+ decoding
and says where each output token was copied from."""

from .engine import STRATEGIES, Assistant, Request, RewriteError, check_instruction, check_strategy
from .events import Delta, Queued, Result, Stats
from .models import ModelError
from .output import Span

__all__ = ["Assistant", "Delta", "ModelError", "Queued", "Request", "Result", "RewriteError", "STRATEGIES", "Span",
           "Stats", "check_instruction", "check_strategy"]
