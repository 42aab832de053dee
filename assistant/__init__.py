"""A local, private editor assistant: rewrites a document on an instruction with PLD+ decoding
and says where each output token was copied from."""

from .engine import STRATEGIES, Assistant, Delta, Queued, Result, RewriteError, Stats
from .models import ModelError
from .output import Span

__all__ = ["Assistant", "Delta", "ModelError", "Queued", "Result", "RewriteError", "STRATEGIES", "Span", "Stats"]
