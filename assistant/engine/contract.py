"""The engine contract: what a door sends (`Request`), what it gets back (the events of `events.py`), the
errors it may meet, and the `Engine` protocol that the local engine (`engine.assistant.Assistant`) and the
remote client (`engine.remote.RemoteAssistant`) both implement, so every door runs on either unchanged.

Invariant: this module and what it imports load neither torch nor transformers, so a door that talks to
a remote engine starts without them. A request is checked once, by `check_request`, when an engine's
`run` receives it; what runs after that takes it as checked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Protocol

from assistant.engine.events import Event, Result
from assistant.errors import ModelError

STRATEGIES = ("ar", "pld", "pld+h", "pld+a")
DEFAULT_STRATEGY = "pld+h"
DEFAULT_REPAIRS = 2  # repair passes per answer at most, unless the engine or the request says otherwise
SEEDS = 2 ** 63  # a seed is a whole number in [0, SEEDS): what a 64-bit signed generator seed holds

__all__ = ["DEFAULT_REPAIRS", "DEFAULT_STRATEGY", "STRATEGIES", "Engine", "ModelError", "RemoteError", "Request",
           "RewriteError", "check_instruction", "check_repairs", "check_request", "check_strategy", "result_of"]


class RewriteError(ValueError):
    """A request the engine refuses; the message says what to change."""


class RemoteError(ModelError):
    """The engine's server failed: it is down, refused the key, stalled, errored, closed early or answered in
    a shape the protocol does not have."""


@dataclass(frozen=True)
class Request:
    """One rewrite: what to change in which text, and how to decode. A chat turn uses the fields from
    `strategy` on, its question standing as the document."""

    document: str
    instruction: str
    selection: tuple[int, int] | None = None  # a character range: rewrite only that, the rest is context
    references: tuple[str, ...] = ()  # other texts, shown read-only, that drafts may copy from
    strategy: str | None = None  # one of STRATEGIES; None: the engine's
    max_new_tokens: int | None = None  # per pass (per piece of a long document); None: the output budget
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()  # the answer ends before the first of these
    draft_tokens: int | None = None  # a fixed draft length; None: adaptive, up to the engine's draft ceiling
    max_piece_tokens: int | None = None  # a long document's pieces; None: as large as fits the context
    language: str | None = None  # an LSP languageId to check the answer as; None: unchecked
    repairs: int | None = None  # repair passes at most (0: none); None: the engine's
    by_definition: bool = True  # an edit asked of each definition is made one pass per definition (False: one pass)


class Engine(Protocol):
    """What every door uses of an engine, local or remote. `run` streams a request's events (Queued while it
    waits, a Delta per step, Repairing before a repair pass, one Result) and raises RewriteError for a bad
    request before anything runs; closing the iterator early releases the engine for the next request."""

    model: str  # the model's name
    weights: str  # the format of its linear layers ("remote" for a server's)
    strategy: str  # the drafting a request gets unless it names one

    @property
    def context_length(self) -> int:
        """The model's context, in tokens."""

    def run(self, request: Request, cancel: threading.Event | None = None) -> Iterator[Event]:
        """The request's events; a bad request raises RewriteError here."""

    def warm(self, document: str, cancel: threading.Event | None = None) -> int:
        """Prepare for rewrites of `document` at low priority; the prompt tokens now cached."""

    def close(self) -> None:
        """Stop background work; a generation still streaming ends at its next step."""

    def rewrite(self, document: str, instruction: str, *, cancel: threading.Event | None = None,
                **options) -> Iterator[Event]:
        """`run(Request(document, instruction, **options))`."""
        return self.run(Request(document, instruction, **options), cancel)

    def rewrite_text(self, document: str, instruction: str, **options) -> Result:
        """Run a rewrite to the end and return its Result."""
        return result_of(self.rewrite(document, instruction, **options))


def result_of(events: Iterator[Event]) -> Result:
    """Drain an event stream and return its final Result."""
    with closing(events):
        for event in events:
            if isinstance(event, Result):
                return event
    raise AssertionError("the engine ended without a result")


def check_request(request: Request) -> Request:
    """The request, if an engine can run it: text that is valid Unicode, an instruction, a document, a
    selection inside it, and the decoding fields in range. A door may call it before the model loads; an
    engine calls it once, in `run`."""
    texts = (request.document, request.instruction, *request.references, *request.stop)
    if not all(isinstance(text, str) for text in texts):
        raise RewriteError("document, instruction, references and stop strings must be text")
    check_unicode(*texts)
    check_instruction(request.instruction)
    if not request.document.strip():
        raise RewriteError("the document is empty: there is nothing to rewrite")
    if "\x00" in request.document:
        raise RewriteError("the document looks binary (it contains NUL characters)")
    check_selection(request.selection, len(request.document))
    if request.strategy is not None:
        check_strategy(request.strategy)
    if request.repairs is not None:
        check_repairs(request.repairs)
    if not isinstance(request.by_definition, bool):
        raise RewriteError(f"by_definition must be true or false, not {request.by_definition!r}")
    check_decoding(request)
    return request


def check_unicode(*texts: str) -> None:
    """Each text can be encoded as UTF-8 (a lone surrogate, as JSON's "\\ud800" makes, cannot)."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise RewriteError(f"the text is not valid Unicode (a lone surrogate at character {error.start})") \
                from None


def check_selection(selection: tuple[int, int] | None, length: int) -> None:
    if selection is None:
        return
    start, end = selection
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in selection) or not 0 <= start < end <= length:
        raise RewriteError(f"selection {start}:{end} is not a non-empty range inside the document (0:{length})")


def check_decoding(request: Request) -> Request:
    """The request, if its sampling and length fields are numbers in range; the token limit against the
    context is the engine's to check, once it has the prompt."""
    whole = (request.max_new_tokens, request.draft_tokens, request.max_piece_tokens, request.seed)
    if not all(n is None or isinstance(n, int) and not isinstance(n, bool) for n in (*whole, request.top_k)):
        raise RewriteError("max_new_tokens, draft_tokens, max_piece_tokens, seed and top_k must be whole numbers")
    if any(n is not None and n < 1 for n in whole[:3]):
        raise RewriteError("max_new_tokens, draft_tokens and max_piece_tokens must be at least 1")
    if request.seed is not None and not 0 <= request.seed < SEEDS:
        raise RewriteError(f"seed must be a whole number in [0, 2**63), not {request.seed}")
    numbers = (request.temperature, request.top_p)
    if not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        raise RewriteError("temperature and top_p must be numbers")
    if not 0 <= request.temperature < float("inf") or request.top_k < 0 or not 0 < request.top_p <= 1:
        raise RewriteError("temperature must be a number >= 0, top_k >= 0 and top_p in (0, 1]")  # NaN fails them all
    return request


def check_strategy(strategy: str) -> str:
    """The strategy, if the engine has it; a front door may check it before the model loads."""
    if strategy not in STRATEGIES:
        raise RewriteError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    return strategy


def check_repairs(repairs: int) -> int:
    """The most repair passes an answer gets, if it is a count."""
    if not isinstance(repairs, int) or isinstance(repairs, bool) or repairs < 0:
        raise RewriteError(f"repairs must be a whole number >= 0 (0 turns repair off), not {repairs!r}")
    return repairs


def check_instruction(instruction: str) -> str:
    """The instruction, if it says something; a front door may check it before the model loads."""
    if not instruction.strip():
        raise RewriteError("the instruction is empty: say what to change")
    return instruction
