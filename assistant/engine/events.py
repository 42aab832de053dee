"""What the engine yields: Queued while a request waits, a Delta per decoding step, Repairing before
each repair pass (whose own steps are not streamed), then one Result.

Its own module because two modules make them: the engine (one pass) and long_documents (which
stitches the passes of a long document's pieces into one stream); the engine imports
long_documents, so neither could import the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from assistant.checks import Check, Problem
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
class Repairing:
    """A repair pass starts: the answer so far introduced `problems` (offsets in that answer). Its steps
    are not streamed; the Result's text is the answer kept."""

    problems: tuple[Problem, ...]
    attempt: int  # 1 for the first repair pass


@dataclass(frozen=True)
class Repair:
    """One repair: the problems of the answer it repaired and of its own answer (offsets in each), whether
    its answer was kept (it finished with fewer problems than before), its cost, and whether it was a
    pass of the model or fixes made without one (`model` false: then `stats` is NOTHING)."""

    attempt: int
    problems_before: tuple[Problem, ...]
    problems_after: tuple[Problem, ...]
    kept: bool
    stats: Stats  # the pass's generation
    seconds: float  # the pass's wall time, its check included
    model: bool = True

    def to_json(self) -> dict:
        return {"attempt": self.attempt, "problems_before": [p.message for p in self.problems_before],
                "problems_after": [p.message for p in self.problems_after], "kept": self.kept,
                "seconds": round(self.seconds, 4), "new_tokens": self.stats.new_tokens, "model": self.model}


@dataclass(frozen=True)
class Definitions:
    """How an edit made definition by definition went (engine/definitions.py), by qualified name: the
    definitions its passes changed, gave back unchanged, or failed (cut, or not a whole definition: left as
    they were), and those skipped because they already had what was asked; of those passed over, the ones
    given a second, sharper pass (`retried`), and those whose second answer stands (`sharpened`)."""

    edited: tuple[str, ...]
    unchanged: tuple[str, ...]
    failed: tuple[str, ...]
    skipped: tuple[str, ...]
    retried: tuple[str, ...] = ()
    sharpened: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {name: list(getattr(self, name)) for name in
                ("edited", "unchanged", "failed", "skipped", "retried", "sharpened")}


NO_CHANGE = {"none": "the answer is the text as it was",  # Result.change of an answer that made no edit
             "layout": "only the layout changed (whitespace, line breaks or quotes)",
             "comments": "only comments changed"}


@dataclass(frozen=True)
class Result:
    """The answer. `stats` covers every pass, repairs included (each Repair has its own); `check` is the
    check of the answer kept (None when the answer did not finish, so nothing was checked), its
    problems in offsets of `text`; `check_seconds` is the time the first answer's check took (a repair's
    is in its `seconds`). `change` says whether a finished answer changed anything (`checks.change_kind`:
    "none", "layout", "comments" or "edit"; None when it did not finish): a door reports an answer that
    made no edit as "no change made", never as a plain success."""

    text: str
    spans: list[Span]  # merged: output range -> document range
    stats: Stats
    stopped: str  # "eos", "length", "stop" or "cancelled"; of several pieces, the one that did not finish
    model: str  # the name asked for
    weights: str  # the format the model's linear layers ran in
    token_spans: list[Span] = field(default_factory=list, repr=False)  # one per shown token
    pieces: list[tuple[int, int]] = field(default_factory=list)  # document ranges rewritten one pass each
    check: Check | None = None
    repairs: tuple[Repair, ...] = ()
    check_seconds: float = 0.0
    change: str | None = None
    definitions: Definitions | None = None  # set when the edit was made definition by definition

    @property
    def unchanged(self) -> bool:
        """Whether the finished answer made no change but to layout (whitespace, quotes) or comments."""
        return self.change is not None and self.change != "edit"

    @property
    def change_note(self) -> str | None:
        """What every door says of a finished answer that made no edit ("no change made: only comments
        changed"); None for any other answer."""
        return f"no change made: {NO_CHANGE[self.change]}" if self.unchanged else None

    @property
    def finished(self) -> bool:
        """Whether the answer is complete: no piece stopped on the token limit or was cancelled."""
        return self.stopped in ("eos", "stop")

    @property
    def copied_share(self) -> float:
        """The share of the answer's characters copied from the document."""
        copied = sum(end - start for start, end in (span.output for span in self.spans))
        return copied / len(self.text) if self.text else 0.0

    @property
    def problems(self) -> tuple[Problem, ...]:
        """The problems the answer kept introduced (none when it was not checked)."""
        return self.check.problems if self.check is not None else ()

    def to_json(self) -> dict:
        check = self.check or Check(notes=("unchecked: the answer did not finish",))
        return {"text": self.text, "spans": [s.to_json() for s in self.spans], "stats": self.stats.to_json(),
                "stopped": self.stopped, "model": self.model, "weights": self.weights,
                "problems": [problem_json(p, self.text) for p in self.problems],
                "checks": {"ran": list(check.ran), "notes": list(check.notes), "seconds": round(self.check_seconds, 4)},
                "repairs": [repair.to_json() for repair in self.repairs], "change": self.change,
                "definitions": self.definitions.to_json() if self.definitions else None}


def problem_json(problem: Problem, text: str) -> dict:
    """A problem as the doors read it: its offsets in `text`, and the 0-based line and character (in Python
    characters) where it starts."""
    line = text.count("\n", 0, problem.start)
    return problem.to_json() | {"line": line, "character": problem.start - (text.rfind("\n", 0, problem.start) + 1)}


Event = Union[Queued, Delta, Repairing, Result]
