"""What the engine yields: Queued while a request waits, a Delta per decoding step, then one Result.

Its own module because two modules make them: the engine (one pass) and long_documents (which
stitches the passes of a long document's pieces into one stream); the engine imports
long_documents, so neither could import the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from assistant.engine.output import Span


@dataclass(frozen=True)
class Queued:
    ahead: int  # requests that will run before this one


@dataclass(frozen=True)
class Stats:
    new_tokens: int
    steps: int
    seconds: float  # generation time, model loading excluded
    prompt_tokens: int
    drafted: int
    accepted: int
    first_token_seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds else 0.0

    @property
    def mean_accepted(self) -> float:
        """Tokens gained per step (accepted draft tokens plus the model's own), as in the PLD+ paper."""
        return self.new_tokens / self.steps if self.steps else 0.0

    def to_json(self) -> dict:
        return {"new_tokens": self.new_tokens, "steps": self.steps, "seconds": round(self.seconds, 4),
                "tokens_per_second": round(self.tokens_per_second, 2), "mean_accepted": round(self.mean_accepted, 3),
                "prompt_tokens": self.prompt_tokens, "drafted": self.drafted, "accepted": self.accepted,
                "first_token_seconds": round(self.first_token_seconds, 4)}


NOTHING = Stats(0, 0, 0.0, 0, 0, 0, 0.0)


@dataclass(frozen=True)
class Delta:
    """What one decoding step made visible, and the running figures of the whole answer."""

    text: str
    tokens: list[Span]  # each newly shown token: its output range and the document range it was copied from
    new_tokens: int
    drafted: int
    accepted: int
    seconds: float
    # The answer so far (every piece of a long document), counted as its Result's stats will be:
    # what a front door shows while it streams (tokens_per_second, mean_accepted).
    totals: Stats = NOTHING


@dataclass(frozen=True)
class Result:
    text: str
    spans: list[Span]  # merged: output range -> document range
    stats: Stats
    stopped: str  # "eos", "length", "stop" or "cancelled"; of several pieces, the one that did not finish
    model: str  # the name asked for
    weights: str  # the format the model's linear layers ran in
    token_spans: list[Span] = field(default_factory=list, repr=False)  # one per shown token
    pieces: list[tuple[int, int]] = field(default_factory=list)  # document ranges rewritten one pass each

    @property
    def finished(self) -> bool:
        """Whether the answer is complete: no piece stopped on the token limit or was cancelled."""
        return self.stopped in ("eos", "stop")

    @property
    def copied_share(self) -> float:
        """The share of the answer's characters copied from the document."""
        copied = sum(end - start for start, end in (span.output for span in self.spans))
        return copied / len(self.text) if self.text else 0.0

    def to_json(self) -> dict:
        return {"text": self.text, "spans": [s.to_json() for s in self.spans], "stats": self.stats.to_json(),
                "stopped": self.stopped, "model": self.model, "weights": self.weights}


Event = Union[Queued, Delta, Result]
